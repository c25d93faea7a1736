"""aiospark.Budget through the public Spark entry points, counted where the calls land (a real
counting HTTP server on 127.0.0.1): the cap is hard across tasks, every attempt is charged, a spent
budget gives error rows or fails with BudgetExhausted, a cost function that raises is that row's
error, and a Redis-held budget shared by two jobs (also one whose Redis goes away mid-run)."""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

import aiospark
from aiospark import AsyncFunction, RetryStrategy, retry_on
from tests.support.servers import RedisServer
from tests.support.service import FaultService, ServiceConfig


class Fetch(AsyncFunction):
    """GET ``url/item/<id>``; with ``fail_first``, each row's first attempt fails after its request
    landed (so the server counts every attempt)."""

    def __init__(self, url, fail_first=False):
        self.url, self.fail_first = url, fail_first

    async def open(self):
        import aiohttp

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.failed = set()

    async def async_invoke(self, row):
        async with self.session.get(f"{self.url}/item/{row['id']}") as response:
            response.raise_for_status()
            await response.read()
        if self.fail_first and row["id"] not in self.failed:
            self.failed.add(row["id"])
            raise Flaky(f"first attempt of row {row['id']}")
        return [{"id": row["id"]}]

    async def close(self):
        await self.session.close()


class Flaky(Exception):
    pass


def requests_at(service):
    return service.stats(keys=False)["requests"]


def test_budget_500_over_2000_rows_on_2_tasks_error_rows_for_the_rest(spark):
    budget = aiospark.Budget(500)
    with FaultService(ServiceConfig(latency=0.002), process=True) as svc:
        out = aiospark.unordered_wait(spark.range(0, 2000, 1, 2), Fetch(svc.url), "id LONG", capacity=20,
                                      budget=budget, on_error="row")
        rows = out.collect()
        calls = requests_at(svc)
    ok = [r for r in rows if r["_error"] is None]
    errors = [r for r in rows if r["_error"] is not None]
    print(f"Budget(500), 2,000 rows, 2 tasks: {calls} calls at the server, {len(errors)} error rows, "
          f"{budget._ledger.leases} leases")
    assert len(rows) == 2000 and calls <= 500, (len(rows), calls)
    assert len(ok) == calls and len(errors) == 2000 - calls
    assert all(r["_error"].startswith("BudgetExhausted: the budget is spent") for r in errors), errors[:2]
    assert sorted([r["id"] for r in ok] + [r["_input"]["id"] for r in errors]) == list(range(2000))
    # both tasks ended and gave their leases back: the driver sees what started, nothing held
    assert budget.started == calls and budget.spent == calls and budget.left == 500 - calls
    assert calls >= 400, f"{calls}: units held by a task when another ran out are bounded by the lease sizes"
    assert budget.refused == 2000 - calls


def test_a_spent_budget_without_on_error_fails_the_job_with_budget_exhausted(spark):
    budget = aiospark.Budget(50)
    with FaultService(ServiceConfig(latency=0.001), process=True) as svc:
        out = aiospark.unordered_wait(spark.range(0, 400, 1, 2), Fetch(svc.url), "id LONG", capacity=10,
                                      budget=budget)
        with pytest.raises(Exception) as info:
            out.collect()
        calls = requests_at(svc)
    assert "BudgetExhausted" in str(info.value) and "the budget is spent" in str(info.value), str(info.value)[-2000:]
    assert calls <= 50


def test_every_attempt_is_charged_retries_included(spark):
    # every row's first attempt fails after reaching the server: a success costs 2 units
    budget = aiospark.Budget(300)
    retry = RetryStrategy.fixed_delay(3, 0.001, exception_predicate=retry_on(Flaky))
    with FaultService(ServiceConfig(latency=0.001), process=True) as svc:
        out = aiospark.unordered_wait(spark.range(0, 400, 1, 2), Fetch(svc.url, fail_first=True), "id LONG",
                                      capacity=10, retry=retry, budget=budget, on_error="row")
        rows = out.collect()
        attempts = requests_at(svc)
    ok = [r for r in rows if r["_error"] is None]
    assert len(rows) == 400 and attempts <= 300, attempts
    assert 2 * len(ok) <= attempts and budget.started == attempts, (len(ok), attempts, budget.started)
    assert len(ok) >= 100


def price(row):
    if row["id"] % 10 == 3:
        raise ValueError(f"no price for row {row['id']}")
    return 2.0


def test_a_cost_function_that_raises_is_that_rows_error(spark):
    budget = aiospark.Budget(1000, cost=price)
    with FaultService(ServiceConfig(latency=0.001), process=True) as svc:
        out = aiospark.unordered_wait(spark.range(0, 100, 1, 2), Fetch(svc.url), "id LONG", budget=budget,
                                      on_error="row")
        rows = out.collect()
        calls = requests_at(svc)
    errors = {r["_input"]["id"]: r["_error"] for r in rows if r["_error"] is not None}
    assert sorted(errors) == [i for i in range(100) if i % 10 == 3]
    assert all("price" in e and "no price for row" in e for e in errors.values()), errors
    assert calls == 90 and budget.started == 180.0 and budget.spent == 180.0


