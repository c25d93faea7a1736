"""Values are exact at every depth, in every lane (issue 44): the rows lane of the wait functions,
``async_udf`` (Arrow iterator UDF on PySpark >= 4.1, pandas iterator UDF before) and the columnar
lane (``batch_format="pyarrow"``). A value Arrow (or Spark) would change without a word is an
error naming the row and the field path, so ``on_error="row"``/``"null"`` handle it; the table
of docs/design.md ("Value conversions") lists each case and its test here."""
from __future__ import annotations

import datetime
import math

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, IntegerType, LongType, MapType, StringType, StructField, StructType

import aiospark
from aiospark.spark.udf import ARROW_ITER

N = 8
BAD = 5  # the input whose output does not fit
UTC = datetime.timezone.utc
NS = pd.Timestamp("2020-01-01 00:00:00.123456789", tz="UTC")  # Spark keeps microseconds
US = pd.Timestamp("2020-01-01 00:00:00.123456", tz="UTC")  # no nanoseconds: fits


def ids(spark, n=N, partitions=2):
    return spark.range(0, n, 1, partitions)


def failure(action) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


# -- the rows lane (unordered_wait / ordered_wait): every depth ---------------------------------------------


def rows_fn(bad, good):
    async def fn(row):
        i = row["id"]
        return {"id": i, "v": bad if i == BAD else good}
    fn.__name__ = fn.__qualname__ = "shaky"
    return fn


ROWS_CASES = [
    # (schema of v, a good value, the bad one, what the error says)
    ("ARRAY<STRING>", ["x"], "tag", "a str is not an array"),
    ("STRUCT<tags: ARRAY<STRING>>", {"tags": ["x"]}, {"tags": "tag"}, "at v.tags (row"),
    ("DATE", datetime.date(2020, 1, 1), datetime.datetime(2020, 1, 1, 12, 30), "a datetime is not a date"),
    ("ARRAY<DATE>", [datetime.date(2020, 1, 1)], [datetime.date(2020, 1, 1), datetime.datetime(2020, 1, 1, 12)],
     "at v[1] (row"),
    ("FLOAT", 1.5, 1e300, "beyond FLOAT's range"),
    ("STRUCT<items: ARRAY<STRUCT<b: FLOAT>>>", {"items": [{"b": 1.0}]},
     {"items": [{"b": 1.0}, {"b": 2.0}, {"b": -1e39}]}, "at v.items[2].b (row"),
    ("STRUCT<a: INT, b: INT>", {"a": 1, "b": 2}, {"a": 1, "bb": 2}, "key(s) 'bb' are not fields"),
    ("ARRAY<STRUCT<a: INT>>", [{"a": 1}], [{"a": 1}, {"a": 1, "zzz": 2}], "at v[1] (row"),
    ("STRUCT<a: INT NOT NULL>", {"a": 1}, {"a": None}, "at v.a (row"),
    ("STRUCT<a: INT NOT NULL>", {"a": 1}, {}, "the field is NOT NULL"),
    (ArrayType(IntegerType(), containsNull=False), [1], [1, None], "at v[1] (row"),
    (MapType(StringType(), IntegerType(), valueContainsNull=False), {"k": 1}, {"k": None},
     "the map's values are NOT NULL"),
    # each below was written changed before (nanoseconds cut, a map with a key twice, True as 1.0,
    # bytes decoded, a str encoded) or failed the job (pd.NaT: a ValueError in the checks)
    ("TIMESTAMP", US, NS, "nanoseconds"),
    ("ARRAY<STRUCT<t: TIMESTAMP_NTZ>>", [{"t": pd.Timestamp("2020-01-01 00:00:01")}],
     [{"t": pd.Timestamp("2020-01-01 00:00:00.000000500")}], "at v[0].t (row"),
    ("MAP<STRING, INT>", [("a", 1), ("b", 2)], [("a", 1), ("a", 2)], "given twice"),
    ("STRUCT<m: MAP<STRING, INT>>", {"m": [("a", 1)]}, {"m": [("a", 1), ("a", 2)]}, "at v.m (row"),
    ("TIMESTAMP", datetime.datetime(2020, 1, 1, tzinfo=UTC), pd.NaT, "pd.NaT is no time"),
    ("ARRAY<TIMESTAMP>", [datetime.datetime(2020, 1, 1, tzinfo=UTC)], [pd.NaT], "at v[0] (row"),
    ("DOUBLE", 1.0, True, "a bool is not a number"),
    ("ARRAY<FLOAT>", [1.0], [1.0, True], "at v[1] (row"),
    ("STRING", "abc", b"abc", "bytes are not a string"),
    ("STRUCT<s: STRING>", {"s": "abc"}, {"s": bytearray(b"abc")}, "at v.s (row"),
    ("BINARY", b"text", "text", "a str is not bytes"),
]


