"""Arrow <-> Python: MAPs become dicts at any depth on the way in; on the way out, nothing is changed
silently (values that do not fit exactly are errors or error rows)."""
from __future__ import annotations

import datetime
import decimal
import fractions
import re

import numpy
import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, IntegerType, MapType, StringType, StructField, StructType, TimestampType

import aiospark
from aiospark.spark.checked import Output, OutputChecks, _Call
from aiospark.spark.schema import RowConverter, to_python

MAP = pa.map_(pa.string(), pa.int64())


def test_maps_become_dicts_at_any_depth():
    top = pa.array([[("a", 1), ("b", 2)], None], MAP)
    assert to_python(top) == [{"a": 1, "b": 2}, None]
    nested_type = pa.struct([("n", pa.int64()), ("xs", pa.list_(MAP))])
    nested = pa.array([{"n": 1, "xs": [[("k", 3)]]}], nested_type)
    assert to_python(nested) == [{"n": 1, "xs": [{"k": 3}]}]
    batch = pa.RecordBatch.from_arrays([pa.array([7]), nested], ["id", "s"])
    assert to_python(batch) == [{"id": 7, "s": {"n": 1, "xs": [{"k": 3}]}}]


def test_without_maps_values_are_what_the_map_aware_conversion_gives():
    when = datetime.datetime(2026, 11, 22, 6, 30, tzinfo=datetime.timezone.utc)
    columns = {
        "i": pa.array([1, None], pa.int64()),
        "f": pa.array([1.5, None]),
        "b": pa.array([True, None]),
        "s": pa.array(["x", None]),
        "bin": pa.array([b"\x00", None]),
        "ts": pa.array([when, None], pa.timestamp("us", tz="UTC")),
        "d": pa.array([datetime.date(2026, 11, 22), None]),
        "dec": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(5, 2)),
        "arr": pa.array([[1, 2], None], pa.list_(pa.int64())),
        "st": pa.array([{"a": 1, "b": ["z"]}, None], pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])),
        "dict": pa.array(["p", "q"]).dictionary_encode(),
    }
    batch = pa.RecordBatch.from_pydict(columns)
    assert to_python(batch) == batch.to_pylist(maps_as_pydicts="lossy")
    assert to_python(batch)[0]["ts"] == when and to_python(batch)[1]["st"] is None
    for column in columns.values():
        assert to_python(column) == column.to_pylist(maps_as_pydicts="lossy")


# --- issue 17: outputs that do not fit exactly are errors (or error rows), on any row -----------------

N = 20


def bad_on(index, good, bad):
    """A plain async function whose output for input ``index`` is ``bad``, else ``good(i)``."""
    async def fn(row):
        i = row["id"]
        return bad if i == index else good(i)
    fn.__name__ = fn.__qualname__ = "shaky"
    return fn


def failure(spark, fn, schema):
    df = spark.range(0, N, 1, 2)
    with pytest.raises(Exception) as info:
        aiospark.ordered_wait(df, fn, schema).collect()
    return str(info.value)


@pytest.mark.parametrize("schema, bad, shown", [
    ("id LONG, n INT", {"id": 17, "n": 1.5}, "1.5"),
    ("id LONG, n TINYINT", {"id": 17, "n": 300}, "300"),
    ("id LONG, n LONG", {"id": 17, "n": 2 ** 63}, "9223372036854775808"),
    ("id LONG, n INT", {"id": 17, "n": "1"}, "'1'"),
])
def test_a_value_that_does_not_fit_is_an_error_naming_function_column_value(spark, schema, bad, shown):
    text = failure(spark, bad_on(17, lambda i: {"id": i, "n": i}, bad), schema)
    assert "OutputSchemaError" in text and "shaky" in text and "'n'" in text and shown in text


@pytest.mark.parametrize("number", [
    numpy.float64(1.5), numpy.float32(2.5), decimal.Decimal("1.5"), fractions.Fraction(3, 2), float("nan"),
    numpy.float64("inf"), decimal.Decimal("NaN"),
])
def test_every_kind_of_number_with_a_fraction_is_refused_by_an_integer_column(number):
    # Arrow truncates each of these without a word (numpy.float64(1.5) -> 1): checked before it can
    schema = StructType([StructField("n", IntegerType()), StructField("xs", ArrayType(IntegerType()))])
    with pytest.raises(aiospark.OutputSchemaError, match="is not a whole number") as top:
        RowConverter(schema, "fn").to_batch([{"n": 1}, {"n": number}])
    assert repr(number) in str(top.value) and "'n'" in str(top.value)
    with pytest.raises(aiospark.OutputSchemaError, match=re.escape("at xs[1] (row 0):")):
        RowConverter(schema, "fn").to_batch([{"xs": [1, number]}])


