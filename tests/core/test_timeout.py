"""Per-element timeout: a loop timer from the first attempt; cancellation; timeout() fallback."""

import asyncio

import pytest

from aiospark.core import (
    AsyncFunction,
    AsyncFunctionError,
    AsyncTimeoutError,
    AsyncWaitOperator,
    Record,
    RetryStrategy,
    Watermark,
    retry_if_empty,
)

from ._util import EPS, Collector, expect_failure, feed, run, run_operator, safe_close, settle

pytestmark = pytest.mark.timeout(30)


def test_timeout_fails_with_async_timeout_error_cause():
    async def hang(v):
        await asyncio.sleep(10)
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(hang, out, timeout=0.05)
        await op.open()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        err = await expect_failure(op, [Record("slow-input", 1)])
        elapsed = loop.time() - t0
        await safe_close(op)
        return err, elapsed, out

    err, elapsed, out = run(main())
    assert isinstance(err.__cause__, AsyncTimeoutError)
    assert "slow-input" in str(err)
    assert 0.05 - EPS <= elapsed < 1.0
    assert out == []


def test_default_async_function_timeout_raises_async_timeout_error():
    class Slow(AsyncFunction):
        async def async_invoke(self, value):
            await asyncio.sleep(10)
            return [value]

    async def main():
        op = AsyncWaitOperator(Slow(), Collector(), timeout=0.03)
        await op.open()
        err = await expect_failure(op, [1])
        await safe_close(op)
        return err

    assert isinstance(run(main()).__cause__, AsyncTimeoutError)


class Fallback(AsyncFunction):
    """Slow for odd values; timeout() returns a fallback list."""

    def __init__(self, delay=10.0):
        self.delay = delay
        self.timeouts = []
        self.cancelled = []
        self.calls = []

    async def async_invoke(self, value):
        self.calls.append(value)
        try:
            if value % 2:
                await asyncio.sleep(self.delay)
            return [value]
        except asyncio.CancelledError:
            self.cancelled.append(value)
            raise

    def timeout(self, value):
        self.timeouts.append(value)
        return [f"fallback-{value}"]


class AsyncFallback(Fallback):
    async def timeout(self, value):
        await asyncio.sleep(0.001)
        self.timeouts.append(value)
        return [f"fallback-{value}", "second"]


@pytest.mark.parametrize("ordered", [True, False])
def test_sync_timeout_fallback_is_emitted(ordered):
    fn = Fallback()
    out = run(run_operator(fn, [Record(i, i) for i in range(4)], timeout=0.05, ordered=ordered))
    expected = [Record(0, 0), Record("fallback-1", 1), Record(2, 2), Record("fallback-3", 3)]
    if ordered:
        assert out == expected
    else:
        assert sorted(out, key=lambda r: r.timestamp) == expected
    assert sorted(fn.timeouts) == [1, 3]


def test_async_timeout_fallback_is_emitted():
    fn = AsyncFallback()
    out = run(run_operator(fn, [Record(1, 5), Record(2, 6)], timeout=0.05))
    assert out == [Record("fallback-1", 5), Record("second", 5), Record(2, 6)]
    assert fn.timeouts == [1]


def test_timeout_fallback_empty_list_emits_nothing():
    class Empty(Fallback):
        def timeout(self, value):
            return []

    out = run(run_operator(Empty(), [Record(1, 1), Watermark(2), Record(2, 3)], timeout=0.03))
    assert out == [Watermark(2), Record(2, 3)]


def test_timed_out_attempt_is_cancelled():
    fn = Fallback()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, timeout=0.03)
        await op.open()
        await feed(op, [1, 3])
        await op.finish()
        await settle(0.02)
        await op.close()
        return out

    out = run(main())
    assert out.values() == ["fallback-1", "fallback-3"]
    assert sorted(fn.cancelled) == [1, 3]


def test_timed_out_attempt_cancelled_before_close():
    """Cancellation happens when the timer fires, not only when the operator is closed."""
    fn = Fallback()

    async def main():
        op = AsyncWaitOperator(fn, Collector(), timeout=0.03)
        await op.open()
        await op.process_element(1)
        await settle(0.15)
        cancelled_before_close = list(fn.cancelled)
        await op.finish()
        await op.close()
        return cancelled_before_close

    assert run(main()) == [1]


