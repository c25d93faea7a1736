"""Batched calls in the core operator: batch_size / batch_delay, split on failure, per-batch
timeout, retry and rate-limit cost, and the errors of a batch function that breaks its contract."""
import asyncio

import pytest

from aiospark.core import AsyncFunction, AsyncFunctionError, AsyncWaitOperator, Record, RetryStrategy

from ._util import Collector, expect_failure, feed_all, run, run_operator, safe_close


class Recorder:
    """An ``async def f(values) -> list`` that records the batches it gets."""

    def __init__(self, delay=0.005, bad=(), transient=0):
        self.batches = []
        self.delay = delay
        self.bad = set(bad)
        self.transient = transient

    async def __call__(self, values):
        self.batches.append(list(values))
        await asyncio.sleep(self.delay)
        if self.transient:
            self.transient -= 1
            raise ConnectionError("flaky")
        bad = self.bad.intersection(values)
        if bad:
            raise ValueError(f"bad values {sorted(bad)}")
        return [v * 10 for v in values]


def test_batches_fill_to_batch_size_and_keep_input_order():
    fn = Recorder()
    out = run(run_operator(fn, range(100), ordered=True, capacity=64, batch_size=16, batch_delay=1.0))
    assert out.values() == [v * 10 for v in range(100)]
    sizes = [len(b) for b in fn.batches]
    assert sum(sizes) == 100 and max(sizes) == 16
    assert sizes[:6] == [16] * 6  # full batches start at once; only the last one is partial
    assert [v for b in fn.batches for v in b] == list(range(100))  # every value once, in order


def test_a_partial_batch_starts_after_batch_delay_not_at_the_end():
    fn = Recorder(delay=0.0)

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, capacity=100, batch_size=50, batch_delay=0.02)
        await op.open()
        for v in range(3):
            await op.process_element(v)
        await asyncio.sleep(0.3)  # no finish(): only the delay can start the batch
        emitted = out.values()
        await op.finish()
        await op.close()
        return emitted

    assert run(main()) == [0, 10, 20]
    assert fn.batches == [[0, 1, 2]]


def test_finish_starts_the_partial_batch_at_once():
    fn = Recorder(delay=0.0)

    async def main():
        loop = asyncio.get_running_loop()
        op = AsyncWaitOperator(fn, Collector(), capacity=100, batch_size=50, batch_delay=30.0)
        await op.open()
        await op.process_element(1)
        began = loop.time()
        await op.finish()
        await op.close()
        return loop.time() - began

    assert run(main()) < 10.0  # far below batch_delay: finish() flushed the batch


def test_a_failing_batch_is_split_until_the_bad_value_fails_alone():
    fn = Recorder(bad={13})
    out = run(run_operator(fn, range(32), ordered=True, capacity=32, batch_size=16,
                           on_error=lambda v, e: [f"error {v}: {e}"]))
    assert out.values() == ["error 13: bad values [13]" if v == 13 else v * 10 for v in range(32)]
    assert [13] in fn.batches  # the bad value ended in a batch of its own
    assert max(len(b) for b in fn.batches if 13 not in b) <= 16


def test_without_on_error_the_bad_value_fails_the_operator_naming_it():
    fn = Recorder(bad={7})

    async def main():
        op = AsyncWaitOperator(fn, Collector(), capacity=16, batch_size=8)
        await op.open()
        try:
            return await expect_failure(op, range(16))
        finally:
            await safe_close(op)

    error = run(main())
    assert "7" in str(error) and isinstance(error.__cause__, ValueError)


def test_wrong_number_of_results_names_both_counts_and_is_not_split():
    calls = []

    async def short(values):
        calls.append(len(values))
        return values[:-1]

    out = run(run_operator(short, range(8), capacity=8, batch_size=8,
                           on_error=lambda v, e: [str(e)]))
    assert calls == [8]
    assert len(out.values()) == 8
    message = out.values()[0]
    assert "returned 7 results for a batch of 8 inputs" in message and "short" in message


def test_a_batch_function_returning_no_list_fails_clearly():
    async def nothing(values):
        return None

    async def main():
        op = AsyncWaitOperator(nothing, Collector(), capacity=4, batch_size=4)
        await op.open()
        try:
            return await expect_failure(op, range(4))
        finally:
            await safe_close(op)

    error = run(main())
    assert "must return a list with one result per input" in str(error.__cause__)


def test_retries_apply_to_the_whole_batch():
    fn = Recorder(transient=2)
    out = run(run_operator(fn, range(8), capacity=8, batch_size=8,
                           retry=RetryStrategy.fixed_delay(3, 0.001)))
    assert out.values() == [v * 10 for v in range(8)]
    assert fn.batches == [list(range(8))] * 3  # two failed attempts of the batch, then success


