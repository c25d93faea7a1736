"""``time_left()``: the running call's remaining time, for code that must not outlive its row."""
import asyncio

import aiospark
from aiospark.core import AsyncFunction, RetryStrategy, time_left

from ._util import run, run_operator


def test_outside_a_call_there_is_no_deadline():
    assert time_left() is None

    async def main():
        return time_left()

    assert run(main()) is None


def test_a_call_sees_its_rows_timeout_shrinking_across_retries():
    seen = {}

    async def fetch(x):
        seen.setdefault(x, []).append(time_left())
        if len(seen[x]) < 3:
            raise ConnectionError("again")
        await asyncio.sleep(0)
        return x

    out = run(run_operator(fetch, [1, 2], ordered=True, timeout=5.0,
                           retry=RetryStrategy.exponential_backoff(3, 0.05, 1.0)))
    assert out.values() == [1, 2]
    for lefts in seen.values():
        assert len(lefts) == 3
        assert 4.0 < lefts[0] <= 5.0
        # each back-off (0.05 s, 0.1 s) is taken out of the same deadline
        assert lefts[0] - lefts[1] >= 0.04 and lefts[1] - lefts[2] >= 0.09
    assert time_left() is None  # nothing leaks into the caller's context


def test_without_a_timeout_calls_have_no_deadline():
    lefts = []

    class Lookup(AsyncFunction):
        async def async_invoke(self, x):
            lefts.append(aiospark.time_left())
            return [x]

    out = run(run_operator(Lookup(), [1, 2, 3], ordered=False, timeout=None))
    assert sorted(out.values()) == [1, 2, 3] and lefts == [None] * 3


def test_each_call_has_its_own_deadline():
    lefts = {}

    async def fetch(x):
        lefts[x] = time_left()
        await asyncio.sleep(0.2 if x == 0 else 0)
        return x

    async def main():
        from aiospark.core import AsyncWaitOperator

        from ._util import Collector
        out = Collector()
        op = AsyncWaitOperator(fetch, out, ordered=False, capacity=1, timeout=2.0)
        await op.open()
        await op.process_element(0)  # capacity 1: row 1 enters the queue once row 0 is done
        await op.process_element(1)
        await op.finish()
        await op.close()
        return out

    assert sorted(run(main()).values()) == [0, 1]
    # row 1's clock started when it entered the queue (after row 0's 0.2 s), not when row 0 did
    assert all(1.9 < lefts[row] <= 2.0 for row in (0, 1)), lefts


def test_a_batch_sees_the_deadline_of_its_oldest_row():
    lefts = []

    class Batch(AsyncFunction):
        async def async_invoke(self, values):
            lefts.append(time_left())
            return [[v * 10] for v in values]

    out = run(run_operator(Batch(), list(range(8)), ordered=True, timeout=3.0, batch_size=4, batch_delay=0.05))
    assert out.values() == [v * 10 for v in range(8)]
    assert len(lefts) == 2 and all(2.5 < left <= 3.0 for left in lefts)
