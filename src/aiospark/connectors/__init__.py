"""Lookup connectors, each a :class:`aiospark.lookup.LookupSource` on its system's asyncio client.

* :class:`HttpLookup` -- JSON over HTTP (``GET /item/{id}``, optional batch POST), sent with
  pyreqwest when installed (Python 3.11+), else aiohttp;
  :func:`aiospark.connectors.http.http_client` gives your own ``async def`` the same
  transport.
* :class:`RedisLookup` -- redis.asyncio, hashes / strings / JSON strings (MGET, pipelines).
* :class:`PostgresLookup` -- asyncpg pool, parameterised ``SELECT`` (``= ANY`` / ``unnest``).
* :mod:`aiospark.connectors.openai` -- ``OpenAIEmbeddings`` / ``OpenAIChat`` for any
  OpenAI-compatible endpoint (functions for the three entry points, not lookup sources).

Errors are :class:`ConnectorError` (``source``, ``retryable``), :class:`ConnectorTimeout`
and :class:`HttpStatusError` (``status``, ``retry_after``); they name the source by
host:port and never contain credentials. Example::

    from aiospark.connectors import RedisLookup
    users = RedisLookup("user:{id}", "name STRING, age INT", url="redis://127.0.0.1:6379/0")

Submodules are imported lazily, so using one connector does not import the others' clients.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import ConnectorError, ConnectorTimeout, is_retryable
from .secrets import Secret

__all__ = ["ConnectorError", "ConnectorTimeout", "HttpClient", "HttpLookup", "HttpStatusError",
           "PostgresLookup", "RedisLookup", "Secret", "is_retryable"]

_LAZY = {"HttpLookup": "http", "HttpStatusError": "http", "RedisLookup": "redis",
         "PostgresLookup": "postgres", "HttpClient": "http"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