def test_whole_numbers_of_every_kind_fit_an_integer_column():
    schema = StructType([StructField("n", IntegerType())])
    whole = [numpy.float64(2.0), numpy.float32(3.0), decimal.Decimal("4"), fractions.Fraction(10, 2), numpy.int64(6),
             7.0, 8, None]
    batch = RowConverter(schema, "fn").to_batch([{"n": v} for v in whole])
    assert batch.column(0).to_pylist() == [2, 3, 4, 5, 6, 7, 8, None]


def test_naive_and_aware_datetimes_mixed_in_one_column(spark):
    naive = datetime.datetime(2026, 1, 1, 12, 0)
    aware = naive.replace(tzinfo=datetime.timezone.utc)
    text = failure(spark, bad_on(17, lambda i: {"id": i, "t": aware}, {"id": 17, "t": naive}), "id LONG, t TIMESTAMP")
    assert "OutputSchemaError" in text and "'t'" in text and "naive and aware" in text
    ntz = failure(spark, bad_on(3, lambda i: {"id": i, "t": naive}, {"id": 3, "t": aware}), "id LONG, t TIMESTAMP_NTZ")
    assert "OutputSchemaError" in ntz and "TIMESTAMP_NTZ" in ntz


def test_a_misspelt_key_on_any_row_is_an_error(spark):
    text = failure(spark, bad_on(17, lambda i: {"id": i, "name": "x"}, {"id": 17, "nmae": "x"}), "id LONG, name STRING")
    assert "OutputSchemaError" in text and "nmae" in text and "shaky" in text


def test_none_for_a_not_null_column_names_the_column(spark):
    text = failure(spark, bad_on(17, lambda i: {"id": i, "name": "x"}, {"id": 17, "name": None}),
                   "id LONG, name STRING NOT NULL")
    assert "OutputSchemaError" in text and "'name'" in text and "NOT NULL" in text
    assert "IllegalStateException" not in text


def test_error_rows_for_every_input_whose_output_does_not_fit(spark):
    async def fn(row):
        i = row["id"]
        if i % 5 == 1:
            return {"id": i, "n": i + 0.5, "name": "x"}  # a fraction for INT
        if i % 5 == 2:
            return {"id": i, "n": i, "name": None}  # NULL for NOT NULL
        if i % 5 == 3:
            return {"id": i, "n": i, "nmae": "x"}  # a misspelt key
        return {"id": i, "n": i, "name": f"r{i}"}

    df = spark.range(0, N, 1, 2)
    rows = aiospark.ordered_wait(df, fn, "id LONG, n INT, name STRING NOT NULL", on_error="row").collect()
    assert len(rows) == N
    good = {r.id: (r.n, r.name) for r in rows if r._error is None}
    assert good == {i: (i, f"r{i}") for i in range(N) if i % 5 in (0, 4)}
    errors = {r._input.id: r._error for r in rows if r._error is not None}
    assert sorted(errors) == [i for i in range(N) if i % 5 in (1, 2, 3)]
    assert all(e.startswith("OutputSchemaError") for e in errors.values())
    assert "1.5" in errors[1] and "NOT NULL" in errors[2] and "nmae" in errors[3]


def tagged(value, rows):
    """A call's outputs as the error-row mode's call wrapper hands them on."""
    call = _Call(value, len(rows))
    return [Output(call, i, row) for i, row in enumerate(rows)]


def error_checks(*fields):
    schema = StructType([StructField(*f) for f in fields])
    return OutputChecks(RowConverter(schema, "fn"), lambda value, text: ("ERROR", value, text))


def test_error_row_checks_convert_a_chunk_in_bulk_and_blame_only_inputs_that_do_not_fit():
    checks = error_checks(("n", IntegerType()), ("name", StringType(), False))
    good = tagged("a", [{"n": 1, "name": "x"}, (2, "y")])  # a tuple is a row too
    bad = tagged("b", [{"n": 3, "name": "z"}, {"n": 3.5, "name": "z"}])  # its 2nd output does not fit
    failed_call = ("CALL FAILED", "c")  # not an output (e.g. an error row of a failed call): kept as is
    values = good + [None] + bad + [failed_call] + tagged("d", [{"n": 4, "name": None}])
    settled = checks.settle(values)
    assert settled[:3] == [{"n": 1, "name": "x"}, {"n": 2, "name": "y"}, None]
    assert settled[3][:2] == ("ERROR", "b") and "3.5" in settled[3][2]  # one error row, where b's outputs were
    assert settled[4] == failed_call
    assert settled[5][:2] == ("ERROR", "d") and "NOT NULL" in settled[5][2]
    assert len(settled) == 6
    # a chunk that fits is converted once, and nothing is replaced
    rows = [{"n": i, "name": str(i)} for i in range(1000)]
    assert checks.settle([o for i, r in enumerate(rows) for o in tagged(i, [r])]) == rows


