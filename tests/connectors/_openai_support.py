"""What the OpenAI connector's tests share: the test key, the clients and two drivers (the
server fixtures, ``server`` and ``srv``, are in conftest.py)."""
from __future__ import annotations

import asyncio
from typing import Any

from aiospark.core import AsyncWaitOperator
from tests.support.operator import drive

KEY = "sk-test-S3cretKey-0123456789"
CLIENTS = ["aiohttp", "openai"]


def run(coro: Any, limit: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, limit))


async def invoke_all(fn: Any, values: list[Any]) -> list[Any]:
    """``fn.async_invoke`` for every value at once, between ``open()`` and ``close()``; exceptions
    are returned in place."""
    await fn.open()
    try:
        return await asyncio.gather(*(fn.async_invoke(v) for v in values), return_exceptions=True)
    finally:
        await fn.close()


async def through_operator(fn: Any, values: list[Any], **kwargs: Any) -> tuple[list[Any], AsyncWaitOperator]:
    """Run ``values`` through the core operator; returns (outputs, operator)."""
    out: list[Any] = []
    op = AsyncWaitOperator(fn, lambda e: out.append(e.value), **kwargs)
    await drive(op, values)
    return out, op
