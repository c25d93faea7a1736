"""ordered_wait / unordered_wait on a real local Spark session."""
from __future__ import annotations

import asyncio
import os
import random
import re
import time
import uuid

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

import aiospark
from aiospark import AsyncFunction, RetryStrategy

# Functions run on Spark's Python workers; they are pickled by reference to this module.


async def square(row):
    await asyncio.sleep(random.random() * 0.005)
    return {"id": row["id"], "sq": row["id"] * row["id"]}


async def jittery_identity(row):
    await asyncio.sleep(random.random() * 0.01)
    return {"id": row["id"]}


async def evens_only(row):
    return {"id": row["id"]} if row["id"] % 2 == 0 else None


async def as_tuple(row):
    return (row["id"], str(row["id"]))


async def as_row(row):
    return Row(id=row["id"], s=str(row["id"]))


class Explode(AsyncFunction):
    """0 rows for multiples of 3, else `id % 3` rows."""

    async def async_invoke(self, row):
        await asyncio.sleep(0.001)
        return [{"id": row["id"], "k": k} for k in range(row["id"] % 3)]


async def fail_on_13(row):
    await asyncio.sleep(0.001)
    if row["id"] == 13:
        raise ValueError("thirteen is unlucky")
    return {"id": row["id"]}


async def slow_on_7(row):
    await asyncio.sleep(5 if row["id"] == 7 else 0.001)
    return {"id": row["id"], "v": "ok"}


class FallbackOnTimeout(AsyncFunction):
    async def async_invoke(self, row):
        await asyncio.sleep(5 if row["id"] == 7 else 0.001)
        return [{"id": row["id"], "v": "ok"}]

    def timeout(self, row):
        return [{"id": row["id"], "v": "fallback"}]


async def deaf_to_cancel_on_7(row):
    """Row 7 swallows its timeout's cancel and goes on for 30 s (a bare ``except:`` in a loop)."""
    if row["id"] == 7:
        loop = asyncio.get_running_loop()
        end = loop.time() + 30
        while loop.time() < end:
            try:
                await asyncio.sleep(0.05)
            except BaseException:  # the defect under test: the cancel is swallowed
                pass
    return {"id": row["id"], "v": "ok"}


_attempts: dict = {}


async def flaky_twice(row):
    key = (row["id"], row["run"])
    _attempts[key] = _attempts.get(key, 0) + 1
    if _attempts[key] <= 2:
        raise ConnectionError("transient")
    return {"id": row["id"], "attempts": _attempts[key]}


async def wrong_type(row):
    return {"id": "not-a-number" if row["id"] == 5 else row["id"]}


async def wrong_key(row):
    return {"idd": row["id"]}


class CountOpens(AsyncFunction):
    """Tags each row with the worker pid and the id of the instance that served it."""

    async def open(self):
        self.instance = uuid.uuid4().hex
        self.opens = getattr(self, "opens", 0) + 1

    async def async_invoke(self, row):
        return [{"id": row["id"], "pid": os.getpid(), "instance": self.instance, "opens": self.opens}]


def test_unordered_wait_maps_every_row(spark):
    df = spark.range(0, 2000, 1, 4)
    out = aiospark.unordered_wait(df, square, "id LONG, sq LONG", capacity=50)
    rows = out.collect()
    assert sorted((r.id, r.sq) for r in rows) == [(i, i * i) for i in range(2000)]


def test_ordered_wait_keeps_partition_order(spark):
    df = spark.range(0, 3000, 1, 3)
    expected = [[r.id for r in part] for part in df.rdd.glom().collect()]
    out = aiospark.ordered_wait(df, jittery_identity, "id LONG", capacity=64)
    got = [[r.id for r in part] for part in out.rdd.glom().collect()]
    assert got == expected


def test_unordered_wait_really_reorders(spark):
    # with jitter and 64 calls in flight, completion order differs from input order
    df = spark.range(0, 500, 1, 1)
    got = [r.id for r in aiospark.unordered_wait(df, jittery_identity, "id LONG", capacity=64).collect()]
    assert sorted(got) == list(range(500)) and got != list(range(500))


