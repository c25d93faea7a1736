"""Timeouts free their resources: a service that never answers cannot hang a task or pile up connections.

The FaultService hangs every request (``hang_rate=1.0``: it holds the connection and never answers).
One Spark task (one partition) calls it through :class:`tests.chaos.ServiceCall` (aiohttp, connection
pool unbounded, so only aiospark's ``capacity`` bounds the connections) with ``capacity=8``:

* the operator's ``timeout`` (measured from the first attempt, retries included) cancels the hung
  attempt; the task ends in about ``rows / capacity * timeout`` seconds, far below any hang;
* every row becomes an error row naming ``AsyncTimeoutError``; a timed-out element is never retried;
* the service never sees more than ``capacity`` requests -- nor open connections -- at once, and once
  the job is over every connection is closed (cancelled attempts do not leak sockets).

A second job adds a per-attempt client timeout and 5 retries: the overall deadline still wins,
so each row makes at most the attempts that fit into the deadline.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark import RetryStrategy
from aiospark.connectors import is_retryable
from tests.support.service import FaultService, ServiceConfig

from . import ITEM_SCHEMA, ServiceCall

pytestmark = pytest.mark.slow

ROWS = 96
CAPACITY = 8
TIMEOUT = 0.5
RETRIES = 2
WAVES = math.ceil(ROWS / CAPACITY)
SPARK_OVERHEAD = 30.0  # generous: a job on a warm local session on a loaded 2-core machine
DRAIN_SECONDS = 10.0   # how long connections may take to close after the job


def one_task_input(spark, rows: int):
    return spark.range(0, rows, 1, 1).select("id", F.format_string("k%05d", "id").alias("key"))


def wait_drained(svc: FaultService) -> dict[str, Any]:
    """Stats once no request is in flight and no connection open (or after DRAIN_SECONDS)."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while True:
        stats = svc.stats()
        if (stats["connections_open"] == 0 and stats["in_flight"] == 0) or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def peak_attempts(path: Path) -> int:
    if not path.exists():
        return 0
    return max(int(line.split()[1]) for line in path.read_text().split("\n") if line.strip())


@pytest.fixture(scope="module")
def hang_run(spark, tmp_path_factory):
    """One job against a service that hangs every request; everything the tests check about it."""
    peak_file = tmp_path_factory.mktemp("hang") / "attempt-peaks.txt"
    svc = FaultService(ServiceConfig(latency=0.0, hang_rate=1.0)).start()
    try:
        # retries are configured but never used: a hung attempt raises nothing, the deadline ends it
        retry = RetryStrategy.fixed_delay(RETRIES, 0.05, exception_predicate=is_retryable)
        out = aiospark.unordered_wait(one_task_input(spark, ROWS), ServiceCall(svc.url, peak_file=str(peak_file)),
                                      ITEM_SCHEMA, capacity=CAPACITY, timeout=TIMEOUT, retry=retry, on_error="row")
        t0 = time.monotonic()
        rows = out.collect()
        wall = time.monotonic() - t0
        at_end = svc.stats()
        t1 = time.monotonic()
        drained = wait_drained(svc)
        drain_time = time.monotonic() - t1
        run = dict(rows=rows, wall=wall, at_end=at_end, drained=drained, drain_time=drain_time,
                   client_peak=peak_attempts(peak_file))
        print(f"\n[timeouts] hang_rate=1.0: rows in {ROWS}, rows out {len(rows)}, wall {wall:.2f} s "
              f"(ideal {WAVES * TIMEOUT:.1f} s), requests {at_end['requests']}, hangs {at_end['hangs']}, "
              f"peak in flight {at_end['peak_in_flight']}, peak connections {at_end['peak_connections']}, "
              f"client-side peak of live attempts {run['client_peak']}, connections open at job end "
              f"{at_end['connections_open']}, after {drain_time:.2f} s {drained['connections_open']}")
        yield run
    finally:
        svc.stop()


def test_hung_service_does_not_hang_the_task(hang_run):
    bound = WAVES * TIMEOUT * (1 + RETRIES) + SPARK_OVERHEAD
    assert hang_run["wall"] < bound, f"job took {hang_run['wall']:.1f} s against a hung service (bound {bound:.1f} s)"
    # and the deadline is not cut short either: each wave of CAPACITY calls waits out its TIMEOUT
    assert hang_run["wall"] > WAVES * TIMEOUT * 0.9, f"job took only {hang_run['wall']:.2f} s"


