"""RetryStrategy (FLIP-232 semantics, max_retries = calls after the first one) and helpers."""

import asyncio
import itertools

import pytest

from aiospark.core import (
    AsyncFunction,
    AsyncWaitOperator,
    Record,
    RetryStrategy,
    retry_if_empty,
    retry_on,
)

from ._util import EPS, Collector, expect_failure, run, run_operator, safe_close

pytestmark = pytest.mark.timeout(30)


def first(it, n):
    return list(itertools.islice(it, n))


# --------------------------------------------------------------------------- helpers


def test_retry_if_empty():
    assert retry_if_empty([]) is True
    assert retry_if_empty(()) is True
    assert retry_if_empty([1]) is False
    assert retry_if_empty([None]) is False


def test_retry_on_matches_types_and_subclasses():
    pred = retry_on(ValueError, ConnectionError)
    assert pred(ValueError("x")) is True
    assert pred(ConnectionRefusedError("x")) is True  # subclass of ConnectionError
    assert pred(KeyError("x")) is False
    assert pred(RuntimeError("x")) is False


# --------------------------------------------------------------------------- delays()


def test_fixed_delay_sequence():
    assert list(RetryStrategy.fixed_delay(3, 0.25).delays()) == [0.25, 0.25, 0.25]


def test_fixed_delay_zero_retries_has_no_delays():
    assert list(RetryStrategy.fixed_delay(0, 1.0).delays()) == []


def test_exponential_backoff_sequence_with_cap():
    strategy = RetryStrategy.exponential_backoff(5, 0.1, 0.5)
    assert first(strategy.delays(), 10) == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_exponential_backoff_ends_after_max_retries():
    assert len(list(RetryStrategy.exponential_backoff(3, 0.1, 10.0).delays())) == 3
    assert list(RetryStrategy.exponential_backoff(0, 0.1, 10.0).delays()) == []


def test_exponential_backoff_multiplier():
    strategy = RetryStrategy.exponential_backoff(4, 0.01, 1.0, multiplier=3.0)
    assert list(strategy.delays()) == pytest.approx([0.01, 0.03, 0.09, 0.27])


def test_exponential_backoff_multiplier_one_is_constant():
    strategy = RetryStrategy.exponential_backoff(3, 0.2, 0.2, multiplier=1.0)
    assert list(strategy.delays()) == pytest.approx([0.2, 0.2, 0.2])


def test_exponential_backoff_strategy_is_reusable():
    """Each element starts from initial_delay: a fresh delays() iterator restarts the sequence."""
    strategy = RetryStrategy.exponential_backoff(4, 0.1, 1.0)
    a = strategy.delays()
    assert first(a, 2) == pytest.approx([0.1, 0.2])
    b = strategy.delays()
    assert first(b, 4) == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert list(a) == pytest.approx([0.4, 0.8])  # interleaving does not disturb a


def test_exponential_backoff_jitter_bounds():
    jitter = 0.5
    strategy = RetryStrategy.exponential_backoff(6, 0.1, 0.5, jitter=jitter)
    base = [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    seen = []
    for _ in range(200):
        delays = list(strategy.delays())
        assert len(delays) == 6
        for d, b in zip(delays, base):
            assert b * (1 - jitter) - 1e-9 <= d <= b * (1 + jitter) + 1e-9
        seen.extend(d / b for d, b in zip(delays, base))
    # jitter really randomises: factors spread over the range, not all 1.0
    assert max(seen) - min(seen) > 0.5
    assert min(seen) < 0.8 and max(seen) > 1.2


def test_exponential_backoff_zero_jitter_is_exact():
    strategy = RetryStrategy.exponential_backoff(3, 0.1, 1.0, jitter=0.0)
    for _ in range(5):
        assert list(strategy.delays()) == pytest.approx([0.1, 0.2, 0.4], abs=1e-12)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "make",
    [
        lambda: RetryStrategy.fixed_delay(-1, 0.1),
        lambda: RetryStrategy.fixed_delay(1, -0.1),
        lambda: RetryStrategy.exponential_backoff(-1, 0.1, 1.0),
        lambda: RetryStrategy.exponential_backoff(1, -0.1, 1.0),
        lambda: RetryStrategy.exponential_backoff(1, 0.1, -1.0),
        lambda: RetryStrategy.exponential_backoff(1, 0.5, 0.1),  # max_delay < initial_delay
        lambda: RetryStrategy.exponential_backoff(1, 0.1, 1.0, multiplier=0.5),
        lambda: RetryStrategy.exponential_backoff(1, 0.1, 1.0, multiplier=0.0),
        lambda: RetryStrategy.exponential_backoff(1, 0.1, 1.0, jitter=-0.1),
        lambda: RetryStrategy.exponential_backoff(1, 0.1, 1.0, jitter=1.0),
        lambda: RetryStrategy.exponential_backoff(1, 0.1, 1.0, jitter=1.5),
    ],
    ids=[
        "fixed-neg-retries",
        "fixed-neg-delay",
        "exp-neg-retries",
        "exp-neg-initial",
        "exp-neg-max",
        "exp-max-below-initial",
        "exp-multiplier-half",
        "exp-multiplier-zero",
        "exp-jitter-neg",
        "exp-jitter-one",
        "exp-jitter-above-one",
    ],
)
def test_invalid_strategy_arguments(make):
    with pytest.raises(ValueError):
        make()


