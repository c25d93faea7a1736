"""How a call uses its rate limit: the cost of each attempt, a cost function that fails, and a
Retry-After that pauses the limit for every call."""
import asyncio

import pytest

from aiospark import RateLimit, RetryStrategy
from aiospark.core import AsyncWaitOperator
from aiospark.core.calls import CostError

from ._util import Collector, run, run_operator


class Recording:
    """A synchronous limiter that records what it was charged and told (never makes anyone wait)."""

    def __init__(self, cost=None):
        self.cost = cost
        self.charged = []
        self.pauses = []

    def reserve(self, cost=1.0):
        self.charged.append(cost)
        return 0.0

    def pause(self, seconds):
        self.pauses.append(seconds)


class TooMany(Exception):
    def __init__(self, retry_after):
        super().__init__(f"429, retry after {retry_after}")
        self.retry_after = retry_after


def test_every_attempt_is_charged_the_cost_of_its_value():
    limiter = Recording(cost=lambda value: len(value))
    attempts = {}

    async def flaky(value):
        attempts[value] = attempts.get(value, 0) + 1
        if value == "ccc" and attempts[value] == 1:
            raise ConnectionError("once")
        return value

    run(run_operator(flaky, ["a", "bb", "ccc"], rate_limit=limiter, retry=RetryStrategy.fixed_delay(1, 0.001)))
    assert sorted(limiter.charged) == [1.0, 2.0, 3.0, 3.0]  # the retry of "ccc" is charged again


@pytest.mark.parametrize("cost, message", [
    (lambda value: 1 / 0, "raised ZeroDivisionError"),
    (lambda value: -1, "must return a finite number >= 0, got -1"),
    (lambda value: "3", "must return a finite number >= 0"),
    (lambda value: float("inf"), "must return a finite number >= 0"),
])
def test_a_bad_cost_fails_that_value_naming_the_cost_function(cost, message):
    async def echo(value):
        return value

    errors = []
    out = run(run_operator(echo, [1, 2], rate_limit=Recording(cost=cost),
                           on_error=lambda v, e: errors.append(e) or [f"error {v}"]))
    assert out.values() == ["error 1", "error 2"]
    assert all(isinstance(e, CostError) and message in str(e) and "cost function" in str(e) for e in errors)


def test_a_retry_after_pauses_the_limit():
    limiter = Recording()
    seen = []

    async def refuse_once(value):
        seen.append(value)
        if len(seen) == 1:
            raise TooMany(2.5)
        if len(seen) == 2:
            raise TooMany(0)  # no positive Retry-After: no pause
        return value

    run(run_operator(refuse_once, [1], rate_limit=limiter, retry=RetryStrategy.fixed_delay(2, 0.001),
                     timeout=None), guard=10)
    assert limiter.pauses == [2.5]


def test_a_retry_after_holds_back_other_calls_of_a_real_bucket():
    # one call is refused with Retry-After: 0.3 s; the calls after it wait for the pause, not only it
    async def main():
        loop = asyncio.get_running_loop()
        starts = []

        async def fn(value):
            starts.append((value, loop.time()))
            if value == 0 and sum(1 for v, _ in starts if v == 0) == 1:
                raise TooMany(0.3)
            return value

        out = Collector()
        op = AsyncWaitOperator(fn, out, capacity=1, rate_limit=RateLimit(1000, burst=100),
                               retry=RetryStrategy.fixed_delay(1, 0.001))
        await op.open()
        began = loop.time()
        for v in range(5):
            await op.process_element(v)
        await op.finish()
        await op.close()
        return began, starts

    began, starts = run(main())
    later = [t for v, t in starts[1:]]
    assert min(later) - began >= 0.3 * 0.9  # the retry of 0 and every later call waited for the pause


def test_cost_weighted_bucket_spaces_calls_by_cost():
    async def main():
        loop = asyncio.get_running_loop()

        async def fn(value):
            return value

        out = Collector()
        op = AsyncWaitOperator(fn, out, capacity=100, rate_limit=RateLimit(100, burst=10, cost=lambda v: v))
        await op.open()
        began = loop.time()
        for v in [10] * 11:  # 110 units at 100/s with a burst of 10: about one second
            await op.process_element(v)
        await op.finish()
        await op.close()
        return loop.time() - began, op.metrics

    elapsed, metrics = run(main())
    assert elapsed >= 1.0 * 0.9
    assert metrics.rate_limited == 10


def test_cost_errors_name_a_callable_object():
    class Tokens:
        def __call__(self, value):
            raise LookupError("no text")

    async def echo(value):
        return value

    out = run(run_operator(echo, ["x"], rate_limit=Recording(cost=Tokens()), on_error=lambda v, e: [str(e)]))
    assert out.values() == ["the rate limit's cost function 'Tokens' raised LookupError: no text"]
