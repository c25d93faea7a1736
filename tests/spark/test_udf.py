"""async_udf on a real local Spark session: columns, SQL, ordering, batches, errors."""
from __future__ import annotations

import asyncio
import random
import re

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

import aiospark


# Decorated at import time, before any session exists (the test session starts later).
@aiospark.async_udf("long", capacity=50)
async def plus_one(x):
    await asyncio.sleep(random.random() * 0.005)
    return x + 1


@aiospark.async_udf("string")
async def concat(a, b):
    await asyncio.sleep(0.001)
    return f"{a}-{b}"


_in_flight = 0


@aiospark.async_udf("int", capacity=200)
async def concurrency_seen(x):
    """Returns how many calls were in flight when this one started."""
    global _in_flight
    _in_flight += 1
    try:
        await asyncio.sleep(0.02)
        return _in_flight
    finally:
        _in_flight -= 1


@aiospark.async_udf("double", on_error="null")
async def inverse(x):
    await asyncio.sleep(0.001)
    return 1 / x


@aiospark.async_udf("double")
async def inverse_strict(x):
    return 1 / x


@aiospark.async_udf("int")
async def bad_value(x):
    return "seven"


@aiospark.async_udf("string")
async def maybe_null(x):
    return None if x % 2 else str(x)


def test_with_column_keeps_row_order(spark):
    df = spark.range(0, 3000, 1, 3)
    rows = df.withColumn("y", plus_one("id")).collect()
    assert [(r.id, r.y) for r in rows] == [(i, i + 1) for i in range(3000)]


def test_two_columns_and_column_objects(spark):
    df = spark.createDataFrame([(1, "a"), (2, "b")], "n INT, s STRING")
    assert [r.c for r in df.select(concat(F.col("n"), "s").alias("c")).collect()] == ["1-a", "2-b"]


def test_registered_for_sql(spark):
    spark.udf.register("plus_one", plus_one)
    spark.udf.register("concat2", concat)
    rows = spark.sql("SELECT id, plus_one(id) AS y, concat2(id, 'x') AS c FROM range(100)").collect()
    assert [(r.y, r.c) for r in rows] == [(i + 1, f"{i}-x") for i in range(100)]
    assert spark.sql("SELECT sum(plus_one(id)) AS s FROM range(100)").first().s == sum(range(1, 101))


def test_calls_stay_in_flight_across_arrow_batches(spark):
    # the shared session uses Arrow batches of 1000 rows; with batches of 50 and capacity 200, a
    # barrier per batch would never see more than 50 calls in flight
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        peak = spark.range(0, 2000, 1, 1).select(F.max(concurrency_seen("id")).alias("m")).first().m
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    assert peak > 100, peak


def test_nulls_pass_through(spark):
    rows = spark.range(0, 6, 1, 1).select(maybe_null("id").alias("v")).collect()
    assert [r.v for r in rows] == ["0", None, "2", None, "4", None]


def test_on_error_null(spark):
    rows = spark.range(0, 5, 1, 1).select(inverse("id").alias("v")).collect()
    assert rows[0].v is None and [r.v for r in rows[1:]] == [1.0, 0.5, 1 / 3, 0.25]


def test_failure_fails_the_task_naming_the_input(spark):
    with pytest.raises(Exception) as info:
        spark.range(0, 5, 1, 1).select(inverse_strict("id")).collect()
    assert "AsyncFunctionError" in str(info.value) and "ZeroDivisionError" in str(info.value)


def test_value_not_fitting_return_type(spark):
    with pytest.raises(Exception) as info:
        spark.range(0, 3, 1, 1).select(bad_value("id")).collect()
    assert "'seven'" in str(info.value) and "int" in str(info.value)


class TestValidation:
    def test_return_type_missing(self):
        with pytest.raises(TypeError, match="without arguments"):
            @aiospark.async_udf
            async def f(x):
                return x

    def test_not_async(self):
        with pytest.raises(TypeError, match="async def"):
            @aiospark.async_udf("int")
            def f(x):
                return x

    def test_bad_capacity_and_timeout(self):
        with pytest.raises(ValueError, match="capacity"):
            aiospark.async_udf("int", capacity=0)
        with pytest.raises(TypeError, match="timeout"):
            aiospark.async_udf("int", timeout=[1])

    def test_bad_on_error(self):
        with pytest.raises(ValueError, match="on_error"):
            aiospark.async_udf("int", on_error="row")

    def test_wrong_number_of_columns(self, spark):
        with pytest.raises(TypeError, match="takes 2 column"):
            concat("id")

    def test_return_type_that_does_not_parse(self, spark):
        @aiospark.async_udf("strin g")
        async def f(x):
            return x

        with pytest.raises(ValueError, match="does not parse"):
            spark.range(3).select(f("id"))

    def test_return_type_that_repeats_a_field_name(self, spark):
        @aiospark.async_udf("struct<a: int, b: array<struct<k: string, k: string>>, a: int>")
        async def f(x):
            return x

        with pytest.raises(ValueError, match=re.escape("repeats the name(s) ['b.k', 'a']")):
            spark.range(3).select(f("id"))
        with pytest.raises(ValueError, match=re.escape("repeats the name(s) ['a']")):  # a DataType: at once
            aiospark.async_udf(StructType([StructField("a", IntegerType()), StructField("a", IntegerType())]))

    def test_async_function_class_rejected_and_batching_it_refused(self):
        class Fn(aiospark.AsyncFunction):
            async def async_invoke(self, value):
                return [value]

        with pytest.raises(TypeError, match=r"pass an instance: Fn\(\)"):
            aiospark.async_udf("int")(Fn)
        with pytest.raises(ValueError, match="batch inside it"):
            aiospark.async_udf("int", batch_size=4)(Fn())
        assert isinstance(aiospark.async_udf("int")(Fn()), aiospark.AsyncUDF)  # an instance is a column function


@aiospark.async_udf("string")
async def describe_nested(s):
    await asyncio.sleep(0)
    return f"{s['n']}:{sorted(s['m'].items())}"  # a MAP inside a STRUCT is a dict, as in PySpark's UDFs


def test_a_map_nested_in_a_struct_argument_is_a_dict(spark):
    df = spark.sql("SELECT named_struct('n', 1, 'm', map('b', 2, 'a', 1)) AS s")
    assert df.select(describe_nested("s")).first()[0] == "1:[('a', 1), ('b', 2)]"