def test_error_row_checks_keep_a_calls_outputs_together_across_chunks():
    checks = error_checks(("n", IntegerType()))
    first = tagged("a", [{"n": 1}, {"n": 2}, {"n": 2.5}])
    other = tagged("b", [{"n": 9}])
    # the chunk ends after a's first two outputs: they are held back, not emitted without the third
    assert checks.settle(other + first[:2]) == [{"n": 9}]
    later = checks.settle(first[2:] + tagged("c", [{"n": 3}]))
    assert [r[:2] if isinstance(r, tuple) else r for r in later] == [("ERROR", "a"), {"n": 3}]


class ThreeRows(aiospark.AsyncFunction):
    """Three outputs per input, as tuples; every 7th input's last output has a fraction for INT."""

    async def async_invoke(self, row):
        i = row["id"]
        return [(i, k) for k in range(2)] + [(i, 2.5 if i % 7 == 3 else 2)]


def results_are_tuples(results):
    if not all(isinstance(r, tuple) for r in results):  # a predicate must see the function's rows
        raise TypeError(f"the retry predicate saw {type(results[0]).__name__}")
    return False


@pytest.mark.parametrize("ordered", [True, False])
def test_error_rows_replace_all_outputs_of_an_input_and_only_those(spark, ordered):
    """3000 outputs in one task: they reach the check in chunks whose ends fall inside calls."""
    n = 1000
    op = aiospark.ordered_wait if ordered else aiospark.unordered_wait
    retry = aiospark.RetryStrategy.fixed_delay(1, 0.01, result_predicate=results_are_tuples)
    rows = op(spark.range(0, n, 1, 1), ThreeRows(), "id LONG, k INT", on_error="row", retry=retry,
              output_batch_rows=100).collect()
    errors = {r._input.id: r._error for r in rows if r._error is not None}
    assert sorted(errors) == [i for i in range(n) if i % 7 == 3]
    assert all(e.startswith("OutputSchemaError") and "2.5" in e for e in errors.values())
    good = sorted((r.id, r.k) for r in rows if r._error is None)
    assert good == [(i, k) for i in range(n) if i % 7 != 3 for k in range(3)]
    if ordered:
        assert [r.id if r._error is None else r._input.id for r in rows] == sorted(
            r.id if r._error is None else r._input.id for r in rows)


def test_async_udf_value_with_a_fraction_for_int(spark):
    @aiospark.async_udf("int")
    async def half(x):
        return x / 2

    df = spark.range(0, N, 1, 2)
    assert sorted(r.h for r in df.select(half("id").alias("h")).where("id % 2 = 0").collect()) == list(range(10))
    with pytest.raises(Exception) as info:
        df.select(half("id")).collect()
    assert "OutputSchemaError" in str(info.value) and re.search(r"\d\.5 is not a whole number", str(info.value))


NESTED = StructType([
    StructField("xs", ArrayType(IntegerType())),
    StructField("m", MapType(StringType(), IntegerType())),
    StructField("st", StructType([StructField("a", IntegerType()), StructField("ts", ArrayType(TimestampType()))])),
])


@pytest.mark.parametrize("row, path, shown", [
    ({"xs": [1, 2.5]}, "xs[1]", "2.5"),
    ({"m": {"k": 1.5}}, "m{'k'}", "1.5"),
    ({"st": {"a": 0.5}}, "st.a", "0.5"),
    ({"st": (7.5, None)}, "st.a", "7.5"),  # a struct given as a tuple
    ({"st": {"ts": [datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), datetime.datetime(2026, 1, 1)]}},
     "st.ts[1]", "naive and aware"),
])
def test_values_nested_in_arrays_maps_and_structs_are_checked_too(row, path, shown):
    # named by the path (with indices) and the row of the output chunk
    with pytest.raises(aiospark.OutputSchemaError, match=re.escape(f"at {path} (row 1):")) as info:
        RowConverter(NESTED, "fn").to_batch([{"xs": [1, 2.0], "m": {"k": 3}}, row])
    assert shown in str(info.value)
    # whole numbers as floats fit, as at the top level
    batch = RowConverter(NESTED, "fn").to_batch([{"xs": [1, 2.0], "m": {"k": 3.0}, "st": {"a": 4.0, "ts": None}}])
    assert batch.to_pylist() == [{"xs": [1, 2], "m": [("k", 3)], "st": {"a": 4, "ts": None}}]