def test_a_timeout_times_out_every_value_of_the_batch_with_its_handler():
    class Slow(AsyncFunction):
        def __init__(self):
            self.cancelled = 0

        async def async_invoke(self, values):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            return [[v] for v in values]

        def timeout(self, value):
            return [f"late {value}"]

    fn = Slow()
    out = run(run_operator(fn, range(6), capacity=6, batch_size=3, timeout=0.05))
    assert sorted(out.values()) == sorted(f"late {v}" for v in range(6))
    assert fn.cancelled == 2  # each running batch was cancelled once


def test_a_value_whose_batch_never_fills_is_called_before_its_deadline():
    """batch_delay must be shorter than timeout (a longer one is refused at definition): the
    batch being filled starts when its delay passes, before its first row's deadline."""
    calls = []

    async def called(values):
        calls.append(list(values))
        return values

    async def main():
        out = Collector()
        op = AsyncWaitOperator(called, out, capacity=10, batch_size=10, batch_delay=0.3, timeout=5.0)
        await op.open()
        await op.process_element("x")
        await asyncio.sleep(0.6)
        emitted = out.values()
        await op.finish()
        await safe_close(op)
        return emitted

    assert run(main()) == ["x"] and calls == [["x"]]


def test_async_function_batches_give_a_list_of_outputs_per_value():
    class Explode(AsyncFunction):
        async def async_invoke(self, values):
            return [[v] * (v % 3) for v in values]

    out = run(run_operator(Explode(), range(9), capacity=9, batch_size=4))
    assert out.values() == [v for v in range(9) for _ in range(v % 3)]


def test_async_function_batch_entry_that_is_not_a_list_fails_that_value_only():
    class OneBad(AsyncFunction):
        async def async_invoke(self, values):
            return ["oops" if v == 2 else [v] for v in values]

    out = run(run_operator(OneBad(), range(4), capacity=4, batch_size=4,
                           on_error=lambda v, e: [f"error {v}"]))
    assert out.values() == [0, 1, "error 2", 3]


def test_rate_limit_cost_of_a_batch_is_the_sum_of_its_values():
    charged = []

    class Bucket:
        cost = staticmethod(lambda value: value)

        def reserve(self, cost=1.0):
            charged.append(cost)
            return 0.0

    run(run_operator(Recorder(delay=0), [1, 2, 3, 4], capacity=4, batch_size=2, rate_limit=Bucket()))
    assert charged == [3.0, 7.0]


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be an int >= 1"),
    ({"batch_size": 2.5}, "batch_size must be an int >= 1"),
    ({"batch_size": True}, "batch_size must be an int >= 1"),
    ({"batch_size": 4, "batch_delay": -1}, "batch_delay must be seconds >= 0"),
    ({"batch_size": 4, "batch_delay": float("nan")}, "batch_delay must be seconds >= 0"),
    ({"batch_size": 200}, "raise capacity to at least 200"),
    ({"batch_size": 4, "key": lambda v: v}, "key= and batch_size= do not go together"),
    # review of issue 44: every row timed out without a call
    ({"batch_size": 4, "batch_delay": 2.0, "timeout": 1.0}, r"batch_delay \(2.0 s\) must be shorter than timeout"),
    ({"batch_size": 4, "batch_delay": 1.0, "timeout": 1.0}, "lower batch_delay"),
])
def test_bad_batch_arguments_say_what_to_change(kwargs, message):
    async def fn(values):
        return values

    with pytest.raises(ValueError, match=message):
        AsyncWaitOperator(fn, Collector(), capacity=100, **kwargs)


def test_a_batch_delay_below_the_timeout_or_without_timeout_is_accepted():
    async def fn(values):
        return values

    AsyncWaitOperator(fn, Collector(), capacity=100, batch_size=4, batch_delay=0.9, timeout=1.0)
    AsyncWaitOperator(fn, Collector(), capacity=100, batch_size=4, batch_delay=5.0, timeout=None)


def test_many_values_flow_through_batches_with_backpressure():
    fn = Recorder(delay=0.001)

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=False, capacity=40, batch_size=10, batch_delay=0.001)
        await op.open()
        await feed_all(op, range(2000))
        await op.finish()
        await op.close()
        return out, op.metrics

    out, metrics = run(main())
    assert sorted(out.values()) == [v * 10 for v in range(2000)]
    assert metrics.inflight_peak <= 40


# ---------------------------------------------------------------- a batch is one queue entry
# What a batch entry must keep of the per-element contract: timestamps, watermarks as barriers,
# capacity counted in elements, snapshots of every element held, journal outcomes per element.

