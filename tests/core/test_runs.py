"""``try_process_many``: calls that complete during their first step are started a run at a time --
with the same results, order, metrics, failures and task semantics as one ``try_process`` each."""

import asyncio
import contextvars
import time
import warnings

import pytest

from aiospark.core import AsyncFunction, AsyncFunctionError, AsyncWaitOperator, BlockedLoopWarning, Record
from aiospark.core import eager

from ._util import Collector, Gates, feed_all, run


async def double(x):
    return 2 * x


def through(fn, values, **kwargs):
    """Every value through a fresh operator (ordered unless told), fed as a driver does; returns
    what was emitted and the operator's metrics."""
    out = Collector()

    async def main():
        op = AsyncWaitOperator(fn, out, **{"ordered": True, "capacity": 3, **kwargs})
        await op.open()
        await feed_all(op, values)
        await op.finish()
        await op.close()
        return op.metrics

    return out, run(main())


@pytest.mark.parametrize("ordered", [True, False])
def test_a_run_of_instant_calls_is_emitted_in_order_with_its_metrics(ordered):
    out = Collector()

    async def main():
        op = AsyncWaitOperator(double, out, ordered=ordered, capacity=4)
        await op.open()
        assert op.try_process_many(list(range(1000)), 0, 7) == 1000  # capacity 4: instant calls hold no slot
        assert out == [Record(2 * i, 7) for i in range(1000)] and len(op) == 0
        await op.finish()
        m = op.metrics
        assert (m.calls, m.successes, m.failures, m.latency_count) == (1000, 1000, 0, 1000)
        assert m.inflight_peak == 1
        await op.close()

    run(main())


def test_start_index_and_the_returned_index():
    out = Collector()

    async def main():
        op = AsyncWaitOperator(double, out, capacity=2)
        await op.open()
        assert op.try_process_many([1, 2, 3], 1) == 3
        assert op.try_process_many([1, 2, 3], 3) == 3
        assert op.try_process_many([], 0) == 0
        assert out.values() == [4, 6]
        await op.close()

    run(main())


@pytest.mark.parametrize("ordered", [True, False])
def test_suspending_calls_take_slots_and_the_run_stops_when_none_is_left(ordered):
    out = Collector()

    async def main():
        gates = Gates()

        async def fn(x):
            if x % 3 == 0:
                await gates[x].wait()
            return x

        op = AsyncWaitOperator(fn, out, ordered=ordered, capacity=2)
        await op.open()
        values = list(range(9))
        pos = op.try_process_many(values)
        # 0 suspends (slot 1); then 1, 2 complete (ordered: held behind 0); 3 suspends (slot 2)
        if ordered:
            assert pos == 2 and out == []  # behind a held call, 1 goes the one-by-one way and is held
        else:
            assert pos == 4 and out.values() == [1, 2]
        for k in (0, 3, 6):
            gates.open(k)
        await feed_all(op, values[pos:])
        await op.finish()
        assert (out.values() == values) if ordered else (sorted(out.values()) == values)
        await op.close()

    run(main())


def test_a_failing_call_fails_the_operator_after_the_rows_before_it():
    out = Collector()

    async def fn(x):
        if x == 5:
            raise ValueError("bad five")
        return x

    async def main():
        op = AsyncWaitOperator(fn, out, ordered=True, capacity=3)
        await op.open()
        with pytest.raises(AsyncFunctionError, match="bad five") as info:
            op.try_process_many(list(range(10)))
        assert "5" in str(info.value) and isinstance(info.value.__cause__, ValueError)
        assert out.values() == [0, 1, 2, 3, 4]
        with pytest.raises(AsyncFunctionError, match="bad five"):
            op.try_process_many(list(range(10)), 6)
        await op.close()

    run(main())


def test_on_error_rows_keep_their_place_among_instant_results():
    async def fn(x):
        if x % 4 == 1:
            raise KeyError(x)
        return x

    out, metrics = through(fn, list(range(10)), on_error=lambda v, e: [f"err {v}"])
    assert out.values() == [0, "err 1", 2, 3, 4, "err 5", 6, 7, 8, "err 9"]
    assert metrics.error_rows == 3 and metrics.calls == 10


def test_an_async_function_returning_a_non_list_fails_after_earlier_rows():
    class Bad(AsyncFunction):
        async def async_invoke(self, x):
            return x if x == 3 else [x, -x]

    out, _ = through(Bad(), [1, 2, 3, 4], on_error=lambda v, e: [repr(e)[:9]])
    assert out.values() == [1, -1, 2, -2, "TypeError", 4, -4]


