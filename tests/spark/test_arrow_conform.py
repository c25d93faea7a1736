"""Arrow outputs of the pyarrow lane matched to the declared schema: cast only where no value can
change, everything else an OutputSchemaError naming the column (no Spark session needed)."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from aiospark.spark.arrow_conform import Conform, mismatch
from aiospark.spark.schema import OutputSchemaError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("score", pa.float64()),
                    pa.field("name", pa.string())])


def conform(output, schema=SCHEMA):
    return Conform(schema, "function 'f'")(output)


def test_matching_output_passes_and_narrow_numbers_are_widened():
    out = conform(pa.record_batch({"id": pa.array([1, 2], pa.int32()), "score": pa.array([1, 2], pa.int64()),
                                   "name": ["a", "b"]}))
    assert out.schema == SCHEMA
    assert out.to_pylist() == [{"id": 1, "score": 1.0, "name": "a"}, {"id": 2, "score": 2.0, "name": "b"}]


def test_columns_are_taken_by_name_and_a_missing_nullable_one_is_null():
    out = conform(pa.table({"name": ["x"], "id": [7]}))
    assert out.to_pylist() == [{"id": 7, "score": None, "name": "x"}]


def test_a_table_of_several_chunks_keeps_every_row():
    table = pa.concat_tables([pa.table({"id": [1]}), pa.table({"id": [2, 3]})])
    assert conform(table).column("id").to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("output, message", [
    (pa.table({"id": [1.5]}), r"'id' \(int64\), which does not fit exactly: .*truncated"),
    (pa.table({"id": ["12"]}), r"'id' \(int64\).*a string column does not become int64"),
    (pa.table({"id": [1], "name": [3]}), r"'name' \(string\).*a int64 column does not become string"),
    (pa.table({"id": [1], "nmae": ["x"]}), r"returned columns \['nmae'\] that are not columns of the schema"),
    (pa.table({"id": [None]}, schema=pa.schema([("id", pa.int64())])), r"1 NULL value\(s\) in a NOT NULL column"),
    (pa.table({"score": [1.0]}), r"'id' .*NOT NULL column \(the output has no such column\)"),
    (pa.table({"id": [1, 2, 3]}).append_column("id", pa.array([1, 2, 3])), r"the columns \['id'\] more than once"),
])
def test_what_does_not_fit_exactly_is_an_error_naming_the_column(output, message):
    with pytest.raises(OutputSchemaError, match=message):
        conform(output)


def test_an_integer_that_overflows_the_column_is_an_error():
    schema = pa.schema([("n", pa.int32())])
    with pytest.raises(OutputSchemaError, match=r"'n' \(int32\)"):
        conform(pa.table({"n": [2 ** 40]}), schema)


def test_other_output_types_are_refused_naming_the_contract():
    with pytest.raises(OutputSchemaError, match=r"returned list: a batch_format='pyarrow' function returns"):
        conform([{"id": 1}])


def test_timestamps_keep_being_aware_or_naive_and_change_unit_only_exactly():
    aware = pa.schema([("t", pa.timestamp("us", tz="UTC"))])
    when = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.timezone.utc)
    out = conform(pa.table({"t": pa.array([when], pa.timestamp("ms", tz="Europe/Paris"))}), aware)
    assert out.column("t").to_pylist() == [when]
    with pytest.raises(OutputSchemaError, match="is naive but the column is aware"):
        conform(pa.table({"t": pa.array([dt.datetime(2026, 1, 1)], pa.timestamp("us"))}), aware)
    with pytest.raises(OutputSchemaError, match=r"'t'.*would lose data"):
        conform(pa.table({"t": pa.array([1_000_000_001], pa.timestamp("ns", tz="UTC"))}), aware)


def test_nested_types_are_matched_inside():
    schema = pa.schema([("xs", pa.list_(pa.int64())), ("s", pa.struct([("a", pa.int64()), ("b", pa.string())])),
                        ("m", pa.map_(pa.string(), pa.float64()))])
    out = conform(pa.table({
        "xs": pa.array([[1, 2]], pa.list_(pa.int32())),
        "s": pa.array([{"a": 1, "b": "x"}], pa.struct([("a", pa.int16()), ("b", pa.large_string())])),
        "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
    }), schema)
    assert out.schema == schema and out.column("xs").to_pylist() == [[1, 2]]
    with pytest.raises(OutputSchemaError, match="a string column does not become int64"):
        conform(pa.table({"xs": pa.array([["1"]])}), schema)
    # struct fields are taken by name, as a Python dict's keys are: another order fits, a field the
    # output lacks is NULL, a field the schema lacks is refused
    out = conform(pa.table({"s": pa.array([{"b": "x", "a": 1}], pa.struct([("b", pa.string()), ("a", pa.int64())]))}),
                  schema)
    assert out.schema == schema and out.column("s").to_pylist() == [{"a": 1, "b": "x"}]
    out = conform(pa.table({"s": pa.array([{"b": "x"}, None], pa.struct([("b", pa.string())]))}), schema)
    assert out.column("s").to_pylist() == [{"a": None, "b": "x"}, None]
    with pytest.raises(OutputSchemaError, match=r"struct fields \['a', 'bb'\] are not fields of the schema's struct"):
        conform(pa.table({"s": pa.array([{"a": 1, "bb": "x"}], pa.struct([("a", pa.int64()), ("bb", pa.string())]))}),
                schema)


def test_dictionary_encoded_and_all_null_columns_fit():
    out = conform(pa.table({"id": [1, 2], "name": pa.array(["a", "a"]).dictionary_encode(),
                            "score": pa.nulls(2)}))
    assert out.to_pylist() == [{"id": 1, "score": None, "name": "a"}, {"id": 2, "score": None, "name": "a"}]


def test_mismatch_says_none_for_equal_and_exact_casts():
    assert mismatch(pa.int64(), pa.int64()) is None
    assert mismatch(pa.float32(), pa.float64()) is None
    assert mismatch(pa.bool_(), pa.int64()) == "a bool column does not become int64 (no conversion between kinds of value)"


def test_a_slice_answered_by_several_tables_or_by_none_is_checked_as_a_whole():
    from pyspark.sql.types import LongType, StructField, StructType

    from aiospark.core.batches import BatchError
    from aiospark.spark.arrow_lane import Piece, Settle

    schema = StructType([StructField("id", LongType())])
    settle = Settle(schema, schema, "function 'f'", None, str)
    batch = pa.record_batch([pa.array(range(5))], names=["id"])
    # an AsyncFunction's list of outputs for one slice: together, one row per input row
    out = settle([Piece(batch, [pa.table({"id": [0, 1]}), pa.record_batch([pa.array([2, 3, 4])], names=["id"])])])
    assert out.column("id").to_pylist() == [0, 1, 2, 3, 4]
    with pytest.raises(BatchError, match=r"returned 0 rows for a batch of 5 inputs.*starting with \[\{'id': 0\}\]"):
        settle([Piece(batch, [])])
