"""snapshot_state() / open(restored=...) (cf. Flink's testStateSnapshotAndRestore and
testRestartWithFullQueue)."""

import asyncio

import pytest

from aiospark.core import AsyncFunction, AsyncWaitOperator, Record, Watermark

from ._util import Collector, Gates, feed, run, safe_close, settle

pytestmark = pytest.mark.timeout(30)


def _gated(gates, calls=None):
    async def fn(v):
        if calls is not None:
            calls.append(v)
        await gates[v].wait()
        return v

    return fn


def test_snapshot_of_fresh_operator_is_empty():
    async def main():
        async def fn(v):
            return v

        op = AsyncWaitOperator(fn, Collector())
        await op.open()
        snap = op.snapshot_state()
        await op.close()
        return snap

    assert run(main()) == []


def test_snapshot_after_finish_is_empty():
    async def main():
        async def fn(v):
            return v

        op = AsyncWaitOperator(fn, Collector())
        await op.open()
        await feed(op, [1, Watermark(2), 3])
        await op.finish()
        snap = op.snapshot_state()
        await op.close()
        return snap

    assert run(main()) == []


def test_snapshot_of_full_ordered_queue_holds_inflight_completed_and_watermarks():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=True, capacity=4)
        await op.open()
        await feed(op, [Record("a", 1), Record("b", 2), Watermark(3), Record("c", 4)])
        gates.open("b")  # completed, but not emittable behind "a"
        await settle()
        snap = op.snapshot_state()
        emitted = list(out)
        await op.close()
        return snap, emitted

    snap, emitted = run(main())
    assert emitted == []
    assert snap == [Record("a", 1), Record("b", 2), Watermark(3), Record("c", 4)]


def test_snapshot_excludes_emitted_elements():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=True, capacity=5)
        await op.open()
        await feed(op, [Record("a", 1), Watermark(2), Record("b", 3), Record("c", 4)])
        gates.open("a")
        await settle()
        snap = op.snapshot_state()
        emitted = list(out)
        await op.close()
        return snap, emitted

    snap, emitted = run(main())
    assert emitted == [Record("a", 1), Watermark(2)]
    assert snap == [Record("b", 3), Record("c", 4)]


def test_snapshot_unordered_segment_by_segment():
    gates = Gates()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, ordered=False, capacity=6)
        await op.open()
        await feed(op, [Record("a", 1), Record("b", 2), Watermark(3), Record("c", 4), Record("d", 5)])
        gates.open("d")  # completed behind W3: held
        await settle()
        snap = op.snapshot_state()
        await op.close()
        return snap, list(out)

    snap, emitted = run(main())
    assert emitted == []
    assert len(snap) == 5
    assert sorted(snap[:2], key=lambda r: r.value) == [Record("a", 1), Record("b", 2)]
    assert snap[2] == Watermark(3)
    assert sorted(snap[3:], key=lambda r: r.value) == [Record("c", 4), Record("d", 5)]


def test_snapshot_holds_elements_waiting_for_retry():
    async def always_fails(v):
        raise ConnectionError("down")

    from aiospark.core import RetryStrategy

    async def main():
        op = AsyncWaitOperator(always_fails, Collector(), retry=RetryStrategy.fixed_delay(3, 5.0))
        await op.open()
        await op.process_element("x", 9)
        await settle(0.02)  # first attempt failed, back-off pending
        snap = op.snapshot_state()
        await op.close()
        return snap

    assert run(main()) == [Record("x", 9)]


class Recorder(AsyncFunction):
    def __init__(self):
        self.calls = []
        self.opened_before_first_call = None
        self._opened = False

    async def open(self):
        self._opened = True

    async def async_invoke(self, value):
        if self.opened_before_first_call is None:
            self.opened_before_first_call = self._opened
        self.calls.append(value)
        await asyncio.sleep(0.001)
        return [value.upper()]


