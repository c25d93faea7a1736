"""Every aiospark entry point on a Spark Connect session (local Connect server, no SparkContext).

Run through tests/spark/test_isolated.py, or directly:
``AIOSPARK_ISOLATED=connect python -m pytest tests/isolated/connect -q -p no:cacheprovider``.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import uuid

import pytest
from pyspark import SparkContext
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

import aiospark
from aiospark import AsyncFunction

# Proof that the module-level async_udfs below are decorated before any session or JVM exists.
NO_SESSION_AT_IMPORT = SparkContext._active_spark_context is None

# Functions run on Spark's Python workers; they are pickled by reference to this module.


async def square(row):
    await asyncio.sleep(random.random() * 0.003)
    return {"id": row["id"], "sq": row["id"] * row["id"]}


async def jittery_identity(row):
    await asyncio.sleep(random.random() * 0.01)
    return {"id": row["id"]}


async def evens_only(row):
    return {"id": row["id"]} if row["id"] % 2 == 0 else None


async def as_tuple(row):
    return (row["id"], f"s{row['id']}")


async def as_row(row):
    return Row(id=row["id"], s=f"s{row['id']}")


class Explode(AsyncFunction):
    """No row for multiples of 3, else ``id % 3`` rows."""

    async def async_invoke(self, row):
        await asyncio.sleep(0.001)
        return [{"id": row["id"], "k": k} for k in range(row["id"] % 3)]


async def fail_on_13(row):
    await asyncio.sleep(0.001)
    if row["id"] == 13:
        raise ValueError("thirteen is unlucky")
    return {"id": row["id"]}


async def describe_row(row):
    return {"n": row["n"], "twice": row["n"] * 2, "keys": ",".join(sorted(row))}


_in_flight = {"now": 0}


async def count_in_flight(row):
    """Returns how many calls of this worker were in flight while it ran (itself included)."""
    _in_flight["now"] += 1
    try:
        await asyncio.sleep(0.3)  # long enough for the next Arrow batches to arrive
        return {"id": row["id"], "peak": _in_flight["now"]}
    finally:
        _in_flight["now"] -= 1


class CountOpens(AsyncFunction):
    """Tags each row with the worker pid and the instance (opened once per worker) that served it."""

    async def open(self):
        self.instance = uuid.uuid4().hex
        self.opens = getattr(self, "opens", 0) + 1

    async def async_invoke(self, row):
        return [{"id": row["id"], "pid": os.getpid(), "instance": self.instance, "opens": self.opens}]


async def enrich_key(row):
    await asyncio.sleep(random.random() * 0.004)
    return {"key": row["key"], "n": row["n"], "value": f"v-{row['key']}"}


# -- async UDFs, decorated at import time ----------------------------------------------------------


@aiospark.async_udf("string", capacity=32, timeout=10)
async def label(x):
    await asyncio.sleep(random.random() * 0.003)
    return f"item-{x}"


@aiospark.async_udf("long", capacity=32)
async def add(a, b):
    await asyncio.sleep(random.random() * 0.003)
    return a + b


@aiospark.async_udf("long", capacity=16, on_error="null")
async def fragile(x):
    await asyncio.sleep(0.001)
    if x % 4 == 0:
        raise RuntimeError(f"cannot handle {x}")
    return x * 10


@aiospark.async_udf("string", timeout=1.0, on_error="null")
async def slow_on_7(x):
    await asyncio.sleep(20 if x == 7 else 0.001)
    return "ok"


@aiospark.async_udf("long")
async def fail_udf_on_13(x):
    if x == 13:
        raise ValueError("thirteen is unlucky")
    return x


@aiospark.async_udf("struct<id: bigint, tag: string>", capacity=8)
async def tagged(x):
    await asyncio.sleep(0.001)
    return {"id": x, "tag": f"t{x}"}


@aiospark.async_udf("long", capacity=150, timeout=30)
async def udf_in_flight(x):
    _in_flight["now"] += 1
    try:
        await asyncio.sleep(0.3)  # long enough for the next Arrow batches to arrive
        return _in_flight["now"]
    finally:
        _in_flight["now"] -= 1


@aiospark.async_udf("string")
async def color_of(attrs):
    # a MAP<STRING, STRING> argument: its Python value is a dict, as in PySpark's own UDFs
    return attrs.get("color")


# -- the session ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark(connect_spark):
    return connect_spark


def test_session_is_spark_connect(spark):
    assert type(spark).__module__.startswith("pyspark.sql.connect")
    assert type(spark.range(1)).__module__.startswith("pyspark.sql.connect")
    with pytest.raises(Exception):
        spark.sparkContext  # Connect sessions have no SparkContext  # noqa: B018


def test_async_udfs_were_decorated_before_any_session():
    assert NO_SESSION_AT_IMPORT
    assert isinstance(label, aiospark.AsyncUDF)


# -- ordered_wait / unordered_wait --------------------------------------------------------------------


def test_unordered_wait_maps_every_row(spark):
    out = aiospark.unordered_wait(spark.range(0, 2000, 1, 4), square, "id LONG, sq LONG", capacity=50)
    assert sorted((r.id, r.sq) for r in out.collect()) == [(i, i * i) for i in range(2000)]


def test_unordered_wait_via_transform_reorders(spark):
    # with jitter and 64 calls in flight, completion order differs from input order
    out = spark.range(0, 500, 1, 1).transform(aiospark.unordered_wait, jittery_identity, "id LONG", capacity=64)
    got = [r.id for r in out.collect()]
    assert sorted(got) == list(range(500)) and got != list(range(500))


def test_ordered_wait_keeps_order_in_a_partition(spark):
    out = aiospark.ordered_wait(spark.range(0, 1000, 1, 1), jittery_identity, "id LONG", capacity=64)
    assert [r.id for r in out.collect()] == list(range(1000))


def test_none_means_no_row(spark):
    out = aiospark.unordered_wait(spark.range(0, 100, 1, 2), evens_only, "id LONG")
    assert sorted(r.id for r in out.collect()) == list(range(0, 100, 2))


@pytest.mark.parametrize("fn", [as_tuple, as_row])
def test_tuple_and_row_outputs(spark, fn):
    out = aiospark.ordered_wait(spark.range(0, 10, 1, 1), fn, "id LONG, s STRING")
    assert [(r.id, r.s) for r in out.collect()] == [(i, f"s{i}") for i in range(10)]


def test_struct_type_schema_and_input_row_as_dict(spark):
    df = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "n INT, s STRING")
    schema = StructType([StructField("n", LongType()), StructField("twice", LongType()),
                         StructField("keys", StringType())])
    out = aiospark.ordered_wait(df.coalesce(1), describe_row, schema)
    assert [(r.n, r.twice, r.keys) for r in out.collect()] == [(1, 2, "n,s"), (2, 4, "n,s"), (3, 6, "n,s")]


def test_async_function_emits_zero_to_n_rows(spark):
    out = aiospark.ordered_wait(spark.range(0, 60, 1, 2), Explode(), "id LONG, k INT")
    assert sorted((r.id, r.k) for r in out.collect()) == sorted((i, k) for i in range(60) for k in range(i % 3))


@pytest.mark.parametrize("op", [aiospark.ordered_wait, aiospark.unordered_wait], ids=["ordered", "unordered"])
def test_error_rows(spark, op):
    df = spark.createDataFrame([(i, f"name{i}") for i in range(40)], "id LONG, name STRING").repartition(2)
    out = op(df, fail_on_13, "id LONG", on_error="row").collect()
    assert len(out) == 40
    errors = [r for r in out if r._error is not None]
    assert len(errors) == 1
    assert errors[0].id is None and "ValueError: thirteen is unlucky" in errors[0]._error
    assert errors[0]._input.id == 13 and errors[0]._input.name == "name13"
    assert sorted(r.id for r in out if r._error is None) == [i for i in range(40) if i != 13]


def test_error_rows_custom_column_names(spark):
    out = aiospark.unordered_wait(spark.range(0, 20, 1, 1), fail_on_13, "id LONG", on_error="row",
                                  error_column="err", input_column="src")
    assert out.columns == ["id", "err", "src"]
    assert [r.src.id for r in out.where("err IS NOT NULL").collect()] == [13]


def test_failure_fails_the_job_and_names_the_row(spark):
    with pytest.raises(Exception) as info:
        aiospark.unordered_wait(spark.range(0, 50, 1, 2), fail_on_13, "id LONG").collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "{'id': 13}" in text and "thirteen is unlucky" in text


def test_ordered_wait_keeps_calls_in_flight_across_arrow_batches(spark):
    # batches of 100 rows (maxRecordsPerBatch), capacity 150: more than a batch in flight at once
    out = aiospark.ordered_wait(spark.range(0, 600, 1, 1), count_in_flight, "id LONG, peak LONG", capacity=150)
    rows = out.collect()
    assert [r.id for r in rows] == list(range(600))
    assert 100 < max(r.peak for r in rows) <= 150


def test_async_function_opened_once_per_worker(spark):
    fn = CountOpens()
    out = aiospark.unordered_wait(spark.range(0, 400, 1, 8), fn, "id LONG, pid INT, instance STRING, opens INT")
    rows = out.collect() + out.collect()  # two jobs, 16 tasks, one definition
    assert sorted(r.id for r in rows) == sorted(list(range(400)) * 2)
    by_pid = {}
    for r in rows:
        by_pid.setdefault(r.pid, set()).add(r.instance)
    assert all(len(instances) == 1 for instances in by_pid.values()), by_pid
    assert {r.opens for r in rows} == {1}


class TestDefinitionTimeValidation:
    """Raised on the driver when the operator is defined, before any job runs."""

    def test_bad_capacity(self, spark):
        with pytest.raises(ValueError, match="capacity"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG, sq LONG", capacity=0)

    def test_not_async(self, spark):
        def blocking(row):
            return row

        with pytest.raises(TypeError, match="async def"):
            aiospark.ordered_wait(spark.range(3), blocking, "id LONG")

    def test_schema_does_not_parse(self, spark):
        with pytest.raises(ValueError, match="does not parse"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG,, sq")

    def test_single_type_is_not_a_schema(self, spark):
        with pytest.raises(ValueError, match="single type"):
            aiospark.unordered_wait(spark.range(3), square, "bigint")

    def test_bad_on_error(self, spark):
        with pytest.raises(ValueError, match="on_error"):
            aiospark.ordered_wait(spark.range(3), square, "id LONG, sq LONG", on_error="ignore")

    def test_async_udf_arity(self, spark):
        with pytest.raises(TypeError, match="2 column"):
            spark.range(3).select(add("id"))


# -- async_udf ---------------------------------------------------------------------------------------


def test_async_udf_in_select(spark):
    rows = spark.range(0, 500, 1, 3).select("id", label("id").alias("name")).collect()
    assert sorted((r.id, r.name) for r in rows) == [(i, f"item-{i}") for i in range(500)]


def test_async_udf_keeps_input_order(spark):
    # one partition, many Arrow batches (maxRecordsPerBatch=100): output order is input order
    rows = spark.range(0, 1000, 1, 1).select("id", label("id").alias("name")).collect()
    assert [(r.id, r.name) for r in rows] == [(i, f"item-{i}") for i in range(1000)]


def test_async_udf_with_two_arguments_in_with_column(spark):
    df = spark.range(0, 300, 1, 2).withColumn("other", F.col("id") % 7)
    rows = df.withColumn("total", add(F.col("id"), F.col("other"))).collect()
    assert sorted((r.id, r.total) for r in rows) == [(i, i + i % 7) for i in range(300)]


def test_async_udf_register_for_sql(spark):
    spark.udf.register("aiospark_label", label)
    rows = spark.sql("SELECT id, aiospark_label(id) AS name FROM range(10)").collect()
    assert sorted((r.id, r.name) for r in rows) == [(i, f"item-{i}") for i in range(10)]


def test_async_udf_register_two_arguments_for_sql(spark):
    spark.udf.register("aiospark_add", add)
    rows = spark.sql("SELECT id, aiospark_add(id, id * 100) AS total FROM range(0, 50, 1, 2)").collect()
    assert sorted((r.id, r.total) for r in rows) == [(i, 101 * i) for i in range(50)]


def test_async_udf_on_error_null(spark):
    rows = spark.range(0, 40, 1, 2).select("id", fragile("id").alias("v")).collect()
    assert sorted((r.id, r.v) for r in rows) == [(i, None if i % 4 == 0 else i * 10) for i in range(40)]


def test_async_udf_timeout_becomes_null(spark):
    rows = spark.range(0, 12, 1, 1).select("id", slow_on_7("id").alias("v")).collect()
    assert [(r.id, r.v) for r in rows] == [(i, None if i == 7 else "ok") for i in range(12)]


def test_async_udf_failure_names_the_row(spark):
    with pytest.raises(Exception) as info:
        spark.range(0, 30, 1, 2).select(fail_udf_on_13("id")).collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "13" in text and "thirteen is unlucky" in text


def test_async_udf_struct_return_type(spark):
    rows = spark.range(0, 20, 1, 2).select("id", tagged("id").alias("t")).collect()
    assert sorted((r.id, r.t.id, r.t.tag) for r in rows) == [(i, i, f"t{i}") for i in range(20)]


def test_async_udf_non_deterministic_copy(spark):
    nd = label.asNondeterministic()
    assert nd.deterministic is False and label.deterministic is True
    rows = spark.range(0, 20, 1, 1).select("id", nd("id").alias("name")).collect()
    assert [(r.id, r.name) for r in rows] == [(i, f"item-{i}") for i in range(20)]


def test_async_udf_keeps_calls_in_flight_across_arrow_batches(spark):
    rows = spark.range(0, 600, 1, 1).select("id", udf_in_flight("id").alias("peak")).collect()
    assert [r.id for r in rows] == list(range(600))
    assert 100 < max(r.peak for r in rows) <= 150


def test_async_udf_map_argument_is_a_dict(spark):
    df = spark.sql("SELECT id, map('color', concat('c', id), 'size', 'L') AS attrs FROM range(0, 10, 1, 2)")
    rows = df.select("id", color_of("attrs").alias("color")).collect()
    assert sorted((r.id, r.color) for r in rows) == [(i, f"c{i}") for i in range(10)]


# -- Structured Streaming on Connect -----------------------------------------------------------------


def _write_json(path, keys):
    tmp = path.with_name("." + path.name)  # the file source skips dot-files: never a half-written read
    tmp.write_text("".join(json.dumps({"key": k, "n": int(k[1:])}) + "\n" for k in keys))
    tmp.rename(path)


def _run_available_now(df, sink, checkpoint):
    query = (df.writeStream.format("parquet").option("path", str(sink))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(90), "the streaming query did not finish within 90 s"
        assert query.exception() is None, query.exception()
    finally:
        if query.isActive:
            query.stop()


@pytest.mark.timeout(240)
def test_streaming_unordered_wait_and_async_udf_exactly_once(spark, tmp_path):
    source, sink, checkpoint = tmp_path / "in", tmp_path / "sink", tmp_path / "checkpoint"
    source.mkdir()
    first = [f"k{i:04d}" for i in range(150)]
    _write_json(source / "a.json", first[:80])
    _write_json(source / "b.json", first[80:])

    def query():
        stream = spark.readStream.schema("key STRING, n LONG").option("maxFilesPerTrigger", 1).json(str(source))
        out = aiospark.unordered_wait(stream, enrich_key, "key STRING, n LONG, value STRING", capacity=16)
        return out.withColumn("name", label("n"))

    def check(keys):
        rows = spark.read.parquet(str(sink)).collect()
        assert sorted(r.key for r in rows) == sorted(keys)  # each key exactly once
        assert all(r.value == f"v-{r.key}" and r.name == f"item-{r.n}" for r in rows)

    _run_available_now(query(), sink, checkpoint)
    check(first)
    second = [f"k{i:04d}" for i in range(150, 230)]
    _write_json(source / "c.json", second)
    _run_available_now(query(), sink, checkpoint)  # restart from the checkpoint: only the new file
    check(first + second)


# -- batches and key order --------------------------------------------------------------------------


async def squares_batch(rows):
    await asyncio.sleep(0.002)
    if any(r["id"] == 77 for r in rows):
        raise ValueError("77 is refused")
    return [{"id": r["id"], "sq": r["id"] * r["id"]} for r in rows]


@aiospark.async_udf("long", batch_size=16, capacity=64, on_error="null")
async def squares_udf(ids):
    if 77 in ids:
        raise ValueError("77 is refused")
    return [i * i for i in ids]


async def keyed_echo(row):
    await asyncio.sleep(random.random() * 0.004)
    return {"k": row["k"], "seq": row["seq"]}


def test_batches_split_to_one_error_row(spark):
    out = aiospark.ordered_wait(spark.range(0, 300, 1, 2), squares_batch, "id LONG, sq LONG", capacity=64,
                                batch_size=32, on_error="row").collect()
    assert [r._input.id for r in out if r._error is not None] == [77]
    assert sorted(r.id for r in out if r._error is None) == [i for i in range(300) if i != 77]


async def squares_arrow(batch):
    import pyarrow as pa
    import pyarrow.compute as pc

    if 77 in batch.column("id").to_pylist():
        raise ValueError("77 is refused")
    return pa.record_batch({"id": batch.column("id"), "sq": pc.multiply(batch.column("id"), batch.column("id"))})


def test_columnar_batches_fail_as_a_whole_into_error_rows(spark):
    out = aiospark.ordered_wait(spark.range(0, 300, 1, 2), squares_arrow, "id LONG, sq LONG", capacity=64,
                                batch_size=32, batch_format="pyarrow", on_error="row").collect()
    # partition 0 holds 0..149: its slice of 32 rows holding 77 is 64..95
    assert [r._input.id for r in out if r._error is not None] == list(range(64, 96))
    assert [(r.id, r.sq) for r in out if r._error is None] == [(i, i * i) for i in range(300) if not 64 <= i < 96]


def test_async_udf_batches_with_null_on_error(spark):
    rows = spark.range(0, 200, 1, 2).select("id", squares_udf("id").alias("sq")).collect()
    assert {r.id: r.sq for r in rows} == {i: (None if i == 77 else i * i) for i in range(200)}


def test_key_order_per_key(spark):
    df = spark.range(0, 600, 1, 1).selectExpr("id % 7 AS k", "id AS seq")
    got = [(r.k, r.seq) for r in aiospark.unordered_wait(df, keyed_echo, "k LONG, seq LONG", capacity=50,
                                                           key="k").collect()]
    assert sorted(s for _, s in got) == list(range(600))
    for k in range(7):
        seqs = [s for key, s in got if key == k]
        assert seqs == sorted(seqs)


async def weighed(row):
    return {"id": row["id"]}


def test_cost_weighted_rate_limit(spark):
    # 40 rows costing 5 units each against 100 units/s with a burst of 10: at least 1.9 s of waiting
    import time

    df = spark.range(0, 40, 1, 1).selectExpr("id", "5 AS w")
    limit = aiospark.RateLimit(100, burst=10, cost=lambda row: row["w"])
    metrics = aiospark.Metrics("weighed")
    began = time.monotonic()
    rows = aiospark.unordered_wait(df, weighed, "id LONG", rate_limit=limit, capacity=40, metrics=metrics).collect()
    assert sorted(r.id for r in rows) == list(range(40))
    assert time.monotonic() - began >= 1.9 * 0.95
    assert metrics.total.rate_limited >= 30


def test_adaptive_capacity(spark):
    metrics = aiospark.Metrics("adaptive")
    out = aiospark.unordered_wait(spark.range(0, 600, 1, 2), square, "id LONG, sq LONG",
                                  capacity=aiospark.AdaptiveConcurrency(max_limit=40), metrics=metrics)
    assert sorted(r.id for r in out.collect()) == list(range(600))
    assert metrics.total.inflight_peak >= 1 and metrics.total.inflight_peak <= 40


# -- the OpenAI-compatible connector ----------------------------------------------------------------


def test_openai_embeddings_and_chat(spark):
    from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings, default_retry
    from tests.support.openai_server import OpenAIServer, answer, tokens, vector

    key = "sk-connect-S3cret-abcdef"
    with OpenAIServer(api_key=key) as srv:
        df = spark.createDataFrame([(i, f"connect {i}") for i in range(40)], "id LONG, text STRING")
        embed = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=key, batch_size=8)
        out = aiospark.ordered_wait(df, embed, embed.output_schema(df), capacity=32, retry=default_retry())
        rows = out.collect()
        assert sorted(r.id for r in rows) == list(range(40))
        assert all(list(r.embedding) == vector(r.text) for r in rows)
        assert max(srv.batch_sizes) <= 8
        assert out.aiospark_metrics.total.usage.get("prompt_tokens") == 40 * tokens("connect 0")

        chat = OpenAIChat("chat", base_url=srv.base_url, api_key=key)
        answers = aiospark.unordered_wait(df.withColumnRenamed("text", "prompt"), chat,
                                          "id LONG, prompt STRING, answer STRING", capacity=16).collect()
        assert {r.id: r.answer for r in answers} == {i: answer(f"connect {i}") for i in range(40)}