def test_every_row_becomes_an_async_timeout_error_row(hang_run):
    rows = hang_run["rows"]
    assert len(rows) == ROWS
    assert all(r.value is None and r.key is None for r in rows)
    errors = Counter(r._error.split(":", 1)[0] for r in rows)
    assert errors == {"AsyncTimeoutError": ROWS}, errors
    assert sorted(r._input.key for r in rows) == [f"k{i:05d}" for i in range(ROWS)]


def test_a_timed_out_element_is_never_retried(hang_run):
    stats = hang_run["drained"]
    assert stats["requests"] == ROWS and stats["hangs"] == ROWS, stats
    assert set(stats["key_hits"].values()) == {1}, Counter(stats["key_hits"].values())


def test_requests_in_flight_never_exceed_capacity(hang_run):
    assert hang_run["at_end"]["peak_in_flight"] <= CAPACITY


#: Connections the service may still count after the client closed them: asyncio closes a socket
#: one loop pass after ``transport.close()``, and the service handles a closed connection's EOF and
#: a new connection's accept in whatever order its loop sees them.
CLOSING_SLACK = 2


def test_open_connections_never_exceed_capacity(hang_run):
    """Counted on both ends: on the worker, the peak of attempts alive at once (an attempt holds its
    connection until its cancellation has unwound through aiohttp, which closes it) -- exactly
    bounded by capacity; and the service's peak of open TCP connections, which may lag the
    client's closes by CLOSING_SLACK.

    Fails on aiospark 0.1.0 (client side every time, service side up to 2 x capacity): a timed-out
    element freed its queue slot as soon as ``task.cancel()`` was *requested* (core/attempts.py
    ``Timeouts._on_timeout``), so the feeder started the next calls -- eagerly, their connect() goes
    out at once -- while the cancelled attempts still held their connections.
    """
    peak = hang_run["at_end"]["peak_connections"]
    client_peak = hang_run["client_peak"]
    assert client_peak <= CAPACITY, (
        f"capacity={CAPACITY}, but the worker had up to {client_peak} attempts (each holding a "
        "connection) alive at once")
    assert peak <= CAPACITY + CLOSING_SLACK, (
        f"capacity={CAPACITY}, but the service saw up to {peak} connections open at once")


def test_connections_are_closed_after_the_job(hang_run):
    drained = hang_run["drained"]
    assert drained["connections_open"] == 0 and drained["in_flight"] == 0, (
        f"{drained['connections_open']} connections still open {DRAIN_SECONDS} s after the job")
    assert drained["connections_total"] == ROWS  # one connection per attempt: none reused while hung


def test_deadline_counts_retries_and_cancels_the_running_attempt(spark, fault_service):
    """Per-attempt client timeout 0.2 s + 5 retries 0.05 s apart, overall timeout 0.6 s: attempts start
    at about 0, 0.25 and 0.5 s; the deadline at 0.6 s cancels the third. Without a deadline counted
    from the first attempt, each row would make 6 attempts (about 1.5 s)."""
    rows_n, capacity, timeout = 48, 8, 0.6
    svc = fault_service(latency=0.0, hang_rate=1.0)
    retry = RetryStrategy.fixed_delay(5, 0.05, exception_predicate=is_retryable)
    out = aiospark.unordered_wait(one_task_input(spark, rows_n), ServiceCall(svc.url, attempt_timeout=0.2),
                                  ITEM_SCHEMA, capacity=capacity, timeout=timeout, retry=retry, on_error="row")
    t0 = time.monotonic()
    rows = out.collect()
    wall = time.monotonic() - t0
    stats = wait_drained(svc)
    hits = Counter(stats["key_hits"].values())
    print(f"\n[timeouts] attempt timeout 0.2 s, 5 retries, deadline {timeout} s: rows {len(rows)}, "
          f"wall {wall:.2f} s, requests {stats['requests']}, attempts per row {dict(hits)}")

    assert len(rows) == rows_n
    assert Counter(r._error.split(":", 1)[0] for r in rows) == {"AsyncTimeoutError": rows_n}
    assert sorted(r._input.key for r in rows) == [f"k{i:05d}" for i in range(rows_n)]
    assert set(hits) <= {2, 3}, f"attempts per row: {dict(hits)} (expected 2-3 within the 0.6 s deadline)"
    assert wall < math.ceil(rows_n / capacity) * timeout * 2 + SPARK_OVERHEAD
    assert stats["connections_open"] == 0 and stats["in_flight"] == 0
