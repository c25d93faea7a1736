"""aiospark on a real standalone cluster: functions, clients and errors cross process boundaries.

The driver (this process) talks to a standalone master; the executors are JVMs started by the
worker, and the Python workers that run the async calls are their children. Calls go over real HTTP
to a :class:`~tests.support.service.FaultService` on 127.0.0.1 that runs here, in the driver.

Run through tests/spark/test_isolated.py, or directly:
``AIOSPARK_ISOLATED=cluster python -m pytest tests/isolated/cluster -q -p no:cacheprovider``.
"""
from __future__ import annotations

import asyncio
import os
import random

import aiohttp
import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark import AsyncFunction
from tests.support.service import FaultService, ServiceConfig, expected_item

# Functions run on the executors' Python workers; they are pickled by reference to this module.


class HttpLookup(AsyncFunction):
    """GET /item/{key} with one aiohttp session per worker, opened on the worker's event loop."""

    def __init__(self, base_url: str, fail_key: str | None = None, report_close: bool = False):
        self.base_url = base_url
        self.fail_key = fail_key
        self.report_close = report_close
        self.session = None

    async def open(self):
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    async def async_invoke(self, row):
        key = row["key"]
        path = f"/missing/{key}" if key == self.fail_key else f"/item/{key}"  # the service answers 404
        async with self.session.get(self.base_url + path) as response:
            response.raise_for_status()
            item = await response.json()
        return [{"key": item["key"], "value": item["value"], "name": item["name"], "pid": os.getpid()}]

    async def close(self):
        if self.session is not None:
            if self.report_close:  # tell the service this worker's instance was closed
                async with self.session.get(f"{self.base_url}/echo", params={"closed": str(os.getpid())}):
                    pass
            await self.session.close()


async def jittery_identity(row):
    await asyncio.sleep(random.random() * 0.01)
    return {"id": row["id"], "pid": os.getpid()}


async def fail_on_13(row):
    await asyncio.sleep(0.001)
    if row["id"] == 13:
        raise ValueError("thirteen is unlucky")
    return {"id": row["id"]}


_sessions: dict = {}


