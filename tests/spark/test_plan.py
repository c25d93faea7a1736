"""``aiospark.plan``: what a run will cost, computed by Spark without calling anything (issue 48).

Each figure is checked against the run it predicts: the calls a real HTTP server on 127.0.0.1
counts when the same call then runs.
"""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

import aiospark
from tests.support.journal import calls
from tests.support.key_call import KEY_SCHEMA, KeyCall
from tests.support.servers import RedisServer

BUCKETS = 4


def keyed(spark, rows=600, keys=200, partitions=3, nulls=0):
    """``rows`` rows over ``keys`` distinct keys spread over every partition, then ``nulls`` NULL keys."""
    df = spark.range(0, rows, 1, partitions).select("id", F.format_string("k%04d", F.col("id") % keys).alias("key"))
    if nulls:
        df = df.unionByName(spark.range(rows, rows + nulls, 1, 1).select("id", F.lit(None).cast("string").alias("key")))
    return df


def test_plan_counts_what_the_run_then_calls(spark, service, tmp_path):
    journal = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=BUCKETS)
    df = keyed(spark, nulls=5)
    before = calls(service)
    p = aiospark.plan(aiospark.unordered_wait, df, KeyCall(service.url), KEY_SCHEMA, journal=journal)
    assert calls(service) == before  # planning calls nothing
    assert (p.rows, p.null_keys, p.distinct_keys, p.recorded, p.calls, p.dedup, p.exact) == (605, 5, 200, 0, 205,
                                                                                          True, True)
    assert "calls left 205" in str(p) and "distinct keys 200" in str(p)

    # half of the keys recorded by a first run over another slice of the input
    aiospark.unordered_wait(keyed(spark, rows=100, keys=100), KeyCall(service.url), KEY_SCHEMA,
                            journal=journal).collect()
    p = aiospark.plan(aiospark.unordered_wait, df, KeyCall(service.url), KEY_SCHEMA, journal=journal)
    assert (p.recorded, p.calls) == (100, 105)
    before = calls(service)
    out = aiospark.unordered_wait(df, KeyCall(service.url), KEY_SCHEMA, journal=journal).collect()
    assert calls(service) - before == p.calls and len(out) == 605


def test_without_the_shuffle_each_task_pays_for_its_keys_and_the_plan_says_so(spark, service, tmp_path):
    journal = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=BUCKETS)
    df = keyed(spark, rows=600, keys=200, partitions=3)  # every key in each of the 3 partitions
    p = aiospark.plan(aiospark.ordered_wait, df, KeyCall(service.url), KEY_SCHEMA, journal=journal)
    assert (p.distinct_keys, p.calls, p.dedup, p.exact) == (200, 600, False, False)
    assert "calls left at most 600" in str(p)
    before = calls(service)
    aiospark.ordered_wait(df, KeyCall(service.url), KEY_SCHEMA, journal=journal).collect()
    # at least once per key, at most once per task holding it (a later task may find an earlier's)
    assert 200 <= calls(service) - before <= p.calls
    p = aiospark.plan(aiospark.ordered_wait, df.repartition(2), KeyCall(service.url), KEY_SCHEMA, journal=journal)
    assert (p.recorded, p.calls) == (200, 0)


def test_kept_errors_count_as_recorded_only_with_keep_errors(spark, service, tmp_path):
    class Failing(KeyCall):
        async def async_invoke(self, row):
            if row["key"].endswith("7"):
                raise ValueError(f"no such item {row['key']}")  # an answer: kept with keep_errors
            return await super().async_invoke(row)

    location = str(tmp_path / "j")
    kept = aiospark.Journal(location, key="key", keep_errors=True, buckets=BUCKETS)
    df = keyed(spark, rows=100, keys=100)
    aiospark.unordered_wait(df, Failing(service.url), KEY_SCHEMA, journal=kept, on_error="row").collect()
    assert aiospark.plan(aiospark.unordered_wait, df, Failing(service.url), KEY_SCHEMA, journal=kept,
                         on_error="row").calls == 0
    not_kept = aiospark.Journal(location, key="key", buckets=BUCKETS)
    p = aiospark.plan(aiospark.unordered_wait, df, Failing(service.url), KEY_SCHEMA, journal=not_kept, on_error="row")
    assert (p.recorded, p.calls) == (90, 10)


def test_plan_with_a_redis_journal_and_a_lookup_join(spark, service, tmp_path):
    with RedisServer() as srv:
        journal = aiospark.Journal(f"{srv.url}?prefix=plan", key="key", buckets=BUCKETS)
        df = keyed(spark, rows=300, keys=150)
        aiospark.unordered_wait(df.limit(60), KeyCall(service.url), KEY_SCHEMA, journal=journal).collect()
        p = aiospark.plan(aiospark.unordered_wait, df, KeyCall(service.url), KEY_SCHEMA, journal=journal)
        recorded = len({r.key for r in df.limit(60).collect()})
        assert (p.distinct_keys, p.recorded, p.calls) == (150, recorded, 150 - recorded)


def test_plan_refuses_what_the_run_refuses_and_takes_only_the_dataframe_entry_points(spark, service, tmp_path):
    df = keyed(spark, rows=10, keys=10)
    with pytest.raises(TypeError, match="ordered_wait, aiospark.unordered_wait or"):
        aiospark.plan(aiospark.async_udf, df, KeyCall(service.url), KEY_SCHEMA)
    with pytest.raises(ValueError, match="dedup=True"):
        aiospark.plan(aiospark.ordered_wait, df, KeyCall(service.url), KEY_SCHEMA,
                      journal=aiospark.Journal(str(tmp_path / "j"), key="key"), dedup=True)
    p = aiospark.plan(aiospark.unordered_wait, df, KeyCall(service.url), KEY_SCHEMA)  # no journal: every row
    assert (p.rows, p.calls, p.journal) == (10, 10, None)