def test_async_udf_and_lookup_paths_take_a_budget_too(spark):
    budget = aiospark.Budget(30)

    @aiospark.async_udf("long", on_error="null", budget=budget, capacity=5)
    async def double(x):
        return 2 * x

    rows = spark.range(0, 100, 1, 2).select(double("id").alias("d")).collect()
    assert sum(r["d"] is not None for r in rows) <= 30 and budget.started <= 30
    assert sum(r["d"] is None for r in rows) >= 70


def test_lookup_join_lookups_are_capped_too(spark):
    from aiospark.connectors import HttpLookup

    budget = aiospark.Budget(40)
    with FaultService(ServiceConfig(latency=0.001), process=True) as svc:
        source = HttpLookup(svc.url + "/item/{id}", "name STRING")
        rows = aiospark.lookup_join(spark.range(0, 200, 1, 2), source, on="id", batch=False, budget=budget,
                                    on_error="row").collect()
        calls = requests_at(svc)
    errors = [r for r in rows if r["_error"] is not None]
    assert len(rows) == 200 and calls <= 40 and len(errors) == 200 - calls
    assert all("the budget is spent" in r["_error"] for r in errors) and budget.started == calls


def test_budgets_are_refused_at_definition_time():
    for bad in (-1, -0.5, float("nan"), float("inf"), True, "500", None):
        with pytest.raises((ValueError, TypeError), match="Budget limit"):
            aiospark.Budget(bad)
    with pytest.raises(TypeError, match="cost"):
        aiospark.Budget(5, cost=3)
    with pytest.raises(ValueError, match="name="):
        aiospark.Budget(5, redis="redis://127.0.0.1:6379/0")
    with pytest.raises(ValueError, match="redis://"):
        aiospark.Budget(5, redis="http://127.0.0.1:6379/0", name="x")


def test_budget_must_be_a_budget(spark):
    with pytest.raises(TypeError, match="aiospark.Budget"):
        aiospark.unordered_wait(spark.range(3), Fetch("http://127.0.0.1:9"), "id LONG", budget=500)


def test_the_driver_refuses_unsigned_or_wrongly_signed_lease_requests(spark):
    import pickle

    budget = aiospark.Budget(100)
    ticket = pickle.loads(pickle.dumps(budget))      # what a task gets: the collector's address
    body = json.dumps({"id": budget.id, "task": "t", "op": "lease", "need": 1, "want": 100}).encode()
    for headers in ({}, {"X-Aiospark-Secret": "0" * 32}):
        request = urllib.request.Request(ticket.address, data=body, method="POST", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5)
        assert info.value.code == 403
    assert budget.spent == 0 and "secret" not in repr(ticket) and budget._secret not in repr(ticket)


def test_a_redis_budget_is_shared_by_two_jobs(spark):
    name = f"test-{uuid.uuid4().hex}"
    with RedisServer() as redis, FaultService(ServiceConfig(latency=0.001), process=True) as svc:
        first = aiospark.Budget(300, redis=redis.url, name=name)
        rows = aiospark.unordered_wait(spark.range(0, 200, 1, 2), Fetch(svc.url), "id LONG", budget=first,
                                       on_error="row").collect()
        assert sum(r["_error"] is None for r in rows) == 200
        second = aiospark.Budget(300, redis=redis.url, name=name)   # another job, the same pot
        rows = aiospark.unordered_wait(spark.range(0, 200, 1, 2), Fetch(svc.url), "id LONG", budget=second,
                                       on_error="row").collect()
        calls = requests_at(svc)
        assert second.spent == calls and second.left == 300 - calls
    errors = [r["_error"] for r in rows if r["_error"] is not None]
    assert 280 <= calls <= 300, calls
    assert len(errors) == 400 - calls and all("budget is spent" in e for e in errors)


def test_a_redis_that_goes_away_mid_run_fails_the_rows_left_never_overspends(spark):
    name = f"test-{uuid.uuid4().hex}"
    with RedisServer() as redis, FaultService(ServiceConfig(latency=0.02), process=True) as svc:
        budget = aiospark.Budget(5000, redis=redis.url, name=name)

        def stop_redis_after_100_calls():
            deadline = time.monotonic() + 60
            while requests_at(svc) < 100 and time.monotonic() < deadline:
                time.sleep(0.05)
            redis.stop()

        killer = threading.Thread(target=stop_redis_after_100_calls, daemon=True)
        killer.start()
        rows = aiospark.unordered_wait(spark.range(0, 2000, 1, 2), Fetch(svc.url), "id LONG", capacity=5,
                                       budget=budget, on_error="row").collect()
        killer.join()
        calls = requests_at(svc)
    errors = [r["_error"] for r in rows if r["_error"] is not None]
    assert len(rows) == 2000 and len(errors) == 2000 - calls and errors, calls
    assert all("BudgetUnavailable" in e and "budget's Redis" in e and "no call starts without budget" in e
               for e in errors), errors[:3]


