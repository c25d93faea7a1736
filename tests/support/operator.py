"""Driving a core operator through its whole life in a test: open, every value, finish, close."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiospark.core import AsyncWaitOperator


async def drive(op: AsyncWaitOperator, values: Iterable[Any]) -> None:
    """``open()``, ``process_element`` for every value, ``finish()``; ``close()`` even on failure."""
    await op.open()
    try:
        for v in values:
            await op.process_element(v)
        await op.finish()
    finally:
        await op.close()