def with_v(ddl):
    """The schema ``id LONG, v <ddl>`` (a DataType where DDL cannot say NOT NULL)."""
    if isinstance(ddl, str):
        return f"id LONG, v {ddl}"
    return StructType([StructField("id", LongType()), StructField("v", ddl)])


@pytest.mark.parametrize("ddl, good, bad, says", ROWS_CASES, ids=[f"{c[0]}:{c[2]!r}"[:60] for c in ROWS_CASES])
def test_rows_lane_refuses_what_arrow_would_change_at_any_depth(spark, ddl, good, bad, says):
    """Each was written as changed (or failed in the JVM, naming no row) before issue 44."""
    fn = rows_fn(bad, good)
    schema = with_v(ddl)
    text = failure(lambda: aiospark.unordered_wait(ids(spark), fn, schema).collect())
    assert "OutputSchemaError" in text and says in text and "shaky" in text
    assert "IllegalStateException" not in text and "Value at index is null" not in text
    rows = aiospark.ordered_wait(ids(spark), fn, schema, on_error="row").collect()
    assert [r._input.id for r in rows if r._error is not None] == [BAD]
    assert says in [r._error for r in rows if r._error is not None][0]
    assert sorted(r.id for r in rows if r._error is None) == [i for i in range(N) if i != BAD]


def test_rows_lane_keeps_what_fits_exactly(spark):
    """The boundaries: the largest FLOAT, an infinity the function returns itself, NaN, a midnight
    date, a tuple for a struct, a missing nullable nested field (NULL) all pass as they are."""
    async def fn(row):
        return {"f": [3.4028234663852886e38, -math.inf, math.nan], "d": datetime.date(2020, 1, 1),
                "s": (1, [{"a": 2}]), "t": {"b": 3}}

    rows = aiospark.ordered_wait(ids(spark, 2, 1), fn, "f ARRAY<FLOAT>, d DATE, s STRUCT<x: INT, ys: ARRAY<STRUCT<a: "
                                 "INT>>>, t STRUCT<a: INT, b: INT>").collect()
    f = rows[0].f
    assert f[0] == 3.4028234663852886e38 and f[1] == -math.inf and math.isnan(f[2])
    assert rows[0].d == datetime.date(2020, 1, 1) and rows[0].s.ys[0].a == 2
    assert rows[0].t.asDict() == {"a": None, "b": 3}


# -- async_udf --------------------------------------------------------------------------------------------


def udf_of(ddl, bad, good, on_error="fail"):
    @aiospark.async_udf(ddl, on_error=on_error)
    async def answer(i):
        return bad if i == BAD else good
    return answer