def test_valid_edge_arguments_accepted():
    RetryStrategy.fixed_delay(0, 0.0)
    RetryStrategy.exponential_backoff(0, 0.0, 0.0)
    RetryStrategy.exponential_backoff(2, 0.1, 0.1, multiplier=1.0, jitter=0.0)
    RetryStrategy.exponential_backoff(2, 0.1, 0.1, jitter=0.99)


# --------------------------------------------------------------------------- in the operator


class Flaky(AsyncFunction):
    """Fails (or returns []) for the first ``bad`` calls of each value, then succeeds."""

    def __init__(self, bad, exc_factory=lambda n: ValueError(f"attempt {n}"), empty=False):
        self.bad = bad
        self.exc_factory = exc_factory
        self.empty = empty
        self.attempts = {}
        self.raised = []
        self.times = []

    async def async_invoke(self, value):
        n = self.attempts[value] = self.attempts.get(value, 0) + 1
        self.times.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0)
        if n <= self.bad:
            if self.empty:
                return []
            exc = self.exc_factory(n)
            self.raised.append(exc)
            raise exc
        return [f"{value}-ok-{n}"]


def test_fixed_delay_retry_on_exception_then_success():
    fn = Flaky(bad=2)
    out = run(run_operator(fn, [Record("a", 1)], retry=RetryStrategy.fixed_delay(3, 0.005)))
    assert out == [Record("a-ok-3", 1)]
    assert fn.attempts == {"a": 3}


def test_any_exception_retried_when_no_predicate():
    fn = Flaky(bad=1, exc_factory=lambda n: RuntimeError("transient"))
    out = run(run_operator(fn, ["a"], retry=RetryStrategy.fixed_delay(1, 0.001)))
    assert out.values() == ["a-ok-2"]


def test_exhausted_exception_retries_fail_with_last_exception():
    fn = Flaky(bad=100)

    async def main():
        op = AsyncWaitOperator(fn, Collector(), retry=RetryStrategy.fixed_delay(3, 0.002))
        await op.open()
        err = await expect_failure(op, ["a"])
        await safe_close(op)
        return err

    err = run(main())
    assert fn.attempts == {"a": 4}  # 1 + max_retries
    assert err.__cause__ is fn.raised[-1]
    assert str(err.__cause__) == "attempt 4"


def test_no_retry_by_default():
    fn = Flaky(bad=1)

    async def main():
        op = AsyncWaitOperator(fn, Collector())
        await op.open()
        err = await expect_failure(op, ["a"])
        await safe_close(op)
        return err

    err = run(main())
    assert fn.attempts == {"a": 1}
    assert err.__cause__ is fn.raised[0]


def test_zero_max_retries_means_one_call():
    fn = Flaky(bad=1)

    async def main():
        op = AsyncWaitOperator(fn, Collector(), retry=RetryStrategy.fixed_delay(0, 0.001))
        await op.open()
        await expect_failure(op, ["a"])
        await safe_close(op)

    run(main())
    assert fn.attempts == {"a": 1}


def test_retry_if_empty_then_result():
    fn = Flaky(bad=2, empty=True)
    strategy = RetryStrategy.fixed_delay(5, 0.002, result_predicate=retry_if_empty)
    out = run(run_operator(fn, [Record("a", 4)], retry=strategy))
    assert out == [Record("a-ok-3", 4)]
    assert fn.attempts == {"a": 3}


