"""What checking every output row costs: RowConverter.to_batch before and after issue 17, and the
error-row mode's checks one output at a time against the whole chunk at once.

"before" is the old fast path (unknown keys checked on the first row only, no exactness or NOT NULL
checks); "after" is RowConverter as it is now (keys on every row, floats in integer columns, datetime
kinds, NOT NULL). The ``on_error="row"`` lines compare checking each output on its own (a one-row
conversion per output, as first built) with :class:`aiospark.spark.checked.OutputChecks` (the chunk
in bulk, row by row only when it does not fit), both followed by the task's own conversion to its
output schema (the error columns added). Prints rows/s for each, best of 5 rounds of 10,000-row
batches. Run:

    python benchmarks/output_conversion.py
"""
from __future__ import annotations

import datetime
import os
import sys
import time

import pyarrow as pa
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from aiospark.spark.checked import Output, OutputChecks, _Call
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


def error_mode_schema(struct: StructType) -> StructType:
    """The task's output schema under on_error="row": schema columns nullable, plus the error columns."""
    return StructType([StructField(f.name, f.dataType, True) for f in struct.fields] + [
        StructField("_error", StringType(), True),
        StructField("_input", StructType([StructField("id", LongType(), True)]), True)])


def error_mode(struct: StructType, rows: list) -> tuple:
    """(rows/s checking each output on its own, rows/s checking the chunk in bulk)."""
    out = RowConverter(error_mode_schema(struct), "bench")

    def one_by_one(chunk: list) -> None:
        check = RowConverter(struct, "bench")
        out.to_batch([row if check.problem(row) is None else None for row in chunk])

    def bulk(chunk: list) -> None:  # tagging each output with its input (done at the call) included
        tagged = [Output(_Call({"id": i}, 1), 0, row) for i, row in enumerate(chunk)]
        out.to_batch(OutputChecks(RowConverter(struct, "bench"), None).settle(tagged))

    return rate(one_by_one, rows), rate(bulk, rows)


def main() -> None:
    print("command: python benchmarks/output_conversion.py")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {ROWS:,}-row batches, best of 5\n")
    for label, (ddl, make) in SCHEMAS.items():
        struct = StructType([StructField(*f) for f in ddl])
        rows = [make(i) for i in range(ROWS)]
        converter = RowConverter(struct, "bench")
        schema, names = arrow_schema(struct), frozenset(struct.fieldNames())
        old = rate(lambda r: before(schema, names, r), rows)
        new = rate(converter.to_batch, rows)
        print(f"{label:45s} before {old:12,.0f} rows/s   after {new:12,.0f} rows/s   ({new / old:.2f}x)")
        one, bulk = error_mode(struct, rows)
        print(f"{'  on_error=row: per output / chunk in bulk':45s} before {one:12,.0f} rows/s   "
              f"after {bulk:12,.0f} rows/s   ({bulk / one:.2f}x)")


if __name__ == "__main__":
    main()
