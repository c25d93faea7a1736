"""Calls that always suspend switch to plain Tasks after a sampling window; every rule still holds."""
from __future__ import annotations

import asyncio
import gc

import pytest

from aiospark import AsyncFunction, AsyncFunctionError, AsyncWaitOperator, RetryStrategy
from aiospark.core.adaptive import AdaptiveConcurrency
from aiospark.core.operator import SAMPLE_WINDOW

from ._util import feed_all

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


async def into_direct_mode(op):
    """A full sampling window of calls that suspend, all finished: direct-task mode is on."""
    await feed_all(op, list(range(-SAMPLE_WINDOW, 0)))
    while len(op):
        await asyncio.sleep(0.001)
    assert op._attempts.direct_tasks_left > 0


@pytest.mark.parametrize("ordered", [True, False])
def test_try_process_many_starts_the_room_it_has_in_tasks_at_once(ordered):
    async def f(x):
        await asyncio.sleep(0.001 * (x % 3))
        return x

    out = []

    async def main():
        op = AsyncWaitOperator(f, out.append, ordered=ordered, capacity=16)
        await op.open()
        await into_direct_mode(op)
        tasks = len(asyncio.all_tasks())
        assert op.try_process_many(list(range(100))) == 16  # all the room, in one go
        assert len(asyncio.all_tasks()) == tasks + 16 and len(op) == 16
        assert op.try_process_many(list(range(100)), 16) == 16  # full: nothing more
        await feed_all(op, list(range(100)))  # the 16 again, then the rest (duplicates are fine)
        await op.finish()
        m = op.metrics
        await op.close()
        return m

    m = run(main())
    values = [r.value for r in out if r.value >= 0]
    assert sorted(values) == sorted(list(range(16)) + list(range(100)))
    if ordered:
        assert values == list(range(16)) + list(range(100))
    assert (m.calls, m.successes) == (SAMPLE_WINDOW + 116,) * 2 and m.inflight_peak == 16


class _Echo(AsyncFunction):
    async def async_invoke(self, x):
        await asyncio.sleep(0.001)
        return [x]


def _raising_invoke(fn, bad, started):
    """An invoke that cannot make the call for ``bad`` (as a wrong-arity partial cannot)."""
    real = fn.async_invoke

    def invoke(x):
        if x == bad:
            raise TypeError(f"cannot call with {x}")
        started.append(x)
        return real(x)

    fn.async_invoke = invoke
    return fn


def test_a_call_that_cannot_be_made_in_a_batch_of_tasks_gets_its_error_row_and_the_rest_run():
    started, out = [], []
    fn = _raising_invoke(_Echo(), 5, started)

    async def main():
        op = AsyncWaitOperator(fn, out.append, capacity=16, on_error=lambda v, e: [("error", v, str(e))])
        await op.open()
        await into_direct_mode(op)
        assert op.try_process_many(list(range(10))) == 10
        await op.finish()
        m = op.metrics
        await op.close()
        return m

    m = run(main())
    assert [r.value for r in out if r.value not in range(-SAMPLE_WINDOW, 0)] == \
        [0, 1, 2, 3, 4, ("error", 5, "cannot call with 5"), 6, 7, 8, 9]
    assert (m.calls, m.error_rows) == (SAMPLE_WINDOW + 10, 1)


# the Tasks of 0-4 are cancelled before their first step, so their coroutines never start
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_a_call_that_cannot_be_made_in_a_batch_of_tasks_fails_the_operator_and_stops_the_batch():
    started = []
    fn = _raising_invoke(_Echo(), 5, started)

    async def main():
        op = AsyncWaitOperator(fn, lambda e: None, capacity=16)
        await op.open()
        await into_direct_mode(op)
        with pytest.raises(AsyncFunctionError, match="input 5") as info:
            op.try_process_many(list(range(10)))
        assert isinstance(info.value.__cause__, TypeError)
        assert op.metrics.calls == SAMPLE_WINDOW + 6  # up to and including the one that failed
        await op.close()

    run(main())
    gc.collect()  # their warnings, here
    assert [x for x in started if x >= 0] == [0, 1, 2, 3, 4]


def test_batches_of_tasks_keep_to_the_adaptive_limit_and_task_factories():
    made, over = [], []
    live = [0]

    async def main():
        loop = asyncio.get_running_loop()

        def factory(lp, coro, **kwargs):
            made.append(coro)
            return asyncio.Task(coro, loop=lp, **kwargs)

        async def f(x):
            live[0] += 1
            if live[0] > op.adaptive.limit:
                over.append((x, live[0], op.adaptive.limit))
            await asyncio.sleep(0.001)
            live[0] -= 1
            return x

        loop.set_task_factory(factory)
        out = []
        op = AsyncWaitOperator(f, out.append, capacity=AdaptiveConcurrency(64, initial=4))
        await op.open()
        await feed_all(op, list(range(400)))
        await op.finish()
        await op.close()
        return out

    out = run(main())
    assert [r.value for r in out] == list(range(400))
    assert not over and len(made) >= 400 - SAMPLE_WINDOW
