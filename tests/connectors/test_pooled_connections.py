"""Connections stay bounded job after job, and are gone once the session stops.

Each source configuration has one client (pool) per Python worker, shared by every job: the servers
of this module (their own, so that nothing else holds connections to them) are asked how many
clients they have -- PostgreSQL's pg_stat_activity, Redis's CLIENT LIST and, for HTTP, the kernel's
established sockets on the server's port -- after each of 20 jobs, after each of 20 micro-batches of
a streaming query, and after a session of its own (in a child process) stopped.
"""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import aiospark
from aiospark.connectors import HttpLookup, PostgresLookup, RedisLookup
from tests.support.servers import PostgresServer, RedisServer

from ._connections import postgres_clients, python_workers, redis_clients, tcp_clients_by_process, tcp_established
from ._support import HttpStub

# Pools per Python worker and source are the connectors' own doing on any PySpark release (the
# clients' floors are tested by the connector tests): the main CI leg runs this, the PySpark-version
# legs do not (.ci/run)
pytestmark = pytest.mark.version_agnostic

ROOT = Path(__file__).resolve().parents[2]
POOL = 2
JOBS = 20
PASSWORD = "p00l-pw"


@pytest.fixture(scope="module")
def servers():
    with PostgresServer() as pg, RedisServer(password=PASSWORD) as redis:
        pg.execute("CREATE TABLE dim (id INT PRIMARY KEY, name TEXT)")
        pg.execute("INSERT INTO dim SELECT g, 'n' || g FROM generate_series(0, 19) g")
        client = redis.client()
        for i in range(20):
            client.hset(f"dim:{i}", mapping={"tier": str(i % 3)})
        client.connection_pool.disconnect()  # the seeding connection must not count
        http = HttpStub().start()
        http.items.update({str(i): {"price": i * 1.5} for i in range(20)})
        try:
            yield pg, redis, http
        finally:
            http.stop()


def sources(pg, redis, http):
    return (PostgresLookup("dim", "id", "name STRING", dsn=pg.dsn, pool_size=POOL),
            RedisLookup("dim:{id}", "tier INT", url=redis.url, password=PASSWORD, max_connections=POOL),
            HttpLookup(http.base + "/item/{id}", "price DOUBLE", max_connections=POOL))


def enrich(df, srcs):
    for src in srcs:
        df = aiospark.lookup_join(df, src, on="id")
    return df


def counts(pg, redis, http):
    seen = {"pg": postgres_clients(pg.dsn), "redis": redis_clients(redis.port, PASSWORD),
            "http": tcp_established(http.port), "workers": python_workers()}
    if seen["http"] > seen["workers"] * POOL:  # who holds them, for the assertion's message
        seen["http clients"] = tcp_clients_by_process(http.port)
    return seen


def over_bound(c):
    """The sources with more connections than Python workers x pool size (a stage of three
    lookup_joins runs three Python workers per task; workers persist across jobs, each with its pools)."""
    return [k for k in ("pg", "redis", "http") if c[k] > c["workers"] * POOL]


def bounded(seen):
    return not any(over_bound(c) for c in seen)


def over(seen):
    """The counts over their bound, in full (an object as an assertion's message is cut short)."""
    return "\n".join(f"after job {i + 1}: {c}" for i, c in enumerate(seen) if over_bound(c)) or repr(seen)


def test_no_connection_is_left_after_the_session_stops(servers):
    pg, redis, http = servers
    cfg = {"pg_dsn": pg.dsn, "redis_url": redis.url, "redis_port": redis.port, "redis_pw": PASSWORD,
           "http_base": http.base, "http_port": http.port, "jobs": 5}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # first in this module: nothing else is connected to its servers yet
    before = cfg["before"] = counts(pg, redis, http)
    assert (before["pg"], before["redis"], before["http"]) == (0, 0, 0)
    proc = subprocess.run([sys.executable, "-m", "tests.connectors._session_job", json.dumps(cfg)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(c[k] - before[k] <= c["workers"] * POOL for c in report["after_jobs"] for k in ("pg", "redis", "http")), report
    assert any(c["pg"] > before["pg"] for c in report["after_jobs"]), report  # the jobs did connect
    # measured by the child right after spark.stop(), while it still ran
    left = {k: report["after_stop"][k] for k in ("pg", "redis", "http")}
    assert left == {"pg": 0, "redis": 0, "http": 0}, report


def test_twenty_jobs_in_a_row_keep_one_pool_per_worker(spark, servers):
    pg, redis, http = servers
    seen = []
    for _ in range(JOBS):
        srcs = sources(pg, redis, http)  # a new source object per job, as a loop of user code makes
        df = spark.range(0, 400, 1, 4).selectExpr("CAST(id % 20 AS INT) AS id")
        rows = enrich(df, srcs).collect()
        assert len(rows) == 400 and all(r.name == f"n{r.id}" and r.tier == r.id % 3 for r in rows)
        seen.append(counts(pg, redis, http))
    assert bounded(seen), over(seen)
    assert all(c["pg"] > 0 for c in seen), seen
    # not one pool per job: 20 jobs with pool_size=2 used to leave 40 connections per worker
    assert seen[-1]["pg"] <= seen[-1]["workers"] * POOL < JOBS * POOL, seen


def test_streaming_query_with_twenty_micro_batches(spark, servers, tmp_path):
    pg, redis, http = servers
    srcs = sources(pg, redis, http)
    seen, errors = [], []
    done = threading.Event()

    def each(batch, batch_id):
        try:
            rows = enrich(batch.selectExpr("CAST(value % 20 AS INT) AS id"), srcs).collect()
            assert all(r.name == f"n{r.id}" for r in rows)
            seen.append(counts(pg, redis, http))
        except Exception as exc:  # reported by the test, not lost in the query's thread
            errors.append(exc)
        if len(seen) >= JOBS or errors:
            done.set()

    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).option("numPartitions", 2).load()
             .writeStream.foreachBatch(each).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        assert done.wait(600), f"only {len(seen)} micro-batches in 600 s"
    finally:
        query.stop()
    assert not errors, errors
    assert len(seen) >= JOBS
    assert bounded(seen), over(seen)
