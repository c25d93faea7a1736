"""AsyncWaitOperator: construction, lifecycle, ordering, backpressure, watermarks, finish
(cf. Flink's AsyncWaitOperatorTest)."""

import asyncio
import threading

import pytest

from aiospark.core import AsyncFunction, AsyncWaitOperator, Record, Watermark

from ._util import Collector, Gates, feed, run, run_operator, settle

pytestmark = pytest.mark.timeout(30)


async def identity(value):
    return value


# --------------------------------------------------------------------------- construction


def test_constructed_outside_any_event_loop():
    """The operator may be built before a loop exists and used later inside one."""
    out = Collector()
    op = AsyncWaitOperator(identity, out)

    async def main():
        await op.open()
        await op.process_element(1, 10)
        await op.finish()
        await op.close()

    run(main())
    assert out == [Record(1, 10)]


def _sync_fn(value):
    return value


class _NotAsync:
    def __call__(self, value):
        return value


@pytest.mark.parametrize(
    "function",
    [_sync_fn, lambda v: v, _NotAsync(), 42, None, "not a function"],
    ids=["def", "lambda", "sync-callable", "int", "None", "str"],
)
def test_non_coroutine_function_rejected_at_construction(function):
    with pytest.raises(TypeError):
        AsyncWaitOperator(function, Collector())


@pytest.mark.parametrize("output", [None, 42, "out", [1]])
def test_output_must_be_callable(output):
    with pytest.raises(TypeError):
        AsyncWaitOperator(identity, output)


@pytest.mark.parametrize("capacity", [0, -1])
def test_capacity_below_one_rejected(capacity):
    with pytest.raises(ValueError):
        AsyncWaitOperator(identity, Collector(), capacity=capacity)


@pytest.mark.parametrize("timeout", ["5", [1], object()])
def test_timeout_must_be_a_number_or_none(timeout):
    with pytest.raises(TypeError):
        AsyncWaitOperator(identity, Collector(), timeout=timeout)


@pytest.mark.parametrize("timeout", [None, 0, -1, 0.0])
def test_no_timeout_values(timeout):
    """None or <= 0 disables the timeout: a 50 ms call completes normally."""

    async def slow(value):
        await asyncio.sleep(0.05)
        return value * 2

    out = run(run_operator(slow, [1, 2], timeout=timeout))
    assert out == [Record(2), Record(4)]


def test_defaults_are_ordered():
    gates = Gates()

    async def fn(v):
        await gates[v].wait()
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out)
        await op.open()
        await feed(op, [1, 2])
        gates.open(2)
        await settle(0.02)
        assert out == []  # default ordered=True: 2 waits for 1
        gates.open(1)
        await op.finish()
        await op.close()
        return out

    assert run(main()) == [Record(1), Record(2)]


# --------------------------------------------------------------------------- plain async def


@pytest.mark.parametrize("ordered", [True, False])
def test_plain_async_def_one_output_per_input(ordered):
    async def double(v):
        await asyncio.sleep(0)
        return v * 2

    out = run(run_operator(double, [Record(i, 100 + i) for i in range(10)], ordered=ordered))
    expected = [Record(i * 2, 100 + i) for i in range(10)]
    if ordered:
        assert out == expected
    else:
        assert sorted(out, key=lambda r: r.timestamp) == expected


def test_plain_async_def_returning_none_emits_one_none():
    async def nothing(v):
        return None

    out = run(run_operator(nothing, [Record("a", 1), Record("b", 2)]))
    assert out == [Record(None, 1), Record(None, 2)]


def test_plain_async_def_returning_a_list_emits_the_list_as_one_output():
    async def listy(v):
        return [v, v]

    out = run(run_operator(listy, [Record(3, 1)]))
    assert out == [Record([3, 3], 1)]


def test_timestamps_carried_and_default_none():
    out = run(run_operator(identity, [Record("a", 5), "b", Record("c", 0)]))
    assert out == [Record("a", 5), Record("b", None), Record("c", 0)]


# --------------------------------------------------------------------------- AsyncFunction


