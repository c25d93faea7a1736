"""Calls that complete during their first step are emitted at once, never queued -- but only when
nothing held has to be emitted before them (ordering and watermark barriers still hold)."""

import asyncio

import pytest

from aiospark.core import AsyncFunction, AsyncFunctionError, AsyncWaitOperator, Record, Watermark

from ._util import Collector, Gates, run, settle


async def instant(x):
    return x


def gated_fn(gates, keys):
    """Calls of ``keys`` wait for their gate; the others complete in their first step."""
    async def fn(x):
        if x in keys:
            await gates[x].wait()
        return x
    return fn


def test_instant_call_is_emitted_during_process_element_and_never_held():
    out = Collector()

    async def main():
        op = AsyncWaitOperator(instant, out, ordered=True, capacity=2)
        await op.open()
        await op.process_element(1, 10)
        assert out == [Record(1, 10)] and len(op) == 0 and op.snapshot_state() == []
        await op.process_element(2)
        assert out.values() == [1, 2]
        assert op.metrics.inflight_peak == 1 and op.metrics.calls == 2 and op.metrics.successes == 2
        await op.finish()
        await op.close()

    run(main())


def test_ordered_instant_call_waits_behind_a_pending_one():
    out = Collector()

    async def main():
        gates = Gates()
        op = AsyncWaitOperator(gated_fn(gates, {0}), out, ordered=True, capacity=10)
        await op.open()
        await op.process_element(0)
        await op.process_element(1)
        await op.process_element(2)
        assert out == [] and len(op) == 3
        assert [r.value for r in op.snapshot_state()] == [0, 1, 2]
        gates.open(0)
        await op.finish()
        assert out.values() == [0, 1, 2]
        await op.close()

    run(main())


def test_unordered_instant_call_overtakes_pending_ones_in_its_segment():
    out = Collector()

    async def main():
        gates = Gates()
        op = AsyncWaitOperator(gated_fn(gates, {0}), out, ordered=False, capacity=10)
        await op.open()
        await op.process_element(0)
        await op.process_element(1)
        assert out.values() == [1] and len(op) == 1
        gates.open(0)
        await op.finish()
        assert out.values() == [1, 0]
        await op.close()

    run(main())


def test_unordered_instant_call_after_a_watermark_waits_for_the_barrier():
    out = Collector()

    async def main():
        gates = Gates()
        op = AsyncWaitOperator(gated_fn(gates, {0}), out, ordered=False, capacity=10)
        await op.open()
        await op.process_element(0, 1)
        await op.process_watermark(5)
        await op.process_element(1, 6)
        await settle()
        assert out == []
        gates.open(0)
        await op.finish()
        assert out == [Record(0, 1), Watermark(5), Record(1, 6)]
        # with the barrier gone, instant calls go straight out again
        await op.process_element(2, 7)
        assert out[-1] == Record(2, 7) and len(op) == 0
        await op.close()

    run(main())


def test_async_function_lists_are_emitted_directly_with_the_input_timestamp():
    out = Collector()

    class Split(AsyncFunction):
        async def async_invoke(self, value):
            return [] if value == 0 else [value] * value

    async def main():
        op = AsyncWaitOperator(Split(), out, ordered=False, capacity=3)
        await op.open()
        for v in range(4):
            await op.process_element(v, v * 10)
        assert out == [Record(1, 10), Record(2, 20), Record(2, 20), Record(3, 30), Record(3, 30), Record(3, 30)]
        await op.finish()
        await op.close()

    run(main())


def test_async_function_bad_result_still_fails_on_the_direct_path():
    class Bad(AsyncFunction):
        async def async_invoke(self, value):
            return value  # not a list

    async def main():
        op = AsyncWaitOperator(Bad(), Collector(), capacity=3)
        await op.open()
        with pytest.raises(AsyncFunctionError, match="must return a list"):
            await op.process_element(1)
            await op.finish()
        await op.close()

    run(main())