def test_nested_values_that_do_not_fit_through_spark(spark):
    async def fn(row):
        i = row["id"]
        return {"id": i, "xs": [i, i + 0.5 if i == 7 else i]}

    df = spark.range(0, N, 1, 2)
    with pytest.raises(Exception) as info:
        aiospark.ordered_wait(df, fn, "id LONG, xs ARRAY<INT>").collect()
    assert "OutputSchemaError" in str(info.value) and "xs[1]" in str(info.value) and "7.5" in str(info.value)
    rows = aiospark.ordered_wait(df, fn, "id LONG, xs ARRAY<INT>", on_error="row").collect()
    assert [r._input.id for r in rows if r._error] == [7]
    assert sorted(r.id for r in rows if r._error is None) == [i for i in range(N) if i != 7]

    @aiospark.async_udf("array<int>")
    async def halves(x):
        return [x, x / 2]

    with pytest.raises(Exception) as info:
        df.select(halves("id")).collect()
    assert "OutputSchemaError" in str(info.value) and "value[1]" in str(info.value)


def test_rows_converted_column_by_column_keep_from_pylists_meaning():
    """A key a row lacks is NULL; an unknown key is an error even when it stands in for a missing
    one (same number of keys); rows of mixed kinds (dict, tuple, Row) convert alike."""
    schema = StructType([StructField("a", IntegerType()), StructField("b", StringType())])
    converter = RowConverter(schema, "fn")
    assert converter.to_batch([{"a": 1}, {"b": "x"}, {}, {"a": 4, "b": "y"}]).to_pylist() == [
        {"a": 1, "b": None}, {"a": None, "b": "x"}, {"a": None, "b": None}, {"a": 4, "b": "y"}]
    with pytest.raises(aiospark.OutputSchemaError, match=r"\['c'\]"):
        converter.to_batch([{"a": 1, "b": "x"}, {"a": 2, "c": "typo"}])
    from pyspark.sql import Row
    assert converter.to_batch([{"a": 1, "b": "x"}, (2, "y"), Row(a=3, b="z")]).to_pylist() == [
        {"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "z"}]


def test_values_whose_equality_raises_are_never_compared():
    """NumPy arrays (whose ``==`` is elementwise and whose truth raises) in a NOT NULL array
    column: the checks look at values by identity and type only, so Arrow converts them."""
    numpy = pytest.importorskip("numpy")
    schema = StructType([StructField("xs", ArrayType(IntegerType()), nullable=False)])
    rows = [{"xs": numpy.array([1, 2])}, {"xs": numpy.array([3])}]
    assert RowConverter(schema, "fn").to_batch(rows).to_pylist() == [{"xs": [1, 2]}, {"xs": [3]}]
    with pytest.raises(aiospark.OutputSchemaError, match="NOT NULL"):
        RowConverter(schema, "fn").to_batch(rows + [{}])


def test_a_column_name_given_twice_takes_the_rows_value_in_both_columns():
    """A repeated column name is not an unknown key: both columns get the row's value, as Arrow's
    ``from_pylist`` gives them."""
    schema = StructType([StructField("a", IntegerType()), StructField("a", IntegerType())])
    batch = RowConverter(schema, "fn").to_batch([{"a": 1}, {}])
    assert [c.to_pylist() for c in batch.columns] == [[1, None], [1, None]]
    with pytest.raises(aiospark.OutputSchemaError, match=r"\['b'\]"):
        RowConverter(schema, "fn").to_batch([{"a": 1}, {"b": 2}])


class _BrokenRepr:
    def __repr__(self):
        raise RuntimeError("repr is broken")


def test_a_value_with_a_broken_repr_is_still_named_in_the_schema_error():
    converter = RowConverter(StructType([StructField("n", IntegerType())]), "fn")
    with pytest.raises(aiospark.OutputSchemaError, match=r"cannot hold the value <unrepresentable _BrokenRepr: its "
                                                         r"repr\(\) raised RuntimeError> of type _BrokenRepr"):
        converter.to_batch([{"n": _BrokenRepr()}])