def test_retry_if_empty_exhausted_emits_last_result():
    fn = Flaky(bad=100, empty=True)
    strategy = RetryStrategy.fixed_delay(3, 0.002, result_predicate=retry_if_empty)
    out = run(run_operator(fn, [Record("a", 4), Record("b", 5)], retry=strategy))
    assert out == []  # the last (empty) result stands; no failure
    assert fn.attempts == {"a": 4, "b": 4}


def test_result_predicate_exhausted_emits_last_result_as_is():
    calls = []

    class Bad(AsyncFunction):
        async def async_invoke(self, value):
            calls.append(value)
            return ["bad", len(calls)]

    strategy = RetryStrategy.fixed_delay(2, 0.001, result_predicate=lambda results: results[0] == "bad")
    out = run(run_operator(Bad(), [Record("x", 1)], retry=strategy))
    assert out == [Record("bad", 1), Record(3, 1)]
    assert len(calls) == 3


def test_result_predicate_receives_the_results_list():
    seen = []

    class F(AsyncFunction):
        async def async_invoke(self, value):
            return [value, "extra"]

    def pred(results):
        seen.append(list(results))
        return False

    out = run(run_operator(F(), ["v"], retry=RetryStrategy.fixed_delay(2, 0.001, result_predicate=pred)))
    assert seen == [["v", "extra"]]
    assert out.values() == ["v", "extra"]


def test_retry_on_does_not_retry_other_exceptions():
    fn = Flaky(bad=5, exc_factory=lambda n: KeyError(f"k{n}"))
    strategy = RetryStrategy.fixed_delay(3, 0.001, exception_predicate=retry_on(ValueError))

    async def main():
        op = AsyncWaitOperator(fn, Collector(), retry=strategy)
        await op.open()
        err = await expect_failure(op, ["a"])
        await safe_close(op)
        return err

    err = run(main())
    assert fn.attempts == {"a": 1}
    assert isinstance(err.__cause__, KeyError)


def test_retry_on_retries_matching_exceptions():
    fn = Flaky(bad=2, exc_factory=lambda n: ValueError(f"v{n}"))
    strategy = RetryStrategy.fixed_delay(3, 0.001, exception_predicate=retry_on(ValueError))
    out = run(run_operator(fn, ["a"], retry=strategy))
    assert out.values() == ["a-ok-3"]
    assert fn.attempts == {"a": 3}


def test_exception_predicate_receives_the_exception():
    seen = []
    fn = Flaky(bad=1)

    def pred(exc):
        seen.append(exc)
        return True

    out = run(run_operator(fn, ["a"], retry=RetryStrategy.fixed_delay(2, 0.001, exception_predicate=pred)))
    assert out.values() == ["a-ok-2"]
    assert seen == fn.raised


def test_plain_async_def_retried():
    attempts = []

    async def flaky(v):
        attempts.append(v)
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return v * 2

    out = run(run_operator(flaky, [Record(21, 1)], retry=RetryStrategy.fixed_delay(5, 0.001)))
    assert out == [Record(42, 1)]
    assert len(attempts) == 3


def test_retries_per_element_are_independent():
    fn = Flaky(bad=1)
    strategy = RetryStrategy.fixed_delay(1, 0.002)
    out = run(run_operator(fn, [Record(i, i) for i in range(5)], retry=strategy, ordered=True))
    assert out == [Record(f"{i}-ok-2", i) for i in range(5)]
    assert fn.attempts == {i: 2 for i in range(5)}


def test_retry_keeps_ordered_output():
    """An element that needs retries still comes out before later elements in ordered mode."""
    attempts = {}

    async def fn(v):
        n = attempts[v] = attempts.get(v, 0) + 1
        if v == 0 and n < 3:
            raise ValueError("retry me")
        return f"{v}-{n}"

    out = run(run_operator(fn, [0, 1, 2], retry=RetryStrategy.fixed_delay(2, 0.02)))
    assert out.values() == ["0-3", "1-1", "2-1"]


def test_fixed_delay_is_waited_between_attempts():
    fn = Flaky(bad=2)
    run(run_operator(fn, ["a"], retry=RetryStrategy.fixed_delay(2, 0.05)))
    gaps = [b - a for a, b in zip(fn.times, fn.times[1:])]
    assert len(gaps) == 2
    assert all(g >= 0.05 - EPS for g in gaps), gaps