def _entry_points_take_a_journal():
    import inspect

    return "journal" in inspect.signature(aiospark.unordered_wait).parameters and hasattr(aiospark, "Journal")


@pytest.mark.skipif(not _entry_points_take_a_journal(), reason="journal= is not on the entry points yet")
def test_a_rerun_with_a_bigger_budget_and_the_journal_calls_only_the_rows_not_done(spark, tmp_path):
    location = str(tmp_path / "journal")
    with FaultService(ServiceConfig(latency=0.002), process=True) as svc:
        first = aiospark.unordered_wait(spark.range(0, 2000, 1, 2), Fetch(svc.url), "id LONG", capacity=20,
                                        budget=aiospark.Budget(500), on_error="row",
                                        journal=aiospark.Journal(location, key="id")).collect()
        first_calls = requests_at(svc)
        budget = aiospark.Budget(2000)
        second = aiospark.unordered_wait(spark.range(0, 2000, 1, 2), Fetch(svc.url), "id LONG", capacity=20,
                                         budget=budget, on_error="row",
                                         journal=aiospark.Journal(location, key="id")).collect()
        calls = requests_at(svc)
    assert first_calls <= 500 and sum(r["_error"] is not None for r in first) == 2000 - first_calls
    # the refusals were not recorded: the rerun calls exactly the rows the first run did not
    print(f"journal rerun: first run {first_calls} calls, both runs {calls} calls")
    assert calls == 2000, (first_calls, calls)
    assert all(r["_error"] is None for r in second) and sorted(r["id"] for r in second) == list(range(2000))
    assert budget.started == 2000 - first_calls


def _budget_request(request, reply):
    """The first reply to each lease and release (by its body: a retry is signed anew) is lost."""
    from tests.support.reply_dropper import http_body

    body = http_body(request)
    return body if b'"op": "lease"' in body or b'"op": "release"' in body else None


def test_lost_ledger_replies_are_retried_and_never_change_what_the_budget_counts(spark, monkeypatch):
    # the executors reach the driver through a proxy that loses the first reply to every lease and
    # release after the ledger acted on it (a read timeout, a reset): each task sends them again
    from aiospark.spark.endpoint import collector
    from tests.support.reply_dropper import ReplyDropper

    with ReplyDropper(0, drop=_budget_request) as proxy:
        advertised, bind = f"127.0.0.1:{proxy.port}", "127.0.0.1:0"   # a tunnel's two ends
        monkeypatch.setenv("AIOSPARK_METRICS_HOST", advertised)
        monkeypatch.setenv("AIOSPARK_METRICS_BIND", bind)
        proxy.upstream_port = collector((advertised, bind)).server.server_address[1]
        budget = aiospark.Budget(1000)
        with FaultService(ServiceConfig(latency=0.001), process=True) as svc:
            rows = aiospark.unordered_wait(spark.range(0, 200, 1, 2), Fetch(svc.url), "id LONG", capacity=10,
                                           budget=budget, on_error="row").collect()
            calls = requests_at(svc)
    assert len(rows) == 200 and all(r["_error"] is None for r in rows) and calls == 200
    assert proxy.dropped >= 4, proxy.dropped   # two tasks: at least a lease and a release each
    assert budget.spent == 200 and budget.started == 200 and budget.left == 800, budget


def test_lost_redis_replies_are_retried_and_never_change_what_the_budget_counts(spark):
    from tests.support.reply_dropper import ReplyDropper

    def evalsha(request, reply):
        return request if b"EVALSHA" in request and not reply.startswith(b"-") else None

    name = f"test-{uuid.uuid4().hex}"
    with RedisServer() as redis, ReplyDropper(redis.port, drop=evalsha) as proxy, \
            FaultService(ServiceConfig(latency=0.001), process=True) as svc:
        budget = aiospark.Budget(1000, redis=f"redis://127.0.0.1:{proxy.port}/0", name=name)
        rows = aiospark.unordered_wait(spark.range(0, 200, 1, 2), Fetch(svc.url), "id LONG", capacity=10,
                                       budget=budget, on_error="row").collect()
        calls = requests_at(svc)
        spent = budget.spent
    assert len(rows) == 200 and all(r["_error"] is None for r in rows) and calls == 200
    assert proxy.dropped >= 4, proxy.dropped
    assert spent == 200, spent
