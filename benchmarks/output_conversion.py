"""What checking every output row costs: RowConverter.to_batch before and after issue 17.

"before" is the old fast path (unknown keys checked on the first row only, no exactness or NOT NULL
checks); "after" is RowConverter as it is now (keys on every row, floats in integer columns, datetime
kinds, NOT NULL). Prints rows/s for each, best of 5 rounds of 10,000-row batches. Run:

    python benchmarks/output_conversion.py
"""
from __future__ import annotations

import datetime
import time

import pyarrow as pa
from pyspark.sql.types import (DoubleType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from aiospark.spark.schema import RowConverter, arrow_schema

SCHEMAS = {
    "3 columns (LONG, STRING, DOUBLE)": (
        [("id", LongType(), True), ("name", StringType(), True), ("price", DoubleType(), True)],
                                         lambda i: {"id": i, "name": f"n{i}", "price": i * 0.5}),
    "6 columns, 2 INT + TIMESTAMP + NOT NULL": (
        [("id", LongType(), True), ("a", IntegerType(), True), ("b", IntegerType(), True),
         ("name", StringType(), False), ("t", TimestampType(), True), ("price", DoubleType(), True)],
        lambda i: {"id": i, "a": i, "b": -i, "name": "x", "price": 1.0,
                   "t": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)}),
}
ROWS = 10_000


def before(schema: pa.Schema, names: frozenset, rows: list) -> pa.RecordBatch:
    extra = rows[0].keys() - names
    if extra:
        raise ValueError(extra)
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def rate(fn, rows) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        fn(rows)
        best = min(best, time.perf_counter() - start)
    return len(rows) / best


def main() -> None:
    for label, (ddl, make) in SCHEMAS.items():
        struct = StructType([StructField(*f) for f in ddl])
        rows = [make(i) for i in range(ROWS)]
        converter = RowConverter(struct, "bench")
        schema, names = arrow_schema(struct), frozenset(struct.fieldNames())
        old = rate(lambda r: before(schema, names, r), rows)
        new = rate(converter.to_batch, rows)
        print(f"{label:45s} before {old:12,.0f} rows/s   after {new:12,.0f} rows/s   ({new / old:.2f}x)")


if __name__ == "__main__":
    main()