@pytest.mark.parametrize("ordered", [True, False])
def test_each_element_of_a_batch_keeps_its_timestamp_and_watermarks_stay_barriers(ordered):
    fn = Recorder(delay=0.0)

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=ordered, capacity=20, batch_size=10, batch_delay=30.0)
        await op.open()
        for v in (1, 2, 3):
            await op.process_element(v, timestamp=100 + v)
        await op.process_watermark(200)  # starts the partial batch: no 30 s wait for it to fill
        for v in (4, 5):
            await op.process_element(v, timestamp=300 + v)
        await op.finish()
        await op.close()
        return out

    out = run(main())
    pairs = [(e.value, e.timestamp) if isinstance(e, Record) else ("wm", e.timestamp) for e in out]
    assert pairs == [(10, 101), (20, 102), (30, 103), ("wm", 200), (40, 304), (50, 305)]
    assert fn.batches == [[1, 2, 3], [4, 5]]  # nothing after a watermark joins a batch before it


def test_capacity_counts_elements_not_batches():
    async def main():
        release = asyncio.Event()
        started = []

        async def fn(values):
            started.append(list(values))
            await release.wait()
            return values

        out = Collector()
        op = AsyncWaitOperator(fn, out, capacity=8, batch_size=4, batch_delay=30.0)
        await op.open()
        admitted = 0
        while op.try_process(admitted):
            admitted += 1
        await asyncio.sleep(0)  # the batches' tasks take their first step (not eager before 3.12)
        held, batches = len(op), list(started)
        release.set()
        await op.wait_for_space()
        room_after = op.try_process(admitted)
        await op.finish()
        await op.close()
        return admitted, held, batches, room_after, op.metrics.inflight_peak, out.values()

    admitted, held, batches, room_after, peak, values = run(main())
    assert admitted == 8 and held == 8 and peak == 8  # two batches of 4: the ninth element waits
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert room_after and sorted(values) == list(range(9))


def test_a_snapshot_holds_every_element_of_batches_filling_and_running():
    async def main():
        release = asyncio.Event()

        async def fn(values):
            await release.wait()
            return values

        op = AsyncWaitOperator(fn, Collector(), ordered=True, capacity=10, batch_size=3, batch_delay=30.0)
        await op.open()
        for v in range(5):  # [0, 1, 2] runs, [3, 4] is being filled
            await op.process_element(v, timestamp=v)
        snap = op.snapshot_state()
        out = Collector()
        restored = AsyncWaitOperator(fn, out, ordered=True, capacity=10, batch_size=3, batch_delay=30.0)
        release.set()
        await restored.open(snap)
        await restored.finish()
        await restored.close()
        await op.close()
        return snap, out

    snap, out = run(main())
    assert snap == [Record(v, v) for v in range(5)]
    assert [(e.value, e.timestamp) for e in out] == [(v, v) for v in range(5)]


def test_a_timeout_after_a_split_keeps_the_results_of_the_half_that_answered():
    class Half(AsyncFunction):
        def __init__(self):
            self.batches = []

        async def async_invoke(self, values):
            self.batches.append(list(values))
            if len(values) == 4:
                raise ValueError("the whole batch fails")
            if 0 in values:
                return [[v * 10] for v in values]
            await asyncio.sleep(30)  # the other half hangs until the batch's deadline

        def timeout(self, value):
            return [f"late {value}"]

    fn = Half()
    out = run(run_operator(fn, range(4), ordered=True, capacity=4, batch_size=4, timeout=0.2))
    assert out.values() == [0, 10, "late 2", "late 3"]
    assert fn.batches == [[0, 1, 2, 3], [0, 1], [2, 3]]


@pytest.mark.parametrize("ordered", [True, False])
def test_with_a_journal_recorded_elements_leave_the_batch_and_equal_ones_share_a_call(ordered):
    from aiospark.core.durable import Recorded

    from .test_durable import MemoryJournal

    fn = Recorder(delay=0.001)
    journal = MemoryJournal({"k2": Recorded([20]), "k5": Recorded([50, 51])})
    out = run(run_operator(fn, [0, 1, 2, 3, 1, 5, 6, 3], ordered=ordered, capacity=8, batch_size=4,
                           batch_delay=30.0, identify=lambda v: f"k{v}", journal=journal))
    expected = [0, 10, 20, 30, 10, 50, 51, 60, 30]
    assert (out.values() if ordered else sorted(out.values())) == (expected if ordered else sorted(expected))
    assert [v for b in fn.batches for v in b] == [0, 1, 3, 6]  # recorded ones and repeats not called
    assert sorted(k for k, _, _ in journal.records) == ["k0", "k1", "k3", "k6"]