def test_timeout_measured_from_first_attempt_including_retries():
    attempts = []

    async def failing(v):
        attempts.append(v)
        await asyncio.sleep(0.005)
        raise ValueError(f"attempt {len(attempts)}")

    async def main():
        op = AsyncWaitOperator(
            failing, Collector(), timeout=0.1, retry=RetryStrategy.fixed_delay(1000, 0.02)
        )
        await op.open()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        err = await expect_failure(op, [1])
        elapsed = loop.time() - t0
        n = len(attempts)
        await settle(0.08)
        await safe_close(op)
        return err, elapsed, n

    err, elapsed, n = run(main())
    assert isinstance(err.__cause__, AsyncTimeoutError)
    assert 0.1 - EPS <= elapsed < 0.5
    assert 2 <= n <= 6  # ~ 100 ms / 25 ms per attempt, far fewer than 1001
    assert len(attempts) == n  # no attempt after the timeout fired


def test_timeout_cancels_pending_backoff():
    """A long back-off pending when the timer fires is cancelled: no further attempt, no wait."""
    attempts = []

    class F(AsyncFunction):
        async def async_invoke(self, value):
            attempts.append(value)
            raise ConnectionError("down")

        def timeout(self, value):
            return ["gave up"]

    async def main():
        out = Collector()
        op = AsyncWaitOperator(F(), out, timeout=0.05, retry=RetryStrategy.fixed_delay(3, 5.0))
        await op.open()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await op.process_element(1, 1)
        await op.finish()
        elapsed = loop.time() - t0
        await op.close()
        return out, elapsed

    out, elapsed = run(main())
    assert out == [Record("gave up", 1)]
    assert elapsed < 1.0
    assert attempts == [1]


def test_timeout_result_is_never_retried():
    invoked = []
    timeouts = []

    class F(AsyncFunction):
        async def async_invoke(self, value):
            invoked.append(value)
            await asyncio.sleep(10)
            return [value]

        def timeout(self, value):
            timeouts.append(value)
            return []  # empty: would match retry_if_empty

    async def main():
        out = Collector()
        op = AsyncWaitOperator(
            F(),
            out,
            timeout=0.03,
            retry=RetryStrategy.fixed_delay(5, 0.001, result_predicate=retry_if_empty),
        )
        await op.open()
        await op.process_element("x")
        await op.finish()
        await settle(0.05)
        await op.close()
        return out

    out = run(main())
    assert out == []
    assert invoked == ["x"]
    assert timeouts == ["x"]


def test_timeout_exception_is_never_retried_and_fails():
    invoked = []
    timeouts = []
    boom = RuntimeError("timeout handler failed")

    class F(AsyncFunction):
        async def async_invoke(self, value):
            invoked.append(value)
            await asyncio.sleep(10)
            return [value]

        def timeout(self, value):
            timeouts.append(value)
            raise boom

    async def main():
        op = AsyncWaitOperator(F(), Collector(), timeout=0.03, retry=RetryStrategy.fixed_delay(5, 0.001))
        await op.open()
        err = await expect_failure(op, ["x"])
        await settle(0.05)
        await safe_close(op)
        return err

    err = run(main())
    assert err.__cause__ is boom
    assert invoked == ["x"]
    assert timeouts == ["x"]


def test_default_timeout_error_is_never_retried():
    invoked = []

    async def hang(v):
        invoked.append(v)
        await asyncio.sleep(10)

    async def main():
        op = AsyncWaitOperator(hang, Collector(), timeout=0.03, retry=RetryStrategy.fixed_delay(5, 0.001))
        await op.open()
        err = await expect_failure(op, ["x"])
        await settle(0.05)
        await safe_close(op)
        return err

    err = run(main())
    assert isinstance(err.__cause__, AsyncTimeoutError)
    assert invoked == ["x"]


def test_no_timeout_after_completion():
    """Calls that complete well before the timeout never time out later."""
    timeouts = []

    class F(AsyncFunction):
        async def async_invoke(self, value):
            await asyncio.sleep(0.005)
            return [value]

        def timeout(self, value):
            timeouts.append(value)
            raise AssertionError("timeout() called for a completed element")

    async def main():
        out = Collector()
        # generous margins: on a loaded machine a 5 ms sleep can overrun a tight deadline
        op = AsyncWaitOperator(F(), out, timeout=0.3)
        await op.open()
        await feed(op, [1, 2, 3])
        await settle(0.5)  # well past every deadline
        await feed(op, [4])  # must not raise
        await op.finish()
        await settle(0.1)
        await op.close()
        return out

    out = run(main())
    assert out.values() == [1, 2, 3, 4]
    assert timeouts == []


def _live_handles(loop):
    return {h for h in getattr(loop, "_scheduled", []) if not h.cancelled()}