UDF_CASES = [
    ("ARRAY<STRING>", "tag", ["x"], "a str is not an array"),
    ("DATE", datetime.datetime(2020, 1, 1, 12, 30), datetime.date(2020, 1, 1), "a datetime is not a date"),
    ("FLOAT", 1e300, 1.5, "beyond FLOAT's range"),
    ("ARRAY<FLOAT>", [1.0, 1e300], [1.0], "at value[1] (row"),
    ("STRUCT<a: INT, b: INT>", {"a": 1, "bb": 2}, {"a": 1, "b": 2}, "key(s) 'bb' are not fields"),
    ("STRUCT<a: INT>", {"a": 1, "zzz": 2}, {"a": 1}, "key(s) 'zzz' are not fields"),
    ("ARRAY<STRUCT<items: ARRAY<STRUCT<b: INT>>>>", [{"items": [{"b": 1}, {"b": 2}, {"c": 3}]}],
     [{"items": [{"b": 1}]}], "at value[0].items[2] (row"),
    ("TIMESTAMP", NS, US, "nanoseconds"),
    ("ARRAY<TIMESTAMP>", [US, NS], [US], "at value[1] (row"),
    ("MAP<STRING, INT>", [("a", 1), ("a", 2)], [("a", 1), ("b", 2)], "given twice"),
    ("ARRAY<MAP<STRING, INT>>", [{"a": 1}, [("a", 1), ("a", 2)]], [{"a": 1}], "at value[1] (row"),
    ("TIMESTAMP", pd.NaT, US, "pd.NaT is no time"),
    ("DOUBLE", True, 1.0, "a bool is not a number"),
    ("FLOAT", False, 1.0, "a bool is not a number"),
    ("STRING", b"abc", "abc", "bytes are not a string"),
    ("BINARY", "text", b"text", "a str is not bytes"),
]


@pytest.mark.parametrize("ddl, bad, good, says", UDF_CASES, ids=[f"{c[0]}:{c[1]!r}"[:60] for c in UDF_CASES])
def test_async_udf_refuses_what_arrow_would_change_naming_the_input(spark, ddl, bad, good, says):
    text = failure(lambda: ids(spark).select(udf_of(ddl, bad, good)("id")).collect())
    assert "OutputSchemaError" in text and says in text and "answer" in text
    assert f"for the input {BAD}" in text  # the row: its argument
    if ARROW_ITER is None and ddl.startswith("STRUCT"):
        return  # on_error="null" with a STRUCT needs PySpark >= 4.1 (refused at definition)
    rows = ids(spark).select("id", udf_of(ddl, bad, good, "null")("id").alias("v")).collect()
    assert [r.id for r in rows if r.v is None] == [BAD]  # only that row is NULL, the others kept


@pytest.mark.skipif(ARROW_ITER is None, reason="pandas UDFs declare nested fields nullable")
def test_async_udf_refuses_null_in_a_not_null_nested_field(spark):
    ddl = StructType([StructField("xs", ArrayType(IntegerType(), containsNull=False))])
    text = failure(lambda: ids(spark).select(udf_of(ddl, {"xs": [1, None]}, {"xs": [1]})("id")).collect())
    assert "OutputSchemaError" in text and "at value.xs[1] (row" in text and "NOT NULL" in text
    assert "Value at index is null" not in text
    rows = ids(spark).select("id", udf_of(ddl, {"xs": [1, None]}, {"xs": [1]}, "null")("id").alias("v")).collect()
    assert [r.id for r in rows if r.v is None] == [BAD]


@aiospark.async_udf("double")
async def same_double(x):
    return x


@aiospark.async_udf("struct<x: double, isnan: boolean, isnull: boolean>")
async def seen(x):
    return {"x": x, "isnan": x is not None and math.isnan(x), "isnull": x is None}


def test_nan_stays_nan_in_and_out_of_async_udf_on_every_pyspark(spark):
    """A NaN argument is NaN (and a NULL one None) in the function, and a NaN result is NaN in
    Spark, on every PySpark (before 4.1 pandas has one marker for both)."""
    df = spark.createDataFrame([(1.5,), (math.nan,), (None,)], "x DOUBLE")
    got = df.select(seen("x").alias("s"), same_double("x").alias("same")).collect()
    assert [(r.s.isnan, r.s.isnull) for r in got] == [(False, False), (True, False), (False, True)]
    assert got[0].same == 1.5 and math.isnan(got[1].same) and got[2].same is None
    assert math.isnan(got[1].s.x) and got[2].s.x is None


@aiospark.async_udf("int")
async def several(a, x, b):
    return (0 if x is None else 1 if math.isnan(x) else 2) + 10 * (a is None) + 100 * (b is None)


def test_nan_and_null_are_told_apart_among_several_arguments(spark):
    df = spark.createDataFrame([(1, math.nan, "b"), (None, None, None), (2, 3.0, None)], "a INT, x DOUBLE, b STRING")
    assert [r.v for r in df.select(several("a", "x", "b").alias("v")).collect()] == [1, 110, 102]