async def _client() -> aiohttp.ClientSession:
    """One aiohttp session per worker event loop, for the async_udf below."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        session = _sessions[loop] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    return session


@aiospark.async_udf("string", capacity=32, timeout=20)
async def item_name(base_url, key):
    async with (await _client()).get(f"{base_url}/item/{key}") as response:
        response.raise_for_status()
        return (await response.json())["name"]


@aiospark.async_udf("int")
async def worker_pid(x):
    await asyncio.sleep(0.001)
    return os.getpid()


# -- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark(cluster_spark):
    return cluster_spark


@pytest.fixture
def service():
    with FaultService(ServiceConfig(latency=0.005)) as svc:
        yield svc


def keys_df(spark, n: int, partitions: int):
    return spark.range(0, n, 1, partitions).select(F.format_string("k%04d", "id").alias("key"))


# -- tests -----------------------------------------------------------------------------------------------


def test_session_runs_on_the_standalone_cluster(spark, cluster):
    sc = spark.sparkContext
    assert sc.master == cluster["url"] and cluster["url"].startswith("spark://127.0.0.1:")
    executors = [e for e in sc._jsc.sc().statusTracker().getExecutorInfos() if e.host() == "127.0.0.1"]
    assert len(executors) >= 2  # the driver and the worker's executor
    # the worker really launched an executor for this application
    assert any(cluster["work_dir"].glob(f"{sc.applicationId}/*/stderr"))


def test_http_enrichment_from_executors(spark, service):
    n = 400
    out = aiospark.unordered_wait(keys_df(spark, n, 4), HttpLookup(service.url),
                                  "key STRING, value LONG, name STRING, pid INT", capacity=32, timeout=15)
    rows = out.collect()

    keys = [f"k{i:04d}" for i in range(n)]
    assert sorted(r.key for r in rows) == keys
    for r in rows:
        assert {"key": r.key, "value": r.value, "name": r.name} == expected_item(r.key)
    # the calls were made by executor-side Python workers, not by the driver
    pids = {r.pid for r in rows}
    assert os.getpid() not in pids
    assert all(_parent_is_not(pid, os.getpid()) for pid in pids)
    # one HTTP request per row: no retries, no duplicates, nothing made on the driver
    stats = service.stats()
    assert stats["item_requests"] == n and stats["ok"] == n
    assert stats["key_hits"] == dict.fromkeys(keys, 1)


def _parent_is_not(pid: int, driver_pid: int) -> bool:
    """The Python worker descends from the executor JVM, not from this driver process."""
    try:
        ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return True  # already gone (an idle worker that exited): it was not ours either way
    return ppid != driver_pid


def test_ordered_wait_keeps_partition_order_on_the_cluster(spark):
    df = spark.range(0, 2000, 1, 2)
    expected = [[r.id for r in part] for part in df.rdd.glom().collect()]
    out = aiospark.ordered_wait(df, jittery_identity, "id LONG, pid INT", capacity=64)
    parts = out.rdd.glom().collect()
    assert [[r.id for r in part] for part in parts] == expected
    assert os.getpid() not in {r.pid for part in parts for r in part}


def test_unordered_wait_reorders_on_the_cluster(spark):
    got = [r.id for r in aiospark.unordered_wait(spark.range(0, 500, 1, 1), jittery_identity, "id LONG, pid INT",
                                                 capacity=64).collect()]
    assert sorted(got) == list(range(500)) and got != list(range(500))


def test_async_udf_calls_the_service_from_executors(spark, service):
    n = 300
    df = keys_df(spark, n, 3)
    rows = df.select("key", item_name(F.lit(service.url), "key").alias("name"), worker_pid(F.lit(1)).alias("pid")) \
        .collect()
    assert sorted((r.key, r.name) for r in rows) == [(f"k{i:04d}", f"item-k{i:04d}") for i in range(n)]
    assert os.getpid() not in {r.pid for r in rows}
    stats = service.stats()
    assert stats["item_requests"] == n and set(stats["key_hits"].values()) == {1}


def test_async_udf_registered_for_sql_on_the_cluster(spark, service):
    spark.udf.register("aiospark_item_name", item_name)
    rows = spark.sql(f"SELECT id, aiospark_item_name('{service.url}', format_string('k%04d', id)) AS name "
                     "FROM range(0, 50, 1, 2)").collect()
    assert sorted((r.id, r.name) for r in rows) == [(i, f"item-k{i:04d}") for i in range(50)]
    assert service.stats()["item_requests"] == 50


def test_failing_call_fails_the_job_naming_the_row(spark, service):
    df = keys_df(spark, 60, 2)
    with pytest.raises(Exception) as info:
        aiospark.unordered_wait(df, HttpLookup(service.url, fail_key="k0013"),
                                "key STRING, value LONG, name STRING, pid INT", timeout=15).collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "{'key': 'k0013'}" in text
    assert "ClientResponseError" in text and "404" in text  # the service's answer, raised on the executor


def test_failure_of_a_plain_function_names_the_row(spark):
    with pytest.raises(Exception) as info:
        aiospark.ordered_wait(spark.range(0, 40, 1, 2), fail_on_13, "id LONG").collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "{'id': 13}" in text and "thirteen is unlucky" in text


def test_error_rows_on_the_cluster(spark):
    rows = aiospark.unordered_wait(spark.range(0, 40, 1, 2), fail_on_13, "id LONG", on_error="row").collect()
    assert len(rows) == 40
    assert [(r.id, r._input.id) for r in rows if r._error] == [(None, 13)]
    assert sorted(r.id for r in rows if not r._error) == [i for i in range(40) if i != 13]


def test_a_journal_at_a_local_path_is_warned_about_on_a_cluster(spark, tmp_path):
    """A local path on a cluster master: each executor host would keep its own journal. A warning
    naming the fix (not a refusal: the path may be a mount every host shares)."""
    from aiospark.spark.journal_location import JournalLocationWarning

    df = spark.range(0, 20, 1, 2).select("id")
    with pytest.warns(JournalLocationWarning, match=r"spark://127\.0\.0\.1.*object store \(s3://.*redis://"):
        out = aiospark.unordered_wait(df, jittery_identity, "id LONG, pid INT",
                                      journal=aiospark.Journal(str(tmp_path / "j"), key="id"))
    assert sorted(r.id for r in out.collect()) == list(range(20))  # this cluster's hosts share the disk


def test_a_journal_shared_by_two_workers_pays_each_key_once_whatever_the_partitioning(spark):
    """Issue 48 on a cluster: the executors of two workers share one journal on an object store
    (moto's S3 server, here); equal keys spread over every partition are called once per job, and
    a rerun partitioned any other way calls nothing."""
    from tests.support.journal import calls
    from tests.support.key_call import KEY_SCHEMA, KeyCall
    from tests.support.s3 import S3Server

    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    assert len({(e.host(), e.port()) for e in infos}) == 3  # the driver and an executor on each worker
    with S3Server() as s3, FaultService(ServiceConfig(latency=0.002)) as svc:
        journal = aiospark.Journal(s3.uri(), key="key")
        # 600 rows, 200 keys, each key in every one of the 3 partitions
        df = spark.range(0, 600, 1, 3).select(F.format_string("k%03d", F.col("id") % 200).alias("key"))
        first = aiospark.unordered_wait(df, KeyCall(svc.url), KEY_SCHEMA, journal=journal).collect()
        assert calls(svc) == 200
        assert sorted(r.key for r in first) == sorted(f"k{i % 200:03d}" for i in range(600))
        assert all(r.value == expected_item(r.key)["value"] for r in first)
        for n in (1, 4, 7):
            again = aiospark.unordered_wait(df.repartition(n), KeyCall(svc.url), KEY_SCHEMA, journal=journal).collect()
            assert sorted((r.key, r.value) for r in again) == sorted((r.key, r.value) for r in first)
        assert calls(svc) == 200