def test_no_live_timer_handles_left_after_finish():
    gates = {}

    async def fn(v):
        await gates[v].wait()
        return v

    async def main():
        loop = asyncio.get_running_loop()
        before = _live_handles(loop)
        for i in range(20):
            gates[i] = asyncio.Event()
        out = Collector()
        op = AsyncWaitOperator(fn, out, timeout=60.0, ordered=False)
        await op.open()
        await feed(op, list(range(20)))
        for i in range(20):
            gates[i].set()
        await op.finish()
        await settle(0)
        leftover = _live_handles(loop) - before
        await op.close()
        return out, leftover

    out, leftover = run(main())
    assert sorted(out.values()) == list(range(20))
    assert leftover == set(), f"timer handles left on the loop: {leftover}"


def test_no_live_timer_handles_left_after_timeout_fallback():
    async def main():
        loop = asyncio.get_running_loop()
        before = _live_handles(loop)
        op = AsyncWaitOperator(Fallback(), Collector(), timeout=0.03)
        await op.open()
        await feed(op, [1, 2])
        await op.finish()
        await settle(0.01)
        leftover = _live_handles(loop) - before
        await op.close()
        return leftover

    assert run(main()) == set()


def test_independent_deadlines_per_element():
    """Each element's timeout runs from its own start: a late fast element is unaffected."""

    async def fn(v):
        await asyncio.sleep(v)
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, timeout=1.0, ordered=False)
        await op.open()
        await op.process_element(0.1)
        await asyncio.sleep(0.6)
        # ends ~1.2 s after the first started (past that one's deadline), ~0.6 s into its own 1 s
        await op.process_element(0.6)
        await op.finish()
        await op.close()
        return out

    assert run(main()).values() == [0.1, 0.6]


def test_timeout_failure_is_async_function_error():
    async def hang(v):
        await asyncio.sleep(10)

    async def main():
        op = AsyncWaitOperator(hang, Collector(), timeout=0.02)
        await op.open()
        await op.process_element(1)
        await settle(0.1)
        with pytest.raises(AsyncFunctionError):
            await op.process_element(2)
        await safe_close(op)

    run(main())


class SleepFor(AsyncFunction):
    """Sleeps ``value`` seconds (a dict: {"id", "s"}); timeout() answers "T<id>"."""

    async def async_invoke(self, value):
        await asyncio.sleep(value["s"])
        return [value["id"]]

    def timeout(self, value):
        return [f"T{value['id']}"]


@pytest.mark.parametrize("ordered", [True, False])
def test_many_calls_time_out_together_and_later_ones_keep_their_own_deadline(ordered):
    """60 hanging calls expire in one go; 20 calls started 0.2 s later finish before theirs."""

    async def main():
        out = Collector()
        op = AsyncWaitOperator(SleepFor(), out, timeout=0.6, ordered=ordered, capacity=100)
        await op.open()
        await feed(op, [{"id": i, "s": 10} for i in range(60)])
        await asyncio.sleep(0.2)
        # done ~0.3 s after the start, their deadlines at ~0.8 s: 0.5 s of slack for a loaded machine
        await feed(op, [{"id": 100 + i, "s": 0.1} for i in range(20)])
        await op.finish()
        await op.close()
        return out.values()

    values = run(main())
    expected = [f"T{i}" for i in range(60)] + [100 + i for i in range(20)]
    assert (values if ordered else sorted(values, key=str)) == (expected if ordered else sorted(expected, key=str))


def test_ordered_completed_calls_behind_a_hanging_head_are_not_timed_out():
    """The head hangs and times out; the calls behind it completed long before (held, not
    emitted): they keep their own results, emitted in order after the head's fallback."""

    async def main():
        out = Collector()
        op = AsyncWaitOperator(SleepFor(), out, timeout=0.05, ordered=True)
        await op.open()
        await feed(op, [{"id": 0, "s": 10}] + [{"id": i, "s": 0.001} for i in range(1, 6)])
        await op.finish()
        await op.close()
        return out.values()

    assert run(main()) == ["T0", 1, 2, 3, 4, 5]


def test_the_timeout_timer_is_set_again_after_an_idle_spell():
    """After every held call ended (the timer may fire with nothing to do), a new call still
    gets its timeout."""

    async def main():
        out = Collector()
        op = AsyncWaitOperator(SleepFor(), out, timeout=0.03, ordered=False)
        await op.open()
        await op.process_element({"id": 1, "s": 0})
        await asyncio.sleep(0.06)  # the first deadline passed with nothing held
        loop = asyncio.get_running_loop()
        started = loop.time()
        await op.process_element({"id": 2, "s": 10})
        await op.finish()
        took = loop.time() - started
        await op.close()
        return out.values(), took

    values, took = run(main())
    assert values == [1, "T2"]
    assert 0.03 - EPS <= took < 2.0
