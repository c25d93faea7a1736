"""journal= through real Spark against a counting HTTP service: reruns cost no calls, both stores."""
from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark.journal import JournalMismatch
from tests.chaos import ITEM_SCHEMA, ServiceCall
from tests.support.journal import calls
from tests.support.servers import RedisServer
from tests.support.service import item_value

ROWS = 1000


class FailSome(ServiceCall):
    """Calls the service, then fails rows whose id is a multiple of 7 (after the call: it counts)."""

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        out = await super().async_invoke(row)
        if row["id"] % 7 == 0:
            raise ValueError(f"row {row['id']} is refused")
        return out


class KeyEcho(ServiceCall):
    """Returns aiospark.idempotency_key() as the name (and calls the service)."""

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        out = await super().async_invoke(row)
        out[0]["name"] = aiospark.idempotency_key()
        return out


async def twice(key, url):
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}/item/{key}") as r:
            return (await r.json())["value"] * 2


@pytest.fixture(scope="module")
def redis_url():
    with RedisServer() as srv:
        yield srv.url


def items(spark, rows=ROWS, partitions=2):
    return spark.range(0, rows, 1, partitions).select("id", F.format_string("k%05d", "id").alias("key"))


@pytest.mark.parametrize("store", ["dir", "redis"])
def test_a_finished_job_rerun_with_its_journal_makes_no_call(spark, service, redis_url, tmp_path, store):
    loc = str(tmp_path / "j") if store == "dir" else f"{redis_url}?prefix=t-{os.urandom(4).hex()}"
    journal = aiospark.Journal(loc, key="id")
    before = calls(service)
    first = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert calls(service) - before == ROWS
    assert [r.id for r in first] == list(range(ROWS)) and all(r.value == item_value(r.key) for r in first)
    before = calls(service)
    again = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert calls(service) - before == 0
    assert again == first
    # ordered_wait and unordered_wait give a row the same outputs: either reads the other's journal
    before = calls(service)
    unordered = aiospark.unordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA,
                                        journal=aiospark.Journal(loc, key="id")).collect()
    assert calls(service) - before == 0
    assert sorted(unordered) == sorted(first)


def test_wrong_function_is_refused_at_definition(spark, service, tmp_path):
    loc = str(tmp_path / "j")
    aiospark.ordered_wait(items(spark, 50), ServiceCall(service.url), ITEM_SCHEMA,
                          journal=aiospark.Journal(loc)).collect()
    with pytest.raises(JournalMismatch, match=r"function: 'tests.chaos.ServiceCall' \(journal\) vs "
                                              r"'tests.spark.test_journal_spark.KeyEcho' \(now\)"):
        aiospark.ordered_wait(items(spark, 50), KeyEcho(service.url), ITEM_SCHEMA, journal=aiospark.Journal(loc))
    with pytest.raises(JournalMismatch, match="output schema"):
        aiospark.ordered_wait(items(spark, 50), ServiceCall(service.url), ITEM_SCHEMA + ", extra INT",
                              journal=aiospark.Journal(loc))


def test_kept_errors_come_back_as_the_same_error_rows(spark, service, tmp_path):
    journal = aiospark.Journal(str(tmp_path / "j"), key="id", keep_errors=True)

    def run():
        return aiospark.unordered_wait(items(spark, 700), FailSome(service.url), ITEM_SCHEMA, on_error="row",
                                       journal=journal).collect()

    before = calls(service)
    first = run()
    assert calls(service) - before == 700
    before = calls(service)
    again = run()
    assert calls(service) - before == 0
    errors = sorted(r._error for r in again if r._error is not None)
    assert len(errors) == 100 and errors == sorted(r._error for r in first if r._error is not None)
    assert all(e.startswith("ValueError: row ") for e in errors)
    assert sorted(map(str, again)) == sorted(map(str, first))
    # without keep_errors only the failed rows are called again
    before = calls(service)
    aiospark.unordered_wait(items(spark, 700), FailSome(service.url), ITEM_SCHEMA, on_error="row",
                            journal=aiospark.Journal(str(tmp_path / "j"), key="id")).collect()
    assert calls(service) - before == 100


def test_equal_keys_in_a_task_are_called_once_and_idempotency_keys(spark, service, tmp_path):
    df = spark.range(0, 600, 1, 2).select((F.col("id") % 50).alias("id"),
                                          F.format_string("k%05d", F.col("id") % 50).alias("key"))
    before = calls(service)
    out = aiospark.unordered_wait(df, KeyEcho(service.url), ITEM_SCHEMA,
                                  journal=aiospark.Journal(str(tmp_path / "j"), key="key")).collect()
    assert len(out) == 600
    assert calls(service) - before <= 100  # 50 keys in each of 2 tasks
    # one idempotency key per journal key (a UUID namespaced by the function), 50 different ones
    by_key: dict = {}
    for r in out:
        by_key.setdefault(r.key, set()).add(r.name)
    assert len(by_key) == 50 and all(len(names) == 1 for names in by_key.values())
    keys = {names.pop() for names in by_key.values()}
    assert len(keys) == 50 and all(str(uuid.UUID(k)) == k for k in keys)
    # without a journal the key is of the row's input values: the same for the same row, every run
    plain = aiospark.unordered_wait(df.limit(3), KeyEcho(service.url), ITEM_SCHEMA).collect()
    again = aiospark.unordered_wait(df.limit(3), KeyEcho(service.url), ITEM_SCHEMA).collect()
    assert sorted((r.id, r.name) for r in plain) == sorted((r.id, r.name) for r in again)
    assert all(str(uuid.UUID(r.name)) == r.name for r in plain)


def test_async_udf_rerun_with_its_journal_makes_no_call(spark, service, tmp_path):
    udf = aiospark.async_udf("long", journal=aiospark.Journal(str(tmp_path / "j")))(twice)
    df = items(spark, 300).withColumn("url", F.lit(service.url))
    before = calls(service)
    first = df.select("id", udf("key", "url").alias("v")).collect()
    assert all(r.v == 2 * item_value(f"k{r.id:05d}") for r in first)
    assert calls(service) - before == 300
    before = calls(service)
    again = df.select("id", udf("key", "url").alias("v")).collect()
    assert calls(service) - before == 0 and again == first
    with pytest.raises(ValueError, match="without key="):
        aiospark.async_udf("long", journal=aiospark.Journal(str(tmp_path / "k"), key="id"))
