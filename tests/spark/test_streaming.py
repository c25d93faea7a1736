"""ordered_wait / unordered_wait / async_udf inside Structured Streaming queries (classic session).

A file source (JSON files in a temp dir) feeds a query that enriches every row with an async call and
writes to a Parquet file sink with a checkpoint, triggered with ``availableNow``. The sink is read
back with ``spark.read`` (which honours the sink's ``_spark_metadata`` log, so only committed files
count) and every key must be there exactly once. Then more files arrive and the query restarts from
the same checkpoint: only the new keys are processed, nothing is duplicated.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import uuid
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import aiospark
from aiospark import AsyncFunction

INPUT_SCHEMA = "key STRING, n LONG"
QUERY_TIMEOUT = 120  # seconds for one availableNow run (generous: the machine may be busy)

# Functions run on Spark's Python workers; they are pickled by reference to this module.


def value_of(key: str) -> str:
    return f"enriched-{key}"


async def enrich(row):
    await asyncio.sleep(0.002 + random.random() * 0.004)
    return {"key": row["key"], "n": row["n"], "value": value_of(row["key"])}


async def jittery_enrich(row):
    await asyncio.sleep(random.random() * 0.01)  # completion order differs from input order
    return {"key": row["key"], "n": row["n"], "value": value_of(row["key"])}


async def fail_every_fifth(row):
    await asyncio.sleep(0.002 + random.random() * 0.003)
    if row["n"] % 5 == 0:
        raise ValueError(f"no value for {row['key']}")
    return {"key": row["key"], "value": value_of(row["key"])}


class CountOpens(AsyncFunction):
    """Tags each row with the worker pid and the instance (opened once per worker) that served it."""

    async def open(self):
        self.instance = uuid.uuid4().hex
        self.opens = getattr(self, "opens", 0) + 1

    async def async_invoke(self, row):
        await asyncio.sleep(0.001)
        return [{"key": row["key"], "pid": os.getpid(), "instance": self.instance, "opens": self.opens}]


@aiospark.async_udf("string", capacity=16, timeout=10, on_error="null")
async def fragile_udf(n):
    await asyncio.sleep(0.002)
    if n % 4 == 0:
        raise RuntimeError(f"cannot enrich {n}")
    return f"ok-{n}"


async def color_of(row):
    # a MAP<STRING, STRING> column: its Python value is a dict, as everywhere in PySpark
    await asyncio.sleep(0.002)
    return {"key": row["key"], "color": row["attrs"]["color"], "attrs_type": type(row["attrs"]).__name__}


@aiospark.async_udf("string", capacity=32, timeout=10)
async def enrich_udf(key):
    await asyncio.sleep(0.002 + random.random() * 0.004)
    return value_of(key)


# -- helpers (driver side) -------------------------------------------------------------------------


def write_batch(input_dir: Path, file_no: int, start: int, count: int, files: int = 2) -> list[str]:
    """Write ``count`` rows with keys ``k<start>..`` into ``files`` JSON files; return the keys."""
    keys = [f"k{i:05d}" for i in range(start, start + count)]
    per_file = -(-count // files)
    for f in range(files):
        chunk = range(start + f * per_file, min(start + (f + 1) * per_file, start + count))
        if not len(chunk):
            continue
        path = input_dir / f"part-{file_no:03d}-{f}.json"
        tmp = input_dir / f".tmp-{file_no:03d}-{f}"  # the file source skips dot-files: no half-written reads
        tmp.write_text("".join(json.dumps({"key": f"k{i:05d}", "n": i}) + "\n" for i in chunk))
        tmp.rename(path)
    return keys


def run_available_now(spark, out_df, sink: Path, checkpoint: Path, name: str) -> None:
    query = (out_df.writeStream.format("parquet")
             .option("path", str(sink))
             .option("checkpointLocation", str(checkpoint))
             .queryName(name)
             .trigger(availableNow=True)
             .start())
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT)
        assert finished, f"streaming query {name} did not finish within {QUERY_TIMEOUT}s"
        assert query.exception() is None, f"streaming query {name} failed: {query.exception()}"
    finally:
        if query.isActive:
            query.stop()


def stream_of(spark, input_dir: Path, files_per_batch: int = 2):
    # a few files per micro-batch: several batches per availableNow run
    return spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", files_per_batch).json(str(input_dir))


def key_counts(rows) -> dict[str, int]:
    return dict(Counter(r.key for r in rows))


@pytest.fixture
def dirs(tmp_path):
    paths = {name: tmp_path / name for name in ("input", "sink", "checkpoint")}
    paths["input"].mkdir()
    return paths


def _check_enriched(spark, sink: Path, expected_keys: list[str]) -> None:
    rows = spark.read.parquet(str(sink)).collect()
    counts = key_counts(rows)
    dupes = {k: c for k, c in counts.items() if c != 1}
    assert not dupes, f"keys not written exactly once: {dict(list(dupes.items())[:10])}"
    assert sorted(counts) == sorted(expected_keys)
    wrong = [r for r in rows if r.value != value_of(r.key) or r.n != int(r.key[1:])]
    assert not wrong, f"rows with a wrong enrichment: {wrong[:5]}"


# -- tests -------------------------------------------------------------------------------------------


def _restart_roundtrip(spark, dirs, make_out, name: str) -> None:
    first = write_batch(dirs["input"], 0, 0, 120) + write_batch(dirs["input"], 1, 120, 80)
    run_available_now(spark, make_out(stream_of(spark, dirs["input"])), dirs["sink"], dirs["checkpoint"],
                      f"{name}_1")
    _check_enriched(spark, dirs["sink"], first)

    second = write_batch(dirs["input"], 2, 200, 90, files=3)
    run_available_now(spark, make_out(stream_of(spark, dirs["input"])), dirs["sink"], dirs["checkpoint"],
                      f"{name}_2")
    _check_enriched(spark, dirs["sink"], first + second)


@pytest.mark.timeout(300)
def test_streaming_unordered_wait_exactly_once_across_restart(spark, dirs):
    _restart_roundtrip(
        spark, dirs,
        lambda df: aiospark.unordered_wait(df, enrich, "key STRING, n LONG, value STRING", capacity=16, timeout=10),
        "aiospark_unordered")


@pytest.mark.timeout(300)
def test_streaming_ordered_wait_exactly_once_across_restart(spark, dirs):
    _restart_roundtrip(
        spark, dirs,
        lambda df: aiospark.ordered_wait(df, enrich, "key STRING, n LONG, value STRING", capacity=16, timeout=10),
        "aiospark_ordered")


@pytest.mark.timeout(200)
def test_streaming_ordered_wait_keeps_partition_order(spark, dirs):
    # each input file is one micro-batch of one partition, its rows in ascending n; the sink writes
    # one Parquet file per partition in the order the rows leave the async map, so every sink file
    # must hold ascending n. The jitter makes calls complete out of order: only ordering fixes that.
    keys = write_batch(dirs["input"], 0, 0, 300, files=3)
    out = aiospark.ordered_wait(stream_of(spark, dirs["input"], files_per_batch=1), jittery_enrich, "key STRING, n LONG, value STRING",
                                capacity=64, timeout=10)
    run_available_now(spark, out, dirs["sink"], dirs["checkpoint"], "aiospark_order")
    _check_enriched(spark, dirs["sink"], keys)
    files = sorted(dirs["sink"].glob("part-*.parquet"))
    assert len(files) >= 3
    for path in files:
        ns = pq.read_table(path).column("n").to_pylist()
        assert ns == sorted(ns), f"{path.name} is out of input order: {ns[:20]}..."


@pytest.mark.timeout(300)
def test_streaming_async_udf_column_exactly_once_across_restart(spark, dirs):
    _restart_roundtrip(spark, dirs, lambda df: df.withColumn("value", enrich_udf("key")), "aiospark_udf")


@pytest.mark.timeout(200)
def test_streaming_error_rows_one_per_failed_key(spark, dirs):
    keys = write_batch(dirs["input"], 0, 0, 100) + write_batch(dirs["input"], 1, 100, 50)
    out = aiospark.unordered_wait(stream_of(spark, dirs["input"]), fail_every_fifth, "key STRING, value STRING",
                                  capacity=16, timeout=10, on_error="row")
    run_available_now(spark, out, dirs["sink"], dirs["checkpoint"], "aiospark_errors")

    rows = spark.read.parquet(str(dirs["sink"])).collect()
    failed = sorted(k for k in keys if int(k[1:]) % 5 == 0)
    ok = sorted(k for k in keys if int(k[1:]) % 5 != 0)

    error_rows = [r for r in rows if r._error is not None]
    good_rows = [r for r in rows if r._error is None]
    assert len(rows) == len(keys)
    # one error row per failed key, naming its input and carrying the error text
    assert sorted(r._input.key for r in error_rows) == failed
    for r in error_rows:
        assert r.key is None and r.value is None
        assert r._input.n == int(r._input.key[1:])
        assert "ValueError" in r._error and f"no value for {r._input.key}" in r._error
    # and every other key enriched exactly once, with no error columns
    assert sorted(r.key for r in good_rows) == ok
    assert all(r.value == value_of(r.key) and r._input is None for r in good_rows)


@pytest.mark.timeout(200)
def test_streaming_map_column_reaches_the_function_as_a_dict(spark, dirs):
    # JSON events with a nested object read as MAP<STRING, STRING>: the row dict the function gets holds a
    # dict for it (column name -> Python value, SPEC section 2), so row["attrs"]["color"] works
    lines = [json.dumps({"key": f"k{i:05d}", "n": i, "attrs": {"color": f"c{i % 3}", "size": "L"}}) for i in range(40)]
    (dirs["input"] / ".tmp").write_text("\n".join(lines) + "\n")
    (dirs["input"] / ".tmp").rename(dirs["input"] / "events.json")
    stream = spark.readStream.schema("key STRING, n LONG, attrs MAP<STRING, STRING>").json(str(dirs["input"]))
    out = aiospark.unordered_wait(stream, color_of, "key STRING, color STRING, attrs_type STRING", timeout=10)
    run_available_now(spark, out, dirs["sink"], dirs["checkpoint"], "aiospark_map")
    rows = spark.read.parquet(str(dirs["sink"])).collect()
    assert sorted((r.key, r.color, r.attrs_type) for r in rows) == [(f"k{i:05d}", f"c{i % 3}", "dict") for i in range(40)]


@pytest.mark.timeout(200)
def test_streaming_async_function_opened_once_per_worker_across_micro_batches(spark, dirs):
    keys = write_batch(dirs["input"], 0, 0, 90, files=3)  # three files: three micro-batches
    out = aiospark.unordered_wait(stream_of(spark, dirs["input"], files_per_batch=1), CountOpens(),
                                  "key STRING, pid INT, instance STRING, opens INT", timeout=10)
    run_available_now(spark, out, dirs["sink"], dirs["checkpoint"], "aiospark_opens")
    rows = spark.read.parquet(str(dirs["sink"])).collect()
    assert sorted(r.key for r in rows) == keys
    instances = {}
    for r in rows:
        instances.setdefault(r.pid, set()).add(r.instance)
    assert all(len(v) == 1 for v in instances.values()), instances
    assert {r.opens for r in rows} == {1}


@pytest.mark.timeout(200)
def test_streaming_async_udf_on_error_null(spark, dirs):
    write_batch(dirs["input"], 0, 0, 60, files=2)
    out = stream_of(spark, dirs["input"]).withColumn("v", fragile_udf("n"))
    run_available_now(spark, out, dirs["sink"], dirs["checkpoint"], "aiospark_udf_null")
    rows = spark.read.parquet(str(dirs["sink"])).collect()
    assert sorted((r.n, r.v) for r in rows) == [(i, None if i % 4 == 0 else f"ok-{i}") for i in range(60)]
