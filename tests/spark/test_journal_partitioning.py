"""A journal does not care how Spark partitions the input (issue 48): outcomes are kept by the
row's key (a directory journal's ``k=<bucket>/`` folders), so a rerun partitioned any other way,
in any order, calls nothing; and equal keys spread over partitions are called once per job (the
``dedup`` shuffle brings them into one task). Calls are counted at a real HTTP server on 127.0.0.1.
"""
from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark.journal import identity
from aiospark.journal.buckets import bucket_of, partition_values, signed, spark_hash_int, spark_partition_of
from aiospark.spark.dedup import PART_COLUMN, shuffled
from aiospark.spark.journaled import Durable
from tests.chaos import ITEM_SCHEMA, ServiceCall
from tests.support.journal import calls
from tests.support.key_call import KEY_SCHEMA, KeyCall
from tests.support.servers import RedisServer
from tests.support.service import item_value

ROWS = 4000
BUCKETS = 8  # few tasks per shuffle: the tests stay quick on two cores
@pytest.fixture(scope="module")
def redis_url():
    with RedisServer() as srv:
        yield srv.url


def items(spark, rows=ROWS, partitions=4):
    return spark.range(0, rows, 1, partitions).select("id", F.format_string("k%05d", "id").alias("key"))


def exact(rows) -> bool:
    return all(r.value == item_value(r.key) for r in rows)