def test_transform_and_none_means_no_row(spark):
    df = spark.range(0, 100, 1, 2)
    out = df.transform(aiospark.unordered_wait, evens_only, "id LONG")
    assert sorted(r.id for r in out.collect()) == list(range(0, 100, 2))


@pytest.mark.parametrize("fn", [as_tuple, as_row])
def test_tuple_and_row_outputs(spark, fn):
    out = aiospark.ordered_wait(spark.range(0, 10, 1, 1), fn, "id LONG, s STRING")
    assert [(r.id, r.s) for r in out.collect()] == [(i, str(i)) for i in range(10)]


def test_async_function_emits_zero_to_n_rows(spark):
    out = aiospark.ordered_wait(spark.range(0, 30, 1, 2), Explode(), "id LONG, k INT")
    assert sorted((r.id, r.k) for r in out.collect()) == sorted((i, k) for i in range(30) for k in range(i % 3))


def test_struct_type_schema_and_input_columns_as_dict(spark):
    df = spark.createDataFrame([(1, "a"), (2, "b")], "n INT, s STRING")

    schema = StructType([StructField("n", LongType()), StructField("twice", LongType())])
    out = aiospark.ordered_wait(df, double_n, schema)
    assert [(r.n, r.twice) for r in out.collect()] == [(1, 2), (2, 4)]


async def double_n(row):
    assert set(row) == {"n", "s"}
    return {"n": row["n"], "twice": row["n"] * 2}


def test_failure_fails_the_task_and_names_the_row(spark):
    df = spark.range(0, 50, 1, 2)
    with pytest.raises(Exception) as info:
        aiospark.unordered_wait(df, fail_on_13, "id LONG").collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "{'id': 13}" in text and "thirteen is unlucky" in text


async def exit_on_13(row):
    await asyncio.sleep(0.001)
    if row["id"] == 13:
        raise SystemExit("the library gave up")
    return {"id": row["id"]}


def test_systemexit_in_a_call_fails_the_task_even_with_error_rows(spark):
    """A SystemExit asks the program to stop: no row's error. The task fails naming the row (not
    an error row), and no task hangs on the worker's loop, which the exit left."""
    with pytest.raises(Exception) as info:
        aiospark.unordered_wait(spark.range(0, 20, 1, 1), exit_on_13, "id LONG", on_error="row").collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "{'id': 13}" in text and "SystemExit('the library gave up')" in text


@pytest.mark.parametrize("ordered", [True, False])
def test_error_rows_keep_every_input(spark, ordered):
    df = spark.createDataFrame([(i, f"name{i}") for i in range(40)], "id LONG, name STRING").repartition(2)
    op = aiospark.ordered_wait if ordered else aiospark.unordered_wait
    out = op(df, fail_on_13, "id LONG", on_error="row").collect()
    assert len(out) == 40
    errors = [r for r in out if r._error is not None]
    assert len(errors) == 1
    assert errors[0].id is None and "ValueError: thirteen is unlucky" in errors[0]._error
    assert errors[0]._input.id == 13 and errors[0]._input.name == "name13"
    assert sorted(r.id for r in out if r._error is None) == [i for i in range(40) if i != 13]


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("str is broken")


async def unprintable_on_13(row):
    if row["id"] == 13:
        raise Unprintable()
    return {"id": row["id"]}


def test_an_error_that_cannot_be_printed_is_still_an_error_row(spark):
    out = aiospark.unordered_wait(spark.range(0, 20, 1, 1), unprintable_on_13, "id LONG", on_error="row").collect()
    bad = [r for r in out if r._error is not None]
    assert len(out) == 20 and [r._input.id for r in bad] == [13]
    assert bad[0]._error == "Unprintable: <unprintable Unprintable: its str() raised RuntimeError>"


