"""Calls that always suspend switch to plain Tasks after a sampling window; every rule still holds."""
from __future__ import annotations

import asyncio

import pytest

from aiospark import AsyncFunction, AsyncFunctionError, AsyncWaitOperator, RetryStrategy
from aiospark.core.operator import SAMPLE_WINDOW

N = SAMPLE_WINDOW * 4  # well past the window: most calls run in direct-task mode


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def drive(op, values):
    await op.open()
    try:
        for v in values:
            await op.process_element(v)
        await op.finish()
    finally:
        await op.close()


@pytest.mark.parametrize("ordered", [True, False])
def test_results_complete_in_direct_mode(ordered):
    async def f(x):
        await asyncio.sleep(0.001 * (x % 3))
        return x

    out = []
    run(drive(AsyncWaitOperator(f, out.append, ordered=ordered, capacity=16), range(N)))
    values = [r.value for r in out]
    assert sorted(values) == list(range(N))
    if ordered:
        assert values == list(range(N))


def test_timeouts_cancel_direct_tasks_and_use_fallback():
    cancelled = []

    class Slow(AsyncFunction):
        async def async_invoke(self, x):
            try:
                await asyncio.sleep(5 if x == N - 3 else 0.001)
            except asyncio.CancelledError:
                cancelled.append(x)
                raise
            return [x]

        def timeout(self, x):
            return [-x]

    out = []
    run(drive(AsyncWaitOperator(Slow(), out.append, ordered=False, capacity=8, timeout=0.2), range(N)))
    assert sorted(r.value for r in out) == sorted(list(range(N - 3)) + [-(N - 3)] + [N - 2, N - 1])
    assert cancelled == [N - 3]


def test_failure_in_direct_mode_names_the_input():
    async def f(x):
        await asyncio.sleep(0)
        if x == N - 1:
            raise ValueError("last one")
        return x

    with pytest.raises(AsyncFunctionError, match=f"input {N - 1}") as info:
        run(drive(AsyncWaitOperator(f, lambda e: None, capacity=8), range(N)))
    assert isinstance(info.value.__cause__, ValueError)


def test_retries_after_a_direct_first_attempt():
    attempts = {}

    async def flaky(x):
        await asyncio.sleep(0)
        attempts[x] = attempts.get(x, 0) + 1
        if attempts[x] < 3:
            raise ConnectionError("again")
        return x

    out = []
    run(drive(AsyncWaitOperator(flaky, out.append, capacity=8, retry=RetryStrategy.fixed_delay(2, 0.001)),
              range(N)))
    assert [r.value for r in out] == list(range(N)) and set(attempts.values()) == {3}