def test_a_rerun_partitioned_or_ordered_any_other_way_calls_nothing(spark, service, tmp_path):
    journal = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=BUCKETS)
    df = items(spark)
    before = calls(service)
    first = aiospark.unordered_wait(df, ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert calls(service) - before == ROWS and len(first) == ROWS and exact(first)
    for n in (1, 3, 7):
        before = calls(service)
        again = aiospark.unordered_wait(df.repartition(n), ServiceCall(service.url), ITEM_SCHEMA, journal=journal,
                                        dedup=False).collect()  # the rows where Spark put them: no shuffle
        assert calls(service) == before, f"repartition({n}) paid {calls(service) - before} rows again"
        assert sorted(again) == sorted(first)
    shuffled_order = df.orderBy(F.desc("key")).repartition(5, "id")
    again = aiospark.unordered_wait(shuffled_order, ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert calls(service) == before and sorted(again) == sorted(first)

    # ordered_wait: the same journal (one question), rows in another partitioning; order kept
    ordered_in = df.repartition(3, "key").sortWithinPartitions(F.desc("id"))
    out = aiospark.ordered_wait(ordered_in, ServiceCall(service.url), ITEM_SCHEMA, journal=journal) \
        .withColumn("p", F.spark_partition_id()).collect()
    assert calls(service) == before and sorted(r.id for r in out) == list(range(ROWS)) and exact(out)
    for p in range(3):
        ids = [r.id for r in out if r.p == p]
        assert ids and ids == sorted(ids, reverse=True), f"partition {p}'s order was not kept"


def test_a_parquet_rerun_after_another_split_size_calls_nothing(spark, service, tmp_path):
    path = str(tmp_path / "in.parquet")
    items(spark).repartition(2).write.parquet(path)
    journal = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=BUCKETS)
    before = calls(service)
    aiospark.unordered_wait(spark.read.parquet(path), ServiceCall(service.url), ITEM_SCHEMA, journal=journal,
                            dedup=False).collect()
    assert calls(service) - before == ROWS
    splits = spark.read.parquet(path).rdd.getNumPartitions()
    old = {k: spark.conf.get(k) for k in ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")}
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4k")
    spark.conf.set("spark.sql.files.openCostInBytes", "1k")
    try:
        df = spark.read.parquet(path)
        assert df.rdd.getNumPartitions() != splits  # the rerun reads other splits
        before = calls(service)
        out = aiospark.unordered_wait(df, ServiceCall(service.url), ITEM_SCHEMA, journal=journal,
                                      dedup=False).collect()
        assert calls(service) == before and len(out) == ROWS and exact(out)
    finally:
        for k, v in old.items():
            spark.conf.set(k, v)


@pytest.mark.parametrize("store", ["dir", "redis"])
def test_equal_keys_spread_over_partitions_are_called_once_per_job(spark, service, tmp_path, redis_url, store):
    """2,000 rows: the same 1,000 keys in each of 2 partitions. Before: 2,000 calls."""
    # partition 0 holds ids 0..999, partition 1 1000..1999: each the keys e00000..e00999
    df = spark.range(0, 2000, 1, 2).select(F.format_string("e%05d", F.col("id") % 1000).alias("key"))
    assert df.rdd.getNumPartitions() == 2
    location = str(tmp_path / "j") if store == "dir" else f"{redis_url}?prefix=dedup-{random.getrandbits(32):x}"
    journal = aiospark.Journal(location, key="key", buckets=BUCKETS)
    before = calls(service)
    out = aiospark.unordered_wait(df, KeyCall(service.url), KEY_SCHEMA, journal=journal).collect()
    assert calls(service) - before == 1000
    assert Counter(r.key for r in out) == {f"e{i:05d}": 2 for i in range(1000)} and exact(out)

    # dedup=False: no shuffle, equal keys shared only within a task (a new journal: nothing recorded)
    plain = aiospark.Journal(str(tmp_path / "plain") if store == "dir" else f"{location}-plain", key="key",
                             buckets=BUCKETS)
    before = calls(service)
    out = aiospark.unordered_wait(df, KeyCall(service.url), KEY_SCHEMA, journal=plain, dedup=False).collect()
    assert calls(service) - before == 2000 and len(out) == 2000 and exact(out)


def test_null_keys_are_always_called_and_never_shared(spark, service, tmp_path):
    df = spark.range(0, 600, 1, 3).select(
        "id", F.format_string("n%05d", "id").alias("key"),
        F.when(F.col("id") % 2 == 0, F.lit(None)).otherwise(F.col("id") % 5).alias("grp"))
    journal = aiospark.Journal(str(tmp_path / "j"), key="grp", buckets=BUCKETS)
    before = calls(service)
    out = aiospark.unordered_wait(df, KeyCall(service.url), KEY_SCHEMA, journal=journal).collect()
    # 300 rows with a NULL grp, each called; 300 odd ids over grp 0..4: one call each
    assert calls(service) - before == 305 and len(out) == 600
    assert {f"n{i:05d}" for i in range(0, 600, 2)} <= {r.key for r in out}  # each NULL row got its own call
    before = calls(service)
    aiospark.unordered_wait(df, KeyCall(service.url), KEY_SCHEMA, journal=journal).collect()
    assert calls(service) - before == 300  # NULL keys are never recorded: called again


def test_the_shuffle_sends_each_bucket_to_its_partition_and_hashes_as_spark_does(spark, tmp_path):
    rng = random.Random(48)
    values = list(range(-1500, 1500)) + [rng.randrange(-2**31, 2**31) for _ in range(2000)]
    ours = spark.createDataFrame([(v,) for v in values], "v INT").select("v", F.hash("v").alias("h")).collect()
    assert all(signed(spark_hash_int(r.v)) == r.h for r in ours)
    assert [spark_partition_of(v, 200) for v in partition_values(200)] == list(range(200))

    journal = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=BUCKETS)
    df = items(spark, 2000, 3)
    durable = Durable.prepare(journal, df, "unordered_wait", KeyCall("http://127.0.0.1:9"), KEY_SCHEMA)
    rows = shuffled(df, durable, "test").select("key", PART_COLUMN, F.spark_partition_id().alias("p")).collect()
    assert len(rows) == 2000
    assert all(r.p == bucket_of(identity([r.key]), BUCKETS) for r in rows)
    assert Counter(r.p for r in rows).keys() == set(range(BUCKETS))


def test_dedup_is_refused_where_order_forbids_it_and_dedup_false_makes_no_shuffle(spark, service, tmp_path):
    journal = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=BUCKETS)
    df = items(spark, 100, 2)
    fn = KeyCall(service.url)
    with pytest.raises(ValueError, match=r"ordered_wait\(dedup=True\).*keeps each partition's order.*unordered_wait"):
        aiospark.ordered_wait(df, fn, KEY_SCHEMA, journal=journal, dedup=True)
    with pytest.raises(ValueError, match=r"dedup=True\).*none is given: pass journal="):
        aiospark.unordered_wait(df, fn, KEY_SCHEMA, dedup=True)
    with pytest.raises(ValueError, match=r"key= order group.*also holds \['key'\]"):
        aiospark.unordered_wait(df, fn, KEY_SCHEMA, key="id", journal=journal, dedup=True)
    with pytest.raises(ValueError, match=r"lookup_join\(dedup=True\).*keeps each partition's order"):
        from aiospark.connectors import HttpLookup

        aiospark.lookup_join(df, HttpLookup(service.url + "/item/{key}", "name STRING"), on="key",
                             journal=aiospark.Journal(str(tmp_path / "lookup"), key="key"), ordered=True, dedup=True)
    assert not (tmp_path / "lookup").exists()  # refused before the journal was bound
    with pytest.raises(TypeError, match=r"dedup=\.\.\.\) takes True, False or None"):
        aiospark.unordered_wait(df, fn, KEY_SCHEMA, journal=journal, dedup="yes")

    def exchanges(out) -> str:
        return out._jdf.queryExecution().executedPlan().toString()

    # the table route (a directory journal, a key Spark joins exactly): a hash shuffle on the key
    assert "hashpartitioning(key#" in exchanges(aiospark.unordered_wait(df, fn, KEY_SCHEMA, journal=journal))
    assert PART_COLUMN in exchanges(aiospark.unordered_wait(df, fn, KEY_SCHEMA, key=["key", "id"],
                                                            journal=journal))
    for out in (aiospark.unordered_wait(df, fn, KEY_SCHEMA, journal=journal, dedup=False),
                aiospark.ordered_wait(df, fn, KEY_SCHEMA, journal=journal),
                aiospark.unordered_wait(df, fn, KEY_SCHEMA, key="id", journal=journal),
                aiospark.unordered_wait(df, fn, KEY_SCHEMA)):
        assert "Exchange" not in exchanges(out) and PART_COLUMN not in exchanges(out)