def test_error_rows_custom_column_names(spark):
    out = aiospark.unordered_wait(spark.range(0, 20, 1, 1), fail_on_13, "id LONG", on_error="row",
                                  error_column="err", input_column="src")
    assert out.columns == ["id", "err", "src"]
    bad = out.where("err IS NOT NULL").collect()
    assert [r.src.id for r in bad] == [13]


def test_timeout_fails_with_async_timeout(spark):
    with pytest.raises(Exception) as info:
        aiospark.unordered_wait(spark.range(0, 20, 1, 1), slow_on_7, "id LONG, v STRING", timeout=0.3).collect()
    assert "AsyncTimeoutError" in str(info.value) and "{'id': 7}" in str(info.value)


def test_timeout_fallback_and_error_row(spark):
    out = aiospark.unordered_wait(spark.range(0, 20, 1, 1), FallbackOnTimeout(), "id LONG, v STRING", timeout=0.3)
    assert {(r.id, r.v) for r in out.collect()} == {(i, "fallback" if i == 7 else "ok") for i in range(20)}
    rows = aiospark.unordered_wait(spark.range(0, 20, 1, 1), slow_on_7, "id LONG, v STRING", timeout=0.3,
                                   on_error="row").collect()
    assert len(rows) == 20 and [r._input.id for r in rows if r._error] == [7]
    assert "AsyncTimeoutError" in [r._error for r in rows if r._error][0]


@pytest.mark.version_agnostic
def test_a_call_deaf_to_its_timeout_gets_its_error_row_after_the_grace(spark):
    t0 = time.monotonic()
    rows = aiospark.unordered_wait(spark.range(0, 20, 1, 1), deaf_to_cancel_on_7, "id LONG, v STRING",
                                   timeout=0.3, on_error="row").collect()
    # the workers' grace is the default 5 s: the task ends then (~5.5 s), not when the call gives up (30 s)
    assert time.monotonic() - t0 < 25
    assert len(rows) == 20 and [r._input.id for r in rows if r._error] == [7]
    assert "AsyncTimeoutError" in [r._error for r in rows if r._error][0]


def test_retries_until_success(spark):
    run = uuid.uuid4().hex
    df = spark.range(0, 30, 1, 2).selectExpr("id", f"'{run}' AS run")
    retry = RetryStrategy.fixed_delay(3, 0.01)
    out = aiospark.unordered_wait(df, flaky_twice, "id LONG, attempts INT", retry=retry).collect()
    assert sorted(r.id for r in out) == list(range(30)) and {r.attempts for r in out} == {3}


def test_retries_exhausted_fail(spark):
    run = uuid.uuid4().hex
    df = spark.range(0, 5, 1, 1).selectExpr("id", f"'{run}' AS run")
    with pytest.raises(Exception) as info:
        aiospark.unordered_wait(df, flaky_twice, "id LONG, attempts INT",
                                retry=RetryStrategy.fixed_delay(1, 0.01)).collect()
    assert "ConnectionError" in str(info.value)


def test_async_function_opened_once_per_worker(spark):
    fn = CountOpens()
    out = aiospark.unordered_wait(spark.range(0, 400, 1, 8), fn, "id LONG, pid INT, instance STRING, opens INT")
    rows = out.collect() + out.collect()  # two jobs, 16 tasks, same definition
    by_pid = {}
    for r in rows:
        by_pid.setdefault(r.pid, set()).add(r.instance)
    assert all(len(instances) == 1 for instances in by_pid.values()), by_pid
    assert {r.opens for r in rows} == {1}


def test_output_not_fitting_schema_names_column_and_value(spark):
    with pytest.raises(Exception) as info:
        aiospark.ordered_wait(spark.range(0, 10, 1, 1), wrong_type, "id LONG").collect()
    text = str(info.value)
    assert "OutputSchemaError" in text and "'id'" in text and "'not-a-number'" in text


def test_unknown_output_key_is_an_error(spark):
    with pytest.raises(Exception) as info:
        aiospark.ordered_wait(spark.range(0, 3, 1, 1), wrong_key, "id LONG").collect()
    assert "idd" in str(info.value) and "not columns of the schema" in str(info.value)