def test_exponential_backoff_delays_are_waited_in_operator():
    fn = Flaky(bad=3)
    strategy = RetryStrategy.exponential_backoff(3, 0.02, 0.05)
    out = run(run_operator(fn, ["a"], retry=strategy))
    assert out.values() == ["a-ok-4"]
    gaps = [b - a for a, b in zip(fn.times, fn.times[1:])]
    assert len(gaps) == 3
    for gap, expected in zip(gaps, [0.02, 0.04, 0.05]):
        assert gap >= expected - EPS, gaps
    assert gaps[-1] < 0.5


def test_shared_strategy_each_element_starts_from_initial_delay():
    """Two operators/elements sharing one strategy: the second element is not penalised by the
    first element's progressed back-off."""
    strategy = RetryStrategy.exponential_backoff(3, 0.02, 1.0, multiplier=4.0)
    fn = Flaky(bad=1)
    run(run_operator(fn, ["a"], retry=strategy))
    fn2 = Flaky(bad=1)
    run(run_operator(fn2, ["b"], retry=strategy))
    gap = fn2.times[1] - fn2.times[0]
    assert 0.02 - EPS <= gap < 0.07  # 0.02, not 0.08


def test_finish_honours_backoff_delays():
    """finish() while a back-off is pending waits the full delay (no early retry at end of input)."""
    fn = Flaky(bad=2)

    async def main():
        loop = asyncio.get_running_loop()
        out = Collector()
        op = AsyncWaitOperator(fn, out, retry=RetryStrategy.fixed_delay(2, 0.06))
        await op.open()
        t0 = loop.time()
        await op.process_element("a", 1)
        await op.finish()
        elapsed = loop.time() - t0
        await op.close()
        return out, elapsed

    out, elapsed = run(main())
    assert out == [Record("a-ok-3", 1)]
    assert elapsed >= 0.12 - EPS
    gaps = [b - a for a, b in zip(fn.times, fn.times[1:])]
    assert all(g >= 0.06 - EPS for g in gaps), gaps
    assert fn.attempts == {"a": 3}  # finish() does not cut retries short


class RetryAfterError(Exception):
    def __init__(self, retry_after):
        super().__init__(f"429, retry after {retry_after}s")
        self.retry_after = retry_after


def test_retry_after_longer_than_strategy_delay_is_honoured():
    fn = Flaky(bad=1, exc_factory=lambda n: RetryAfterError(0.12))
    out = run(run_operator(fn, ["a"], retry=RetryStrategy.fixed_delay(2, 0.001)))
    assert out.values() == ["a-ok-2"]
    gap = fn.times[1] - fn.times[0]
    assert gap >= 0.12 - EPS


def test_retry_after_shorter_than_strategy_delay_keeps_strategy_delay():
    fn = Flaky(bad=1, exc_factory=lambda n: RetryAfterError(0.001))
    out = run(run_operator(fn, ["a"], retry=RetryStrategy.fixed_delay(2, 0.08)))
    assert out.values() == ["a-ok-2"]
    gap = fn.times[1] - fn.times[0]
    assert gap >= 0.08 - EPS


def test_retry_after_honoured_at_finish():
    fn = Flaky(bad=1, exc_factory=lambda n: RetryAfterError(0.1))

    async def main():
        loop = asyncio.get_running_loop()
        op = AsyncWaitOperator(fn, Collector(), retry=RetryStrategy.exponential_backoff(3, 0.001, 0.01))
        await op.open()
        t0 = loop.time()
        await op.process_element("a")
        await op.finish()
        elapsed = loop.time() - t0
        await op.close()
        return elapsed

    assert run(main()) >= 0.1 - EPS
    assert fn.attempts == {"a": 2}


def test_retry_after_does_not_make_unretryable_exception_retryable():
    fn = Flaky(bad=1, exc_factory=lambda n: RetryAfterError(0.01))
    strategy = RetryStrategy.fixed_delay(2, 0.001, exception_predicate=retry_on(KeyError))

    async def main():
        op = AsyncWaitOperator(fn, Collector(), retry=strategy)
        await op.open()
        err = await expect_failure(op, ["a"])
        await safe_close(op)
        return err

    err = run(main())
    assert isinstance(err.__cause__, RetryAfterError)
    assert fn.attempts == {"a": 1}


def test_non_list_result_is_not_retried():
    calls = []

    class Bad(AsyncFunction):
        async def async_invoke(self, value):
            calls.append(value)
            return None

    async def main():
        op = AsyncWaitOperator(Bad(), Collector(), retry=RetryStrategy.fixed_delay(3, 0.001))
        await op.open()
        await expect_failure(op, ["a"])
        await safe_close(op)

    run(main())
    assert calls == ["a"]