def test_the_function_and_error_rows_never_see_the_shuffle_column(spark, tmp_path):
    async def fn(row):
        if row["id"] % 10 == 0:
            raise ValueError(f"columns {sorted(row)}")
        return {"id": row["id"], "cols": ",".join(sorted(row))}

    journal = aiospark.Journal(str(tmp_path / "j"), key="id", buckets=BUCKETS)
    out = aiospark.unordered_wait(items(spark, 200, 2), fn, "id LONG, cols STRING", journal=journal,
                                  on_error="row").collect()
    assert len(out) == 200
    assert {r.cols for r in out if r._error is None} == {"id,key"}
    errors = [r for r in out if r._error is not None]
    assert len(errors) == 20 and all("['id', 'key']" in r._error and r._input.asDict().keys() == {"id", "key"}
                                     for r in errors)


def test_a_journal_keeps_its_buckets(spark, service, tmp_path):
    location = str(tmp_path / "j")
    df = items(spark, 50, 1)
    aiospark.unordered_wait(df, KeyCall(service.url), KEY_SCHEMA, journal=aiospark.Journal(location, key="key",
                                                                                           buckets=16)).collect()
    with pytest.raises(ValueError, match="this journal has 16 buckets"):
        aiospark.unordered_wait(df, KeyCall(service.url), KEY_SCHEMA,
                                journal=aiospark.Journal(location, key="key", buckets=32))
    for bad in (0, "x"):
        with pytest.raises(ValueError, match=r"takes an int from 1 to 65536"):
            aiospark.Journal(location, key="key", buckets=bad)


def test_a_key_recorded_in_one_micro_batch_is_not_called_in_a_later_one(spark, service, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    journal = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=4)

    def add_file(n: int, keys: range) -> None:
        spark.createDataFrame([(f"s{k:05d}",) for k in keys], "key STRING").coalesce(1) \
            .write.mode("overwrite").json(str(tmp_path / f"stage{n}"))
        (part,) = (tmp_path / f"stage{n}").glob("part-*.json")
        part.rename(source / f"{n}.json")

    stream = spark.readStream.schema("key STRING").option("maxFilesPerTrigger", 1).json(str(source))
    out = aiospark.unordered_wait(stream, KeyCall(service.url), KEY_SCHEMA, journal=journal)
    name = f"dedup_stream_{random.getrandbits(32):x}"
    query = out.writeStream.format("memory").queryName(name) \
        .option("checkpointLocation", str(tmp_path / "ckpt")).start()
    try:
        before = calls(service)
        add_file(1, range(0, 100))
        query.processAllAvailable()
        assert calls(service) - before == 100
        before = calls(service)
        add_file(2, range(50, 150))  # 50 keys recorded in micro-batch 1, 50 new
        query.processAllAvailable()
        assert calls(service) - before == 50
        deadline = time.monotonic() + 60
        while spark.table(name).count() < 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        rows = spark.table(name).collect()
        assert Counter(r.key for r in rows) == Counter([f"s{k:05d}" for k in (*range(100), *range(50, 150))])
        assert exact(rows)
    finally:
        query.stop()