class Lifecycle(AsyncFunction):
    def __init__(self):
        self.events = []

    async def open(self):
        self.events.append("open")

    async def async_invoke(self, value):
        self.events.append(("call", value))
        await asyncio.sleep(0)
        return [value, value * 10]

    async def close(self):
        self.events.append("close")


def test_async_function_open_call_close_order():
    fn = Lifecycle()
    out = run(run_operator(fn, [Record(1, 1), Record(2, 2)]))
    assert out == [Record(1, 1), Record(10, 1), Record(2, 2), Record(20, 2)]
    assert fn.events[0] == "open"
    assert fn.events[-1] == "close"
    assert fn.events.count("open") == 1 and fn.events.count("close") == 1
    assert fn.events[1:-1] == [("call", 1), ("call", 2)]


def test_open_called_by_open_and_close_only_by_close():
    fn = Lifecycle()

    async def main():
        op = AsyncWaitOperator(fn, Collector())
        assert fn.events == []
        await op.open()
        assert fn.events == ["open"]
        await op.process_element(1)
        await op.finish()
        assert "close" not in fn.events
        await op.close()
        assert fn.events[-1] == "close"

    run(main())


def test_async_function_with_default_open_close():
    class Minimal(AsyncFunction):
        async def async_invoke(self, value):
            return [value]

    out = run(run_operator(Minimal(), [1, 2]))
    assert out == [Record(1), Record(2)]


def test_async_function_empty_list_emits_nothing():
    class Filter(AsyncFunction):
        async def async_invoke(self, value):
            return [value] if value % 2 == 0 else []

    out = run(run_operator(Filter(), [Record(i, i) for i in range(6)]))
    assert out == [Record(0, 0), Record(2, 2), Record(4, 4)]


def test_async_function_tuple_result():
    class Tup(AsyncFunction):
        async def async_invoke(self, value):
            return (value, value + 1)

    out = run(run_operator(Tup(), [Record(1, 9)]))
    assert out == [Record(1, 9), Record(2, 9)]


def test_async_function_many_results_with_watermarks_unordered():
    class Multi(AsyncFunction):
        async def async_invoke(self, value):
            await asyncio.sleep(0.001 * (5 - value))
            return [f"{value}a", f"{value}b"]

    out = run(
        run_operator(Multi(), [Record(1, 1), Record(2, 2), Watermark(3), Record(3, 4)], ordered=False)
    )
    idx = out.index(Watermark(3))
    assert sorted(out[:idx], key=str) == sorted(
        [Record("1a", 1), Record("1b", 1), Record("2a", 2), Record("2b", 2)], key=str
    )
    assert out[idx + 1 :] == [Record("3a", 4), Record("3b", 4)]
    # results of one input stay together and in their returned order
    first = out.index(Record("1a", 1))
    assert out[first + 1] == Record("1b", 1)


# --------------------------------------------------------------------------- ordering


def _gated(gates, calls=None):
    async def fn(v):
        if calls is not None:
            calls.append(v)
        await gates[v].wait()
        return v

    return fn


async def _release_in_order(gates, order, pause=0.01):
    for key in order:
        gates.open(key)
        await settle(pause)


@pytest.mark.parametrize("ordered", [True, False])
def test_output_order_with_gates(ordered):
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=ordered)
        await op.open()
        await feed(op, [Record(i, i) for i in range(1, 6)])
        await settle()
        await _release_in_order(gates, [3, 1, 5, 2, 4])
        await op.finish()
        await op.close()
        return out

    out = run(main())
    if ordered:
        assert out.values() == [1, 2, 3, 4, 5]
    else:
        assert out.values() == [3, 1, 5, 2, 4]
    assert all(r.timestamp == r.value for r in out)


@pytest.mark.parametrize("ordered", [True, False])
def test_output_order_with_sleep_delays(ordered):
    delays = {0: 0.12, 1: 0.08, 2: 0.04, 3: 0.0}

    async def fn(v):
        await asyncio.sleep(delays[v])
        return v

    out = run(run_operator(fn, [0, 1, 2, 3], ordered=ordered))
    assert out.values() == ([0, 1, 2, 3] if ordered else [3, 2, 1, 0])