def test_an_output_callable_that_raises_fails_the_operator():
    calls = []

    def output(element):
        calls.append(element)
        if len(calls) == 3:
            raise RuntimeError("sink down")

    async def main():
        op = AsyncWaitOperator(double, output, capacity=3)
        await op.open()
        op.try_process_many(list(range(10)))
        assert len(calls) == 3
        with pytest.raises(AsyncFunctionError, match="sink down"):
            op.try_process_many(list(range(10)), 5)
        await op.close()

    run(main())


def test_calls_that_cannot_be_created_fail_their_elements():
    async def takes_nothing():  # called with the row: TypeError before any coroutine exists
        return 1

    out, metrics = through(takes_nothing, [1, 2, 3], capacity=2, on_error=lambda v, e: [(v, type(e).__name__)])
    assert out.values() == [(1, "TypeError"), (2, "TypeError"), (3, "TypeError")]
    assert metrics.calls == 3 and metrics.failures == 3


def test_a_bad_start_index_is_refused_with_what_to_pass():
    async def main():
        op = AsyncWaitOperator(double, Collector(), capacity=2)
        await op.open()
        for bad in (-1, 1.0, True, "0"):
            with pytest.raises(ValueError, match="start must be an index >= 0"):
                op.try_process_many([1, 2], bad)
        await op.close()

    run(main())


def test_an_operator_not_open_or_closed_refuses_a_run():
    async def main():
        op = AsyncWaitOperator(double, Collector(), capacity=2)
        with pytest.raises(RuntimeError, match="not open"):
            op.try_process_many([1])
        await op.open()
        await op.close()
        with pytest.raises(RuntimeError, match="closed"):
            op.try_process_many([1])

    run(main())


def test_calls_see_a_current_task_of_their_own_and_their_own_context():
    var = contextvars.ContextVar("var", default="unset")
    seen = []

    async def fn(x):
        seen.append((asyncio.current_task(), var.get()))
        var.set(x)  # must not leak into the next call
        async with asyncio.timeout(5):  # looks itself up through the current task
            if x == 2:
                await asyncio.sleep(0)
        return x

    out = Collector()

    async def main():
        me = asyncio.current_task()
        op = AsyncWaitOperator(fn, out, ordered=True, capacity=3)
        await op.open()
        await feed_all(op, [0, 1, 2, 3])
        assert asyncio.current_task() is me and var.get() == "unset"
        await op.finish()
        await op.close()

    run(main())
    assert out.values() == [0, 1, 2, 3]
    tasks = [t for t, _ in seen]
    assert all(t is not None for t in tasks) and len({id(t) for t in tasks}) == 4
    assert [v for _, v in seen] == ["unset"] * 4


def test_a_cancel_requested_during_the_first_step_reaches_the_task():
    async def fn(x):
        if x == 1:
            asyncio.current_task().cancel()
            await asyncio.sleep(1)
        return x

    out, _ = through(fn, [0, 1, 2], on_error=lambda v, e: [type(e).__name__])
    assert out.values() == [0, "CancelledError", 2]


def test_a_cancel_asked_by_a_call_that_completed_at_once_does_not_reach_the_next_call():
    async def fn(x):
        task = asyncio.current_task()
        if x in (0, 2):
            task.cancel()  # then returns without suspending: nothing left to cancel
            if x == 2:
                task.uncancel()
            return x
        assert task.cancelling() == 0
        await asyncio.sleep(0)  # suspends: a replayed cancel would end it here
        return x

    out, _ = through(fn, [0, 1, 2, 3], on_error=lambda v, e: [type(e).__name__])
    assert out.values() == [0, 1, 2, 3]


def test_the_task_a_call_kept_is_its_own_and_later_calls_get_others():
    kept, seen = {}, []

    async def fn(x):
        task = asyncio.current_task()
        seen.append((x, id(task)))
        if x % 2 == 0:
            kept[x] = task  # kept after the call: must never stand in for a later call
        return x

    out, _ = through(fn, list(range(8)))
    assert out.values() == list(range(8))
    for x, task in kept.items():
        assert not [later for later, seen_id in seen if later > x and seen_id == id(task)]
        assert task.get_loop() is not None and not task.cancelling()


def blocking_warnings(fn, values):
    """Start ``values`` in one try_process_many (capacity 5); returns how many started, the
    BlockedLoopWarnings raised meanwhile and the seconds counted as blocked."""
    async def main():
        op = AsyncWaitOperator(fn, Collector(), capacity=5)
        await op.open()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            started = op.try_process_many(values)
        await op.close()
        return started, [w for w in caught if issubclass(w.category, BlockedLoopWarning)], op.blocked_seconds

    return run(main())