@pytest.mark.parametrize("ordered", [True, False])
def test_output_callable_failing_on_the_direct_path_fails_the_operator(ordered):
    emitted = []

    def output(element):
        if element.value == 2:
            raise ValueError("sink is full")
        emitted.append(element.value)

    async def fn(x):
        return x

    async def main():
        op = AsyncWaitOperator(fn, output, ordered=ordered, capacity=5)
        await op.open()
        await op.process_element(1)
        await op.process_element(2)
        with pytest.raises(AsyncFunctionError, match="output callable") as info:
            await op.process_element(3)
        assert isinstance(info.value.__cause__, ValueError)
        assert emitted == [1]
        await op.close()

    run(main())


def test_output_feeding_the_operator_again_keeps_input_order():
    """An output callable that feeds the operator (a loop-back) sees its input emitted in order."""
    out = Collector()

    def output(element):
        out.append(element)
        if element.value < 3:
            op.try_process(element.value + 10)

    async def main():
        nonlocal op
        op = AsyncWaitOperator(instant, output, ordered=True, capacity=10)
        await op.open()
        await op.process_element(1)
        await op.process_element(2)
        await op.finish()
        assert out.values() == [1, 11, 2, 12]
        await op.close()

    op = None
    run(main())


def test_unordered_completion_of_the_last_record_before_a_watermark_releases_the_barrier():
    out = Collector()

    async def main():
        gates = Gates()
        op = AsyncWaitOperator(gated_fn(gates, {0, 1}), out, ordered=False, capacity=10)
        await op.open()
        await op.process_element(0, 1)
        await op.process_watermark(2)
        await op.process_element(1, 3)
        gates.open(0)
        await settle()
        assert out == [Record(0, 1), Watermark(2)] and len(op) == 1
        gates.open(1)
        await op.finish()
        assert out[-1] == Record(1, 3) and len(op) == 0
        await op.close()

    run(main())


def test_ordered_completion_of_the_head_also_emits_the_completed_ones_behind_it():
    out = Collector()

    async def main():
        gates = Gates()
        op = AsyncWaitOperator(gated_fn(gates, {0, 1, 2}), out, ordered=True, capacity=10)
        await op.open()
        for v in range(3):
            await op.process_element(v)
        gates.open(1)
        await settle()
        assert out == [] and len(op) == 3
        gates.open(0)
        await settle()
        assert out.values() == [0, 1] and len(op) == 1
        gates.open(2)
        await op.finish()
        assert out.values() == [0, 1, 2]
        await op.close()

    run(main())


def test_a_waiting_producer_is_woken_by_a_directly_emitted_completion():
    out = Collector()

    async def main():
        gates = Gates()
        op = AsyncWaitOperator(gated_fn(gates, {0}), out, ordered=False, capacity=1)
        await op.open()
        await op.process_element(0)
        blocked = asyncio.ensure_future(op.process_element(1))
        await settle()
        assert not blocked.done()
        gates.open(0)
        await asyncio.wait_for(blocked, 1)
        await op.finish()
        assert out.values() == [0, 1]
        await op.close()

    run(main())


@pytest.mark.parametrize("ordered", [True, False])
def test_output_callable_failing_on_a_completion_fails_the_operator(ordered):
    """The same for a call that suspends and is emitted straight from its completion."""
    emitted = []

    def output(element):
        if element.value == 1:
            raise ValueError("sink is full")
        emitted.append(element.value)

    async def main():
        gates = Gates()
        op = AsyncWaitOperator(gated_fn(gates, {1, 2}), output, ordered=ordered, capacity=5)
        await op.open()
        for v in range(3):
            await op.process_element(v)
        gates.open(1)
        await settle()
        with pytest.raises(AsyncFunctionError, match="output callable") as info:
            await op.finish()
        assert isinstance(info.value.__cause__, ValueError)
        gates.open(2)
        await settle()
        assert emitted == [0]  # nothing after the failure
        await op.close()

    run(main())
