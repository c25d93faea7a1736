"""What happens to the attempts the operator gives up on (core engine, one asyncio loop, no Spark).

Deterministic reproductions of the two defects the Spark-level chaos runs showed (see
docs/reliability.md, "Known defects"):

* after a timeout, the element's slot is freed while its cancelled attempt is still unwinding, so
  more than ``capacity`` attempts are alive at once (test_timeouts.py sees it as connections);
* an attempt that finished with an exception just as its deadline fired is dropped without its
  exception being retrieved, and asyncio reports "Task exception was never retrieved".
"""
from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from aiospark import AsyncWaitOperator


def test_cancelled_attempts_count_against_capacity():
    """capacity=4, every call hangs, timeout 0.05 s, 12 elements: at no moment may more than 4
    attempts be alive (entered and not yet unwound -- an unwinding attempt still holds whatever it
    opened, e.g. a connection that aiohttp closes while the cancellation propagates)."""
    capacity, n = 4, 12
    state = {"alive": 0, "peak": 0, "entered": 0}

    async def hang(value: int) -> int:
        state["alive"] += 1
        state["entered"] += 1
        state["peak"] = max(state["peak"], state["alive"])
        try:
            await asyncio.sleep(3600)
        finally:
            state["alive"] -= 1
        return value

    async def main() -> list[Any]:
        out: list[Any] = []
        op = AsyncWaitOperator(hang, out.append, ordered=False, timeout=0.05, capacity=capacity,
                               on_error=lambda value, exc: [type(exc).__name__])
        await op.open()
        for i in range(n):
            await op.process_element(i)
        await op.finish()
        await op.close()
        return out

    out = asyncio.run(asyncio.wait_for(main(), 30))
    assert [r.value for r in out] == ["AsyncTimeoutError"] * n
    assert state["entered"] == n and state["alive"] == 0
    assert state["peak"] <= capacity, (
        f"{state['peak']} attempts alive at once with capacity={capacity}: a timed-out element's slot "
        "is reused before its cancelled attempt has unwound")


def test_an_attempt_abandoned_at_its_deadline_has_its_exception_retrieved():
    """The attempt fails (ValueError) in the same loop iteration in which its deadline fires, just
    before the deadline handler runs: the element correctly becomes an AsyncTimeoutError, but the
    attempt's Task must not be left with an unretrieved exception (asyncio would log it with a full
    traceback, looking like an error that got lost)."""
    reported: list[dict[str, Any]] = []

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        answer = loop.create_future()

        async def call(value: int) -> int:
            return await answer  # suspends: the attempt runs as its own Task

        def late_failure() -> None:
            # the answer fails, and the loop is then held (as by a busy neighbour) past the deadline:
            # in the next iteration the attempt's Task finishes first, then the deadline timer runs
            answer.set_exception(ValueError("late failure"))
            time.sleep(0.15)

        out: list[Any] = []
        op = AsyncWaitOperator(call, out.append, timeout=0.1, capacity=1,
                               on_error=lambda value, exc: [type(exc).__name__])
        await op.open()
        await op.process_element(1)
        loop.call_later(0.05, late_failure)
        await op.finish()
        await op.close()
        await asyncio.sleep(0.05)
        gc.collect()
        await asyncio.sleep(0)
        return out

    out = asyncio.run(asyncio.wait_for(main(), 30))
    gc.collect()
    assert [r.value for r in out] in (["AsyncTimeoutError"], ["ValueError"])
    unretrieved = [c for c in reported if "never retrieved" in c.get("message", "")]
    assert unretrieved == [], f"asyncio reported: {[(c['message'], c.get('exception')) for c in unretrieved]}"