def test_limit_stops_early_without_hanging(spark):
    out = aiospark.unordered_wait(spark.range(0, 100000, 1, 2), jittery_identity, "id LONG", capacity=20)
    assert len(out.limit(5).collect()) == 5


class TestDefinitionTimeValidation:
    def test_capacity(self, spark):
        with pytest.raises(ValueError, match="capacity"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG, sq LONG", capacity=0)

    def test_not_async(self, spark):
        def blocking(row):
            return row

        with pytest.raises(TypeError, match="async def"):
            aiospark.ordered_wait(spark.range(3), blocking, "id LONG")

    def test_timeout(self, spark):
        with pytest.raises(TypeError, match="timeout"):
            aiospark.ordered_wait(spark.range(3), square, "id LONG, sq LONG", timeout="5s")

    def test_bad_gc_threshold_in_the_environment(self, spark, monkeypatch):
        monkeypatch.setenv("AIOSPARK_GC_THRESHOLD", "lots")
        with pytest.raises(ValueError, match="AIOSPARK_GC_THRESHOLD must be an int >= 0"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG, sq LONG")
        with pytest.raises(ValueError, match="AIOSPARK_GC_THRESHOLD"):
            aiospark.async_udf("long")(square)

    def test_schema_does_not_parse(self, spark):
        with pytest.raises(ValueError, match="does not parse"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG,, sq")

    def test_schema_wrong_kind(self, spark):
        with pytest.raises(TypeError, match="DDL string"):
            aiospark.unordered_wait(spark.range(3), square, 42)

    def test_on_error(self, spark):
        with pytest.raises(ValueError, match="on_error"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG, sq LONG", on_error="ignore")

    def test_error_column_clash(self, spark):
        with pytest.raises(ValueError, match="error_column"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG, _error STRING", on_error="row")

    def test_retry_type(self, spark):
        with pytest.raises(TypeError, match="RetryStrategy"):
            aiospark.unordered_wait(spark.range(3), square, "id LONG, sq LONG", retry=3)

    def test_not_a_dataframe(self):
        with pytest.raises(TypeError, match="DataFrame"):
            aiospark.unordered_wait([1, 2], square, "id LONG")

    @pytest.mark.parametrize("schema, repeated", [
        ("id LONG, sq LONG, id LONG", "['id']"),
        ("id LONG, tags ARRAY<STRUCT<k: STRING, k: STRING>>", "['tags.k']"),
        ("id LONG, m MAP<STRING, STRUCT<v: INT, w: INT, v: INT>>", "['m.v']"),
    ])
    def test_a_schema_that_repeats_a_name_at_any_depth(self, spark, schema, repeated):
        # a dict holds one value per name: Spark would otherwise fail in the JVM with Arrow's
        # "not all nodes, buffers and variadicBufferCounts were consumed"
        with pytest.raises(ValueError, match=re.escape(f"the schema repeats the name(s) {repeated}")):
            aiospark.unordered_wait(spark.range(3), square, schema)

    def test_names_differing_only_in_case_are_distinct_keys(self, spark):
        async def upper(row):
            return {"id": row["id"], "ID": -row["id"]}

        out = aiospark.ordered_wait(spark.range(2), upper, "id LONG, ID LONG").collect()
        assert [tuple(r) for r in out] == [(0, 0), (1, -1)]

    @pytest.mark.parametrize("lane", [{}, {"batch_size": 4, "batch_format": "pyarrow"}])
    def test_a_dataframe_that_repeats_a_column_name(self, spark, lane):
        # said in aiospark's words before Spark's own AMBIGUOUS_REFERENCE from mapInArrow
        df = spark.range(2).select("id", (F.col("id") + 10).alias("id"))
        with pytest.raises(ValueError, match=re.escape("the DataFrame repeats the name(s) ['id']")):
            aiospark.unordered_wait(df, square, "id LONG, sq LONG", **lane)