@pytest.mark.parametrize("ordered", [True, False])
def test_restore_reprocesses_snapshot_first_in_order(ordered):
    gates = Gates()

    async def first_run():
        op = AsyncWaitOperator(_gated(gates), Collector(), ordered=ordered, capacity=4)
        await op.open()
        await feed(op, [Record("a", 1), Record("b", 2), Watermark(3), Record("c", 4)])
        await settle()
        snap = op.snapshot_state()
        await op.close()  # "crash": in-flight calls are cancelled
        return snap

    snap = run(first_run())
    assert len(snap) == 4

    fn = Recorder()

    async def second_run():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=ordered, capacity=4)
        await op.open(restored=snap)
        await feed(op, [Record("d", 5), Watermark(6)])
        await op.finish()
        await op.close()
        return out

    out = run(second_run())
    assert fn.opened_before_first_call is True
    # restored elements are started first, in snapshot order, before new input
    assert fn.calls[-1] == "d"
    assert sorted(fn.calls[:3]) == ["a", "b", "c"]
    if ordered:
        assert fn.calls == ["a", "b", "c", "d"]
        assert out == [Record("A", 1), Record("B", 2), Watermark(3), Record("C", 4), Record("D", 5), Watermark(6)]
    else:
        w3 = out.index(Watermark(3))
        assert sorted(out[:w3], key=lambda r: r.value) == [Record("A", 1), Record("B", 2)]
        assert out.index(Watermark(6)) == len(out) - 1
        assert sorted(out[w3 + 1 : -1], key=lambda r: r.value) == [Record("C", 4), Record("D", 5)]


def test_restore_of_full_snapshot_with_backpressure():
    """A snapshot as large as the capacity is restored, and new input then waits for room."""
    gates = Gates()

    async def first_run():
        op = AsyncWaitOperator(_gated(gates), Collector(), capacity=3)
        await op.open()
        await feed(op, [Record(1, 1), Record(2, 2), Record(3, 3)])
        snap = op.snapshot_state()
        await op.close()
        return snap

    snap = run(first_run())
    assert snap == [Record(1, 1), Record(2, 2), Record(3, 3)]

    gates2 = Gates()
    calls = []

    async def second_run():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates2, calls), out, capacity=3)
        await asyncio.wait_for(op.open(restored=snap), 1.0)
        blocked = asyncio.ensure_future(op.process_element(4, 4))
        await settle(0.03)
        assert not blocked.done()
        assert calls == [1, 2, 3]
        gates2.open(1)
        await asyncio.wait_for(blocked, 1.0)
        for i in (2, 3, 4):
            gates2.open(i)
        await op.finish()
        await op.close()
        return out

    assert run(second_run()) == [Record(i, i) for i in range(1, 5)]


def test_restore_watermark_only_snapshot():
    async def fn(v):
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out)
        await op.open(restored=[Watermark(1), Watermark(2)])
        await op.process_element("x", 3)
        await op.finish()
        await op.close()
        return out

    assert run(main()) == [Watermark(1), Watermark(2), Record("x", 3)]


@pytest.mark.parametrize("restored", [None, []])
def test_open_with_nothing_restored(restored):
    async def fn(v):
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out)
        await op.open(restored=restored)
        await op.process_element(1)
        await op.finish()
        await op.close()
        return out

    assert run(main()) == [Record(1)]


def test_snapshot_roundtrip_equals_inputs_of_unfinished_run():
    """Snapshot then restore into a fresh operator yields exactly the missing outputs."""
    gates = Gates()
    inputs = [Record(i, i) for i in range(6)]

    async def first_run():
        out = Collector()
        op = AsyncWaitOperator(_gated(gates), out, capacity=6)
        await op.open()
        await feed(op, inputs)
        for i in (0, 1, 3):
            gates.open(i)
        await settle()
        snap = op.snapshot_state()
        await op.close()
        return out, snap

    out1, snap = run(first_run())
    assert out1 == [Record(0, 0), Record(1, 1)]
    assert snap == inputs[2:]

    async def ident(v):
        return v

    out2 = run(run_operator_restored(ident, snap))
    assert out1 + out2 == inputs


async def run_operator_restored(fn, snap):
    out = Collector()
    op = AsyncWaitOperator(fn, out)
    await op.open(restored=snap)
    await op.finish()
    await safe_close(op)
    return out