@aiospark.async_udf("array<double>")
async def nested_nan(i):
    return [1.0, math.nan]


def test_a_nested_nan_is_kept_or_refused_never_made_null(spark):
    """PySpark >= 4.1 keeps it; before, Spark would read it back from pandas as NULL: refused."""
    df = ids(spark, 2, 1)
    if ARROW_ITER is not None:
        values = df.select(nested_nan("id").alias("v")).collect()[0].v
        assert values[0] == 1.0 and math.isnan(values[1])
    else:
        text = failure(lambda: df.select(nested_nan("id")).collect())
        assert "OutputSchemaError" in text and "NaN inside an array" in text


@aiospark.async_udf("timestamp")
async def naive_first(i):
    when = datetime.datetime(2026, 1, 1, 12, 0)
    # the first row naive, aware from 2500 on (NULL between): 2,500 rows apart, never in one output chunk
    return when if i == 0 else None if i < 2500 else when.replace(tzinfo=datetime.timezone.utc)


def test_naive_and_aware_datetimes_across_chunks_of_one_task_are_refused(spark):
    """The task's first datetime fixes naive or aware for the whole task, across all its output
    chunks (before, each chunk was checked alone: a mix across chunks went through)."""
    df = spark.range(0, 3000, 1, 1)
    text = failure(lambda: df.select(naive_first("id")).collect())
    assert "OutputSchemaError" in text and "naive and aware" in text and "for the input 2500" in text


# -- the columnar lane (batch_format="pyarrow") -----------------------------------------------------------


def arrow_fn(make):
    async def fn(batch: pa.RecordBatch) -> pa.Table:
        rows = batch.column("id").to_pylist()
        return pa.table({"id": batch.column("id"), "v": make(rows)})
    fn.__name__ = fn.__qualname__ = "columnar"
    return fn


NESTED = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("xs", pa.list_(pa.int32()))])
ARROW_CASES = [
    ("FLOAT", lambda rows: pa.array([1e300 if i == BAD else 1.5 for i in rows], pa.float64()),
     "beyond FLOAT's range", "(row 1)"),
    ("ARRAY<FLOAT>", lambda rows: pa.array([[1.0, 1e300] if i == BAD else [1.0] for i in rows],
                                           pa.list_(pa.float64())), "at v[1] (row 1)", ""),
    ("STRUCT<a: INT NOT NULL, xs: ARRAY<INT>>",
     lambda rows: pa.array([{"a": None if i == BAD else 1, "xs": [1]} for i in rows], NESTED),
     "at v.a (row 1)", "NOT NULL"),
    (ArrayType(IntegerType(), containsNull=False),
     lambda rows: pa.array([[1, None] if i == BAD else [1] for i in rows], pa.list_(pa.int32())),
     "at v[1] (row 1)", "NOT NULL"),
    ("MAP<STRING, INT>",  # before: both pairs reached Spark (m['a'] and map_keys disagreed)
     lambda rows: pa.array([[("a", 1), ("a", 2)] if i == BAD else [("a", 1)] for i in rows],
                           pa.map_(pa.string(), pa.int32())), "at v (row 1)", "given twice"),
    ("STRUCT<m: MAP<STRING, INT>>",
     lambda rows: pa.array([{"m": [("a", 1), ("a", 2)] if i == BAD else [("a", 1)]} for i in rows],
                           pa.struct([("m", pa.map_(pa.string(), pa.int32()))])), "at v.m (row 1)", "given twice"),
]


@pytest.mark.parametrize("ddl, make, says, also", ARROW_CASES, ids=[str(c[0]) for c in ARROW_CASES])
def test_columnar_lane_refuses_overflow_and_nested_nulls_as_error_rows(spark, ddl, make, says, also):
    """Before: 1e300 became inf in the float64 -> float32 cast; a NULL under NOT NULL failed the
    task in the JVM, naming no row, even under on_error="row"."""
    fn = arrow_fn(make)
    schema = with_v(ddl)
    text = failure(lambda: aiospark.ordered_wait(ids(spark), fn, schema, batch_size=4,
                                                 batch_format="pyarrow").collect())
    assert "OutputSchemaError" in text and says in text and also in text
    assert "Value at index is null" not in text
    rows = aiospark.ordered_wait(ids(spark), fn, schema, batch_size=4, batch_format="pyarrow",
                                 on_error="row").collect()
    # the slice of 4 rows holding the bad one fails as a whole (a slice succeeds or fails together)
    assert sorted(r._input.id for r in rows if r._error is not None) == [4, 5, 6, 7]
    assert all(says in r._error for r in rows if r._error is not None)
    assert sorted(r.id for r in rows if r._error is None) == [0, 1, 2, 3]