def test_ordered_emission_happens_as_soon_as_head_completes():
    """Emission is driven by completions, not by the next input or finish()."""
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=True)
        await op.open()
        await feed(op, [1, 2, 3])
        gates.open(2)
        await settle()
        assert out == []
        gates.open(1)
        await settle()
        assert out.values() == [1, 2]
        gates.open(3)
        await settle()
        assert out.values() == [1, 2, 3]
        await op.finish()
        await op.close()

    run(main())


def test_unordered_emits_completed_while_earlier_pending():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=False)
        await op.open()
        await feed(op, [1, 2, 3])
        gates.open(3)
        await settle()
        assert out.values() == [3]
        gates.open(1)
        gates.open(2)
        await op.finish()
        await op.close()
        return out

    out = run(main())
    assert out.values()[0] == 3 and sorted(out.values()) == [1, 2, 3]


# --------------------------------------------------------------------------- watermarks


def test_watermarks_in_position_ordered():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=True)
        await op.open()
        await feed(op, [Record(1, 1), Record(2, 2), Watermark(3), Record(4, 4), Watermark(5)])
        await _release_in_order(gates, [4, 2, 1])
        await op.finish()
        await op.close()
        return out

    assert run(main()) == [Record(1, 1), Record(2, 2), Watermark(3), Record(4, 4), Watermark(5)]


def test_watermarks_are_barriers_unordered():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=False)
        await op.open()
        await feed(op, [Record(1, 1), Record(2, 2), Watermark(3), Record(4, 4), Record(5, 5), Watermark(6)])
        # 4 completes first but is behind W3; 2 completes before 1
        await _release_in_order(gates, [4, 2])
        assert out == [Record(2, 2)]
        await _release_in_order(gates, [1, 5])
        await op.finish()
        await op.close()
        return out

    assert run(main()) == [
        Record(2, 2),
        Record(1, 1),
        Watermark(3),
        Record(4, 4),
        Record(5, 5),
        Watermark(6),
    ]


@pytest.mark.parametrize("ordered", [True, False])
def test_watermark_only_input(ordered):
    out = run(run_operator(identity, [Watermark(1), Watermark(2), Watermark(3)], ordered=ordered))
    assert out == [Watermark(1), Watermark(2), Watermark(3)]


@pytest.mark.parametrize("ordered", [True, False])
def test_watermark_with_nothing_pending_is_emitted_at_once(ordered):
    async def main():
        out = Collector()
        op = AsyncWaitOperator(identity, out, ordered=ordered)
        await op.open()
        await op.process_watermark(7)
        await settle()
        assert out == [Watermark(7)]
        await op.finish()
        await op.close()

    run(main())


# --------------------------------------------------------------------------- backpressure


def test_process_element_returns_before_call_finishes():
    gates = Gates()
    started = []

    async def fn(v):
        started.append(v)
        await gates[v].wait()
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, capacity=10)
        await op.open()
        await asyncio.wait_for(op.process_element(1), 1.0)
        await asyncio.wait_for(op.process_element(2), 1.0)
        await settle()
        assert started == [1, 2]  # both calls started, concurrently
        assert out == []
        gates.open(1)
        gates.open(2)
        await op.finish()
        await op.close()
        return out

    assert run(main()).values() == [1, 2]


@pytest.mark.parametrize("ordered", [True, False])
def test_backpressure_when_full(ordered):
    gates = Gates()
    calls = []

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates, calls), out, ordered=ordered, capacity=2)
        await op.open()
        await feed(op, [1, 2])
        blocked = asyncio.ensure_future(op.process_element(3))
        await settle(0.03)
        assert not blocked.done()
        assert calls == [1, 2]  # call 3 not started while the queue is full

        # releasing the non-head entry frees a slot only in unordered mode
        gates.open(2)
        await settle(0.03)
        if ordered:
            assert not blocked.done()
            assert calls == [1, 2]
            gates.open(1)
        await asyncio.wait_for(blocked, 1.0)
        # process_element(3) returned while call 3 is still in flight
        await settle()
        assert calls == [1, 2, 3]
        assert Record(3) not in out
        gates.open(3)
        gates.open(1)
        await op.finish()
        await op.close()
        return out

    out = run(main())
    assert sorted(out.values()) == [1, 2, 3]
    if ordered:
        assert out.values() == [1, 2, 3]