def test_first_steps_that_block_the_loop_warn_once():
    async def blocks_in_a_run(x):  # a name of its own: warnings are rate-limited per function name
        time.sleep(0.06)
        return x

    started, warned, blocked = blocking_warnings(blocks_in_a_run, [1, 2, 3, 4])
    assert started == 4 and warned and blocked >= 0.2


def test_one_blocking_step_among_fast_ones_does_not_warn():
    async def blocks_now_and_then_in_a_run(x):
        if x % 2:
            time.sleep(0.06)
        return x

    started, warned, _ = blocking_warnings(blocks_now_and_then_in_a_run, [0, 1, 2, 3, 4, 5])
    assert started == 6 and not warned


def test_calls_that_always_suspend_switch_to_direct_tasks_and_still_complete():
    out = Collector()

    async def slow(x):
        await asyncio.sleep(0)
        return x

    async def main():
        op = AsyncWaitOperator(slow, out, ordered=True, capacity=50)
        await op.open()
        await feed_all(op, list(range(500)))
        assert op._attempts.direct_tasks_left > 0  # a full window suspended: no runs for a while
        await op.finish()
        assert out.values() == list(range(500))
        await op.close()

    run(main())


def test_first_steps_reports_each_way_a_run_ends():
    async def fn(x):
        if x == "fail":
            raise ValueError(x)
        if x == "wait":
            await asyncio.sleep(0)
        return x

    async def main():
        loop = asyncio.get_running_loop()
        results, latencies = [], []
        assert eager.first_steps(fn, [1, 2], 0, 2, loop, results, latencies, 1.0)[:3] == (2, eager.DONE, None)
        assert results == [1, 2] and len(latencies) == 2
        nxt, kind, exc, _ = eager.first_steps(fn, [3, "fail", 4], 0, 3, loop, results, latencies, 1.0)
        assert (nxt, kind, type(exc)) == (1, eager.FAILED, ValueError) and results == [1, 2, 3]
        nxt, kind, task, _ = eager.first_steps(fn, ["wait", 5], 0, 2, loop, results, latencies, 1.0)
        assert (nxt, kind) == (0, eager.PENDING) and await task == "wait"
        nxt, kind, exc, took = eager.first_steps(lambda x: 1 / 0, [1], 0, 1, loop, [], [], 1.0)
        assert (nxt, kind, type(exc), took) == (0, eager.FAILED, ZeroDivisionError, 0.0)
        nxt, kind, _, took = eager.first_steps(fn, [6, 7], 0, 2, loop, results, latencies, -1.0)
        assert (nxt, kind) == (1, eager.DONE) and took >= 0.0  # "slow" after the first: the run stops

    run(main())


def test_output_many_takes_a_run_in_one_call_and_output_the_rest():
    out, many = Collector(), []

    async def fn(x):
        if x == 3:
            await asyncio.sleep(0)
        return x

    async def main():
        op = AsyncWaitOperator(fn, out, ordered=False, capacity=5,
                               output_many=lambda values, ts: many.append((list(values), ts)))
        await op.open()
        assert op.try_process_many([0, 1, 2, 3, 4, 5], 0, 9) == 6
        await op.process_element(6, 8)  # one element alone goes through output
        await op.finish()
        await op.close()

    run(main())
    assert many == [([0, 1, 2], 9), ([4, 5], 9)]
    assert out == [Record(6, 8), Record(3, 9)]


def test_output_many_that_raises_fails_the_operator():
    def broken(values, ts):
        raise OSError("sink gone")

    async def main():
        op = AsyncWaitOperator(double, Collector(), capacity=5, output_many=broken)
        await op.open()
        with pytest.raises(AsyncFunctionError, match="sink gone"):
            op.try_process_many([1, 2, 3])  # the run ends, the next check raises
            op.try_process_many([4])
        await op.close()

    run(main())


def test_output_many_must_be_callable():
    with pytest.raises(TypeError, match="output_many must be a callable"):
        AsyncWaitOperator(double, Collector(), output_many="list")


def test_a_call_started_when_the_output_fails_is_cancelled_not_left_running():
    finished = []

    async def fn(x):
        if x == 2:
            await asyncio.sleep(0.05)
            finished.append(x)
        return x

    def output_many(values, ts):
        raise OSError("sink gone")

    async def main():
        op = AsyncWaitOperator(fn, Collector(), capacity=5, output_many=output_many)
        await op.open()
        with pytest.raises(AsyncFunctionError, match="sink gone"):
            op.try_process_many([0, 1, 2, 3])
        await asyncio.sleep(0.1)
        await op.close()

    run(main())
    assert finished == []
