"""A function whose output is its row's key's alone (equal keys, equal outputs): the journal and
plan tests count the calls a job makes per distinct key with it. In a module of its own: Spark
pickles it by reference to the workers."""
from __future__ import annotations

from typing import Any

from tests.chaos import ServiceCall

__all__ = ["KEY_SCHEMA", "KeyCall"]

KEY_SCHEMA = "key STRING, value LONG"


class KeyCall(ServiceCall):
    """``GET /item/{key}`` of the FaultService: ``[{"key": key, "value": ...}]``."""

    async def async_invoke(self, row: Any) -> list[dict[str, Any]]:
        body = await self.fetch(row["key"])
        return [{"key": row["key"], "value": body["value"]}]
