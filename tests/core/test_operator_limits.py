"""The operator with rate limits (sync and async limiters), adaptive concurrency and metrics."""
from __future__ import annotations

import asyncio
import time

import pytest

from aiospark import AdaptiveConcurrency, AsyncWaitOperator, RateLimit, RetryStrategy
from tests.support.operator import drive


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def echo(x):
    await asyncio.sleep(0)
    return x


def test_token_bucket_spaces_calls_and_counts_waits():
    starts = []

    async def stamp(x):
        starts.append(time.monotonic())
        return x

    out = []
    op = AsyncWaitOperator(stamp, out.append, capacity=50, rate_limit=RateLimit(100, burst=1))
    run(drive(op, range(30)))
    assert [r.value for r in out] == list(range(30))
    assert starts[-1] - starts[0] >= 29 / 100 * 0.95  # 30 calls at 100/s, one at a time
    assert op.metrics.rate_limited == 29 and op.metrics.calls == 30


def test_plain_number_rate_limit_and_retries_count_against_it():
    attempts = {}

    async def flaky(x):
        attempts[x] = attempts.get(x, 0) + 1
        if attempts[x] == 1:
            raise ConnectionError("again")
        return x

    op = AsyncWaitOperator(flaky, lambda e: None, capacity=10, rate_limit=200,
                           retry=RetryStrategy.fixed_delay(1, 0.0))
    t0 = time.monotonic()
    run(drive(op, range(10)))
    # 20 attempts through a 200/s bucket (burst 20) -> no waiting needed; the counters add up
    assert op.metrics.calls == 20 and op.metrics.retries == 10 and time.monotonic() - t0 < 2


class CountingLimiter:
    """An async (shared-style) limiter: lets a call start every 5 ms."""

    def __init__(self):
        self.acquired = 0

    async def acquire(self):
        await asyncio.sleep(0.005)
        self.acquired += 1
        return 0.005


def test_async_limiter_wraps_every_attempt():
    limiter = CountingLimiter()
    out = []
    op = AsyncWaitOperator(echo, out.append, capacity=8, rate_limit=limiter)
    run(drive(op, range(20)))
    assert sorted(r.value for r in out) == list(range(20))
    assert limiter.acquired == 20 and op.metrics.rate_limited == 20


def test_adaptive_concurrency_never_exceeds_its_limit():
    running = peak = 0

    async def tracked(x):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.002)
        running -= 1
        return x

    adaptive = AdaptiveConcurrency(16, initial=4)
    op = AsyncWaitOperator(tracked, lambda e: None, capacity=adaptive)
    run(drive(op, range(400)))
    assert peak <= 16 and op.capacity == 16 and op.metrics.inflight_peak <= 16
    assert adaptive.limit > 4  # latency stayed flat: it grew


def test_capacity_auto_and_bad_values():
    op = AsyncWaitOperator(echo, lambda e: None, capacity="auto")
    assert isinstance(op.adaptive, AdaptiveConcurrency) and op.capacity == 1000
    with pytest.raises(ValueError, match="auto"):
        AsyncWaitOperator(echo, lambda e: None, capacity="many")
    with pytest.raises(TypeError, match="rate_limit"):
        AsyncWaitOperator(echo, lambda e: None, rate_limit="fast")


def test_metrics_count_successes_failures_and_error_rows():
    async def odd_fails(x):
        await asyncio.sleep(0)
        if x % 2:
            raise ValueError(x)
        return x

    op = AsyncWaitOperator(odd_fails, lambda e: None, capacity=4, on_error=lambda v, e: [])
    run(drive(op, range(10)))
    m = op.metrics
    assert (m.calls, m.successes, m.failures, m.error_rows, m.latency_count) == (10, 5, 5, 5, 5)


def test_latency_histogram_is_complete_after_finish_and_when_read_on_the_loop():
    """Latencies are buffered on the hot path; reading metrics on the loop, or after finish(),
    sees every one of them."""

    async def fast(v):
        return v

    async def slow(v):
        await asyncio.sleep(0)
        return v

    async def main(fn):
        op = AsyncWaitOperator(fn, lambda e: None, capacity=50)
        await op.open()
        for i in range(300):
            await op.process_element(i)
        mid = op.metrics.latency_count, op.metrics.successes
        for i in range(700):
            await op.process_element(i)
        await op.finish()
        await op.close()
        return mid, op.metrics

    for fn in (fast, slow):
        (mid_latencies, mid_successes), m = asyncio.run(main(fn))
        assert mid_latencies == mid_successes >= 250
        assert m.latency_count == m.successes == m.calls == 1000