def test_a_batch_whose_elements_are_all_recorded_makes_no_call():
    from aiospark.core.durable import Recorded

    from .test_durable import MemoryJournal

    fn = Recorder(delay=0.0)
    journal = MemoryJournal({f"k{v}": Recorded([v]) for v in range(6)})
    out = run(run_operator(fn, range(6), ordered=True, capacity=6, batch_size=3, identify=lambda v: f"k{v}",
                           journal=journal))
    assert out.values() == list(range(6)) and fn.batches == []


# ---------------------------------------------------------------- bulk admission
@pytest.mark.parametrize("batch_size", [None, 1, 4, 7])
@pytest.mark.parametrize("ordered", [True, False])
def test_try_process_many_takes_what_try_process_would_and_no_more(batch_size, ordered):
    async def one(v):
        await asyncio.sleep(0.001 * (v % 3))
        return v * 10

    async def many(values):
        await asyncio.sleep(0.001 * (len(values) % 3))
        return [v * 10 for v in values]

    async def main():
        out = Collector()
        op = AsyncWaitOperator(one if batch_size is None else many, out, ordered=ordered, capacity=10,
                               batch_size=batch_size, batch_delay=0.005)
        await op.open()
        values, pos, takes = list(range(103)), 0, []
        while pos < len(values):
            taken = op.try_process_many(values, pos)
            takes.append(taken)
            assert len(op) <= 10 and op.metrics.inflight_peak <= 10
            pos += taken
            if pos < len(values):
                await op.wait_for_space()
        await op.finish()
        await op.close()
        return out.values(), takes

    values, takes = run(main())
    expected = [v * 10 for v in range(103)]
    assert (values if ordered else sorted(values)) == expected
    assert takes[0] == 10 and sum(takes) == 103  # the first call fills the capacity, no more


def test_try_process_many_on_a_failed_operator_raises_its_failure():
    fn = Recorder(bad={3})

    async def main():
        op = AsyncWaitOperator(fn, Collector(), capacity=8, batch_size=4)
        await op.open()
        try:
            op.try_process_many(list(range(8)))
            for _ in range(20):
                await asyncio.sleep(0.01)
            with pytest.raises(AsyncFunctionError) as info:
                op.try_process_many([8, 9])
            return info.value
        finally:
            await safe_close(op)

    assert "3" in str(run(main()))


def test_try_process_many_before_open_says_so():
    async def fn(values):
        return values

    op = AsyncWaitOperator(fn, Collector(), capacity=8, batch_size=4)
    with pytest.raises(RuntimeError, match="open"):
        op.try_process_many([1, 2])


def test_a_batch_call_cancelled_by_its_own_code_is_an_error_for_each_element_not_a_split():
    calls = []

    async def gives_up(values):
        calls.append(list(values))
        raise asyncio.CancelledError  # the user's code cancels its own call (not a timeout)

    out = run(run_operator(gives_up, range(6), ordered=True, capacity=6, batch_size=3,
                           on_error=lambda v, e: [f"error {v}: {type(e).__name__}"]))
    assert out.values() == [f"error {v}: CancelledError" for v in range(6)]
    assert calls == [[0, 1, 2], [3, 4, 5]]  # never split: a cancellation is no element's fault


@pytest.mark.parametrize("ordered", [True, False])
def test_elements_with_several_outputs_or_none_keep_their_timestamps_in_element_order(ordered):
    """After a split the batch's outcomes are per element: a bad element's ``on_error`` gives two
    rows, another none; every output leaves with its own element's timestamp, in element order."""
    async def fn(values):
        if 3 in values or 5 in values:
            raise ValueError("bad")
        return [v * 10 for v in values]

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=ordered, capacity=8, batch_size=8, batch_delay=30.0,
                               on_error=lambda v, e: [] if v == 5 else [f"a{v}", f"b{v}"])
        await op.open()
        for v in range(8):
            await op.process_element(v, timestamp=100 + v)
        await op.finish()
        await op.close()
        return out

    out = run(main())
    expected = [(0, 100), (10, 101), (20, 102), ("a3", 103), ("b3", 103), (40, 104), (60, 106), (70, 107)]
    assert [(e.value, e.timestamp) for e in out] == expected


def test_a_batch_function_that_cancels_its_own_call_gives_each_row_that_error_without_a_split():
    """A CancelledError raised by the batch function's own code is the batch's error, not a
    failure to split: every row of the batch gets it once, and the function is called once."""
    calls = []

    async def cancels(values):
        calls.append(list(values))
        await asyncio.sleep(0)
        raise asyncio.CancelledError("gave up")

    out = run(run_operator(cancels, range(4), ordered=True, capacity=8, batch_size=4, batch_delay=1.0,
                           on_error=lambda v, e: [f"error {v}: {type(e).__name__}: {e}"]))
    assert out.values() == [f"error {v}: CancelledError: the batch call was cancelled" for v in range(4)]
    assert calls == [[0, 1, 2, 3]]
