"""Driver subprocess of test_journal_streaming: file source -> unordered_wait with a journal ->
Parquet file sink with a checkpoint.

Run: ``python -m tests.spark.journal_stream_job --input DIR --sink DIR --checkpoint DIR --journal DIR --url URL``

As :mod:`tests.chaos.stream_job` (one JSON file per micro-batch, trigger ``availableNow``), with
``journal=aiospark.Journal(--journal, key="id")`` (``--journal ""``: none). Each output row's
``name`` is ``b<id>``, the micro-batch id its task read from Spark's local property
``streaming.sql.batchId``, so the test can check that property is what Spark sets.
Prints ``DONE {json}`` (the batch ids this process ran) when the query has finished.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tests.chaos import ITEM_SCHEMA, ServiceCall

INPUT_SCHEMA = "id LONG, key STRING"


class BatchEcho(ServiceCall):
    """Calls the service; ``name`` is the micro-batch id as the running task sees it."""

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        from pyspark import TaskContext

        out = await super().async_invoke(row)
        ctx = TaskContext.get()
        out[0]["name"] = f"b{ctx.getLocalProperty('streaming.sql.batchId') if ctx is not None else None}"
        return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    for name in ("--input", "--sink", "--checkpoint", "--journal", "--url"):
        parser.add_argument(name, required=True)
    parser.add_argument("--capacity", type=int, default=8)
    args = parser.parse_args(argv)

    import aiospark

    spark = aiospark.local_session("local[2]", app_name="aiospark-journal-stream", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": 100,
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    })
    try:
        journal = aiospark.Journal(args.journal, key="id") if args.journal else None
        source = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
        enriched = aiospark.unordered_wait(source, BatchEcho(args.url, attempt_timeout=30.0), ITEM_SCHEMA,
                                           capacity=args.capacity, timeout=60, journal=journal)
        query = (enriched.writeStream.format("parquet")
                 .option("path", args.sink)
                 .option("checkpointLocation", args.checkpoint)
                 .trigger(availableNow=True)
                 .start())
        print("STARTED", flush=True)
        query.awaitTermination()
        batches = [p["batchId"] for p in query.recentProgress if p.get("numInputRows", 0) > 0]
        print("DONE " + json.dumps({"batches": batches}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    # Re-import under the package name so Spark pickles what it runs by reference (not as __main__).
    from tests.spark.journal_stream_job import main as _main

    _main(sys.argv[1:])
