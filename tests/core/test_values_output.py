"""``AsyncWaitOperator(values=True)``: the output gets each entry's results as one list of plain
values (what the Spark bridge uses), through the same emit path and ordering policy."""
import asyncio

import pytest

from aiospark.core import AsyncFunction, AsyncWaitOperator, Record, Watermark

from ._util import feed_all, run


class Lists(list):
    """An output for values=True: records every list it is handed."""

    def __call__(self, results):
        self.append(list(results))


async def _delayed(x):
    await asyncio.sleep(0.001 * (5 - x % 5))  # later inputs of each group of five finish first
    return x * 10


async def _run(function, values, **kwargs):
    out = Lists()
    op = AsyncWaitOperator(function, out, values=True, timeout=5.0, **kwargs)
    await op.open()
    await feed_all(op, values)
    await op.finish()
    await op.close()
    return out


def test_ordered_outputs_are_plain_values_in_input_order():
    out = run(_run(_delayed, range(20), ordered=True, capacity=7))
    assert out == [[x * 10] for x in range(20)]
    assert not any(type(v) is Record for lst in out for v in lst)


def test_unordered_outputs_follow_completion_and_lose_nothing():
    out = run(_run(_delayed, range(20), ordered=False, capacity=20))
    flat = [v for lst in out for v in lst]
    assert sorted(flat) == [x * 10 for x in range(20)]
    assert flat != sorted(flat)  # completion order, not input order


def test_an_async_function_s_several_or_no_outputs_stay_one_list_per_input():
    class Fan(AsyncFunction):
        async def async_invoke(self, value):
            return [value] * value  # 0 outputs for 0, 2 for 2

    out = run(_run(Fan(), [0, 1, 2, 3], ordered=True, capacity=4))
    assert out == [[], [1], [2, 2], [3, 3, 3]]


def test_a_batch_leaves_as_one_list_in_element_order():
    async def batch(values):
        await asyncio.sleep(0.001)
        return [v + 100 for v in values]

    out = run(_run(batch, range(10), ordered=True, capacity=8, batch_size=4, batch_delay=0.01))
    assert [v for lst in out for v in lst] == [v + 100 for v in range(10)]
    assert max(len(lst) for lst in out) == 4  # a full batch is handed over whole


def test_a_batch_of_an_async_function_flattens_each_element_s_outputs():
    class Pairs(AsyncFunction):
        async def async_invoke(self, values):
            return [[v, -v] for v in values]

    out = run(_run(Pairs(), [1, 2, 3], ordered=True, capacity=4, batch_size=3))
    assert [v for lst in out for v in lst] == [1, -1, 2, -2, 3, -3]


def test_watermarks_are_refused_with_the_fix_named():
    async def scenario():
        async def same(x):
            return x

        op = AsyncWaitOperator(same, Lists(), values=True)
        await op.open()
        try:
            with pytest.raises(ValueError, match="values=False"):
                await op.process_watermark(5)
        finally:
            await op.close()

    run(scenario())


def test_a_snapshot_still_holds_records():
    async def scenario():
        release = asyncio.Event()

        async def held(x):
            await release.wait()
            return x

        op = AsyncWaitOperator(held, Lists(), values=True, capacity=3)
        await op.open()
        await feed_all(op, [1, 2])
        assert op.snapshot_state() == [Record(1), Record(2)]
        release.set()
        await op.finish()
        await op.close()

    run(scenario())


def test_a_snapshot_with_a_watermark_is_refused_on_restore():
    """Restoring event-time state into a values=True operator fails at open(), naming the fix,
    instead of dropping the watermark."""
    async def scenario():
        async def same(x):
            return x

        op = AsyncWaitOperator(same, Lists(), values=True)
        try:
            with pytest.raises(ValueError, match="values=False"):
                await op.open(restored=[Record(1), Watermark(2)])
        finally:
            await op.close()

    run(scenario())