def test_lanes_agree_on_a_missing_nested_field(spark):
    """A struct field the output lacks is NULL in the columnar lane too, as a dict's missing key
    is in the rows lane (before: refused in one lane, NULL in the other); fields go by name."""
    async def as_rows(row):
        return {"id": row["id"], "s": {"b": "x"}}

    async def as_arrow(batch):
        n = batch.num_rows
        return pa.table({"id": batch.column("id"), "s": pa.array([{"b": "x"}] * n, pa.struct([("b", pa.string())]))})

    schema = "id LONG, s STRUCT<a: INT, b: STRING>"
    by_rows = aiospark.ordered_wait(ids(spark), as_rows, schema).collect()
    by_arrow = aiospark.ordered_wait(ids(spark), as_arrow, schema, batch_size=4, batch_format="pyarrow").collect()
    assert by_rows == by_arrow and by_rows[0].s.asDict() == {"a": None, "b": "x"}


@aiospark.async_udf("struct<a: decimal(10, 2), b: int>")
async def no_struct(i):
    return None if i == BAD else {"a": None, "b": 1}


def test_a_null_struct_result_is_null_or_refused_never_made_up(spark):
    """PySpark >= 4.1 returns the NULL struct; before, a pandas UDF cannot (a DataFrame has no NULL
    row) and Spark got ``{a: 0.00, b: ...}``: refused, naming the input."""
    df = ids(spark)
    if ARROW_ITER is not None:
        rows = df.select("id", no_struct("id").alias("v")).collect()
        assert [r.id for r in rows if r.v is None] == [BAD]
    else:
        text = failure(lambda: df.select(no_struct("id")).collect())
        assert "None for a STRUCT" in text and f"for the input {BAD}" in text


async def whole_microseconds(row):
    return {"t": US, "n": pd.Timestamp("2020-01-01 00:00:00.000001"), "m": [("a", 1), ("b", 2)], "d": 2, "s": "x",
            "b": b"y"}


def test_what_spark_keeps_exactly_is_accepted_in_the_rows_lane_and_async_udf(spark):
    """The other side of the refusals: a pandas Timestamp without nanoseconds, a map given as pairs
    with distinct keys, an int for a DOUBLE."""
    rows = aiospark.ordered_wait(ids(spark, 2, 1), whole_microseconds,
                                 "t TIMESTAMP, n TIMESTAMP_NTZ, m MAP<STRING, INT>, d DOUBLE, s STRING, b BINARY").collect()
    assert rows[0].t.astimezone(UTC) == US.to_pydatetime() and rows[0].n == datetime.datetime(2020, 1, 1, 0, 0, 0, 1)
    assert rows[0].m == {"a": 1, "b": 2} and rows[0].d == 2.0 and rows[0].s == "x" and bytes(rows[0].b) == b"y"
    got = ids(spark, 2, 1).select(udf_of("TIMESTAMP", US, US)("id").alias("t")).collect()
    assert [r.t.astimezone(UTC) for r in got] == [US.to_pydatetime()] * 2


@pytest.mark.skipif(ARROW_ITER is not None, reason="PySpark >= 4.1 keeps NaN in SQL too")
def test_registering_for_sql_before_pyspark_4_1_warns_that_nan_arguments_arrive_as_none(spark):
    """Before: silent. SQL calls a registered UDF without the isnull columns that tell NaN from NULL."""
    with pytest.warns(UserWarning, match="a NaN argument arrives as None"):
        spark.udf.register("same_double_sql", same_double)
    got = spark.sql("SELECT same_double_sql(double('NaN')) AS y").collect()[0].y
    assert got is None  # what the warning says (a NULL, not NaN): if this changes, so must the docs
