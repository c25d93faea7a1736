"""Cost-weighted rate limits through the public Spark entry points: units (not calls) per window
counted where the requests land (real counting HTTP servers), per task and cluster-wide through a
real Redis, a Retry-After in one task pausing every task, and cost functions that raise."""
from __future__ import annotations

import bisect
import time
import uuid

import pytest

import aiospark
from aiospark import AsyncFunction, RateLimit, RetryStrategy, retry_on
from aiospark.connectors.redis import RedisRateLimit
from tests.support.servers import RedisServer
from tests.support.service import FaultService, ServiceConfig


def parity_cost(row):
    """Even ids cost 1 unit, odd ids 3 (e.g. tokens of a short and a long prompt)."""
    return 1.0 if row["id"] % 2 == 0 else 3.0


class FetchRouted(AsyncFunction):
    """GET ``urls[0]/item/<id>`` for even ids and ``urls[1]/item/<id>`` for odd ids, so each counting
    server sees calls of one cost only; the first attempt for ``pause_id`` fails with a
    ``retry_after`` (as a 429 with ``Retry-After`` would) instead. With ``witness``, both attempts
    for ``pause_id`` go there (the failing one just before it fails), so the witness server's two
    arrivals mark when the Retry-After came and when the retry landed."""

    def __init__(self, urls, pause_id=None, retry_after=1.0, witness=None):
        self.urls, self.pause_id, self.retry_after = urls, pause_id, retry_after
        self.witness = witness

    async def open(self):
        import aiohttp

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.failed = set()

    async def async_invoke(self, row):
        url = self.urls[row["id"] % 2]
        if row["id"] == self.pause_id and self.witness is not None:
            url = self.witness
        if row["id"] == self.pause_id and row["id"] not in self.failed:
            self.failed.add(row["id"])
            if self.witness is not None:
                async with self.session.get(f"{url}/item/{row['id']}-429") as response:
                    await response.read()
            raise TooManyRequests(self.retry_after)
        async with self.session.get(f"{url}/item/{row['id']}") as response:
            response.raise_for_status()
            return [{"id": row["id"]}]

    async def close(self):
        await self.session.close()


class TooManyRequests(Exception):
    retryable = True

    def __init__(self, retry_after):
        super().__init__(f"HTTP 429, Retry-After: {retry_after}")
        self.retry_after = retry_after


def weighted_arrivals(cheap, dear):
    return sorted([(t, 1.0) for t in cheap.arrivals()] + [(t, 3.0) for t in dear.arrivals()])


def max_units_in(arrivals, window):
    times = [t for t, _ in arrivals]
    return max(sum(c for _, c in arrivals[i:bisect.bisect_left(times, t + window)])
               for i, t in enumerate(times))


def test_cost_weighted_rate_per_task_at_counting_servers(spark):
    # 120 units per 2 s per task = 60 units/s; 2 tasks = 120 units/s at the servers together
    limit = RateLimit(120, per=2, burst=3, cost=parity_cost)
    with FaultService(ServiceConfig(latency=0.001), process=True) as cheap, \
            FaultService(ServiceConfig(latency=0.001), process=True) as dear:
        out = aiospark.unordered_wait(spark.range(0, 400, 1, 2), FetchRouted([cheap.url, dear.url]),
                                      "id LONG", rate_limit=limit, capacity=20)
        assert out.count() == 400
        arrivals = weighted_arrivals(cheap, dear)
    assert len(arrivals) == 400
    first, last = arrivals[0][0], arrivals[-1][0]
    assert last - first > 5.5, "800 units at 120 units/s take ~6.7 s"
    units = sum(c for t, c in arrivals if first + 1 <= t < first + 5)
    # tight above (each task's bucket); below, only starvation (a busy CPU leaves slots unclaimed)
    assert 0.6 * 120 <= units / 4 <= 1.1 * 120, units / 4
    # any second: 120 units + both tasks' bursts (+ a call of cost 3 each in debt), +10% for stalls
    assert max_units_in(arrivals, 1.0) <= (120 + 2 * 3 + 2 * 3) * 1.1


def test_cost_weighted_limit_through_redis_paused_cluster_wide_by_a_retry_after(spark):
    # one limit of 100 units/s for both tasks (two Python workers); row 60's first attempt gets a
    # Retry-After of 1 s: every task stops starting calls for that long
    with RedisServer() as redis, FaultService(ServiceConfig(latency=0.001), process=True) as cheap, \
            FaultService(ServiceConfig(latency=0.001), process=True) as dear, \
            FaultService(ServiceConfig(latency=0.001), process=True) as witness:
        limit = RedisRateLimit(100, burst=5, cost=lambda row: 1.0 if row["id"] % 2 == 0 else 3.0,
                               key=f"aiospark:test:{uuid.uuid4().hex}", url=redis.url)
        out = aiospark.unordered_wait(
            spark.range(0, 300, 1, 2),
            FetchRouted([cheap.url, dear.url], pause_id=60, witness=witness.url), "id LONG",
            rate_limit=limit, capacity=20,
            retry=RetryStrategy.fixed_delay(2, 0.01, exception_predicate=retry_on(TooManyRequests)))
        t0 = time.monotonic()
        assert sorted(r.id for r in out.collect()) == list(range(300))
        elapsed = time.monotonic() - t0
        failed_at, retried_at = sorted(witness.arrivals())   # row 60: the 429, then its retry
        # both of row 60's attempts passed the limit (cost 1 each)
        arrivals = sorted(weighted_arrivals(cheap, dear) + [(failed_at, 1.0), (retried_at, 1.0)])
    assert len(arrivals) == 301
    times = [t for t, _ in arrivals]
    longest, since = max((b - a, a) for a, b in zip(times, times[1:]))
    assert longest >= 0.75, longest        # both tasks stopped: ~1 s without a single call
    # ... and that silence is the pause row 60's Retry-After caused: it lies between the 429 and
    # the retry (by order of arrival, whatever the machine's speed)
    assert failed_at <= since and since + longest <= retried_at, (failed_at, since, longest, retried_at)
    # a lower bound on time (a busy machine only adds to it): 600 units at 100/s, however many tasks
    assert elapsed >= 600 / 100 * 0.9
    assert max_units_in(arrivals, 1.0) <= (100 + 5 + 3) * 1.1


def broken_cost(row):
    raise KeyError("text")


def picky_cost(row):
    if row["id"] % 5 == 0:
        raise ValueError(f"no price for row {row['id']}")
    return 1.0


async def echo(row):
    return {"id": row["id"]}


def test_a_cost_function_that_raises_fails_the_task_naming_it(spark):
    out = aiospark.unordered_wait(spark.range(0, 10, 1, 1), echo, "id LONG",
                                  rate_limit=RateLimit(1000, cost=broken_cost))
    with pytest.raises(Exception) as info:
        out.collect()
    assert "broken_cost" in str(info.value), str(info.value)[-2000:]


def test_a_cost_function_that_raises_gives_error_rows_with_on_error_row(spark):
    out = aiospark.unordered_wait(spark.range(0, 20, 1, 2), echo, "id LONG", on_error="row",
                                  rate_limit=RateLimit(1000, per=1, cost=picky_cost))
    rows = out.collect()
    errors = sorted((r for r in rows if r["_error"] is not None), key=lambda r: r["_input"])
    assert len(rows) == 20 and len(errors) == 4
    assert all("picky_cost" in r["_error"] and "no price for row" in r["_error"] for r in errors), errors
    assert sorted(r["id"] for r in rows if r["_error"] is None) == [i for i in range(20) if i % 5]
