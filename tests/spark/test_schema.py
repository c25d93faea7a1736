"""Arrow -> Python for the functions' inputs: MAPs become dicts at any depth, nothing else changes."""
from __future__ import annotations

import datetime
import decimal

import pyarrow as pa

from aiospark.spark.schema import to_python

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