def test_watermark_takes_a_slot_in_operator():
    gates = Gates()
    calls = []

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates, calls), out, ordered=True, capacity=2)
        await op.open()
        await op.process_element(1, 1)
        await op.process_watermark(2)  # queue now full: R1 (pending) + W2
        blocked = asyncio.ensure_future(op.process_element(3, 3))
        await settle(0.03)
        assert not blocked.done()
        assert calls == [1]
        gates.open(1)
        await asyncio.wait_for(blocked, 1.0)
        gates.open(3)
        await op.finish()
        await op.close()
        return out

    assert run(main()) == [Record(1, 1), Watermark(2), Record(3, 3)]


def test_process_watermark_waits_while_full():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, capacity=1)
        await op.open()
        await op.process_element(1, 1)
        blocked = asyncio.ensure_future(op.process_watermark(5))
        await settle(0.03)
        assert not blocked.done()
        gates.open(1)
        await asyncio.wait_for(blocked, 1.0)
        await op.finish()
        await op.close()
        return out

    assert run(main()) == [Record(1, 1), Watermark(5)]


@pytest.mark.parametrize("ordered", [True, False])
def test_in_flight_never_exceeds_capacity(ordered):
    capacity = 5
    state = {"now": 0, "max": 0}

    async def fn(v):
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.002 * (v % 3))
        state["now"] -= 1
        return v

    out = run(run_operator(fn, list(range(60)), ordered=ordered, capacity=capacity))
    assert state["max"] <= capacity
    assert state["max"] >= 2  # calls really overlap
    assert sorted(out.values()) == list(range(60))
    if ordered:
        assert out.values() == list(range(60))


def test_concurrency_reaches_capacity():
    """With slow calls, capacity=8 means 8 calls in flight at once (not one at a time)."""
    state = {"now": 0, "max": 0}

    async def fn(v):
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.02)
        state["now"] -= 1
        return v

    out = run(run_operator(fn, list(range(16)), ordered=False, capacity=8))
    assert state["max"] == 8      # overlapping calls, counted rather than timed (noisy CPUs)
    assert len(out) == 16


def test_no_thread_per_element():
    gates = Gates()

    async def main():
        before = threading.active_count()
        op = AsyncWaitOperator(_gated(gates), Collector(), capacity=100, timeout=30.0, ordered=False)
        await op.open()
        await feed(op, list(range(50)))
        await settle()
        during = threading.active_count()
        for i in range(50):
            gates.open(i)
        await op.finish()
        await op.close()
        return before, during

    before, during = run(main())
    assert during - before <= 1


# --------------------------------------------------------------------------- finish


@pytest.mark.parametrize("ordered", [True, False])
def test_finish_waits_for_everything(ordered):
    async def slow(v):
        await asyncio.sleep(0.01 * (v % 4))
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(slow, out, ordered=ordered, capacity=4)
        await op.open()
        await feed(op, [Record(i, i) for i in range(12)] + [Watermark(100)])
        await op.finish()
        snapshot = list(out)
        await op.close()
        return snapshot

    out = run(main())
    assert len(out) == 13
    assert out[-1] == Watermark(100)
    assert sorted(r.value for r in out[:-1]) == list(range(12))


def test_finish_on_empty_operator_returns():
    async def main():
        op = AsyncWaitOperator(identity, Collector())
        await op.open()
        await asyncio.wait_for(op.finish(), 1.0)
        await op.close()

    run(main())


def test_finish_returns_only_after_slow_call():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out)
        await op.open()
        await op.process_element(1)
        fin = asyncio.ensure_future(op.finish())
        await settle(0.03)
        assert not fin.done()
        gates.open(1)
        await asyncio.wait_for(fin, 1.0)
        assert out == [Record(1)]
        await op.close()

    run(main())
