"""Driver subprocess of test_streaming_kill: file source -> aiospark enrich -> Parquet file sink.

Run: ``python -m tests.chaos.stream_job --input DIR --sink DIR --checkpoint DIR --url URL``

A Structured Streaming query on its own classic ``local[2]`` session reads the JSON files of
``--input`` (``id LONG, key STRING``; ``maxFilesPerTrigger=1``: one file per micro-batch), enriches
every row with ``unordered_wait`` calling the FaultService at ``--url`` (:class:`tests.chaos.ServiceCall`:
``GET /item/{key}``), and writes to a Parquet file sink with a checkpoint, trigger ``availableNow``
(process everything there is, then stop). The test SIGKILLs this process tree mid-stream and starts it
again on the same checkpoint; the restarted query re-runs the batch that was in flight and goes on.

Prints ``DONE {json}`` (last batch id, batches run in this process) when the query has finished.
"""
from __future__ import annotations

import argparse
import json
import sys

from tests.chaos import ITEM_SCHEMA, ServiceCall

INPUT_SCHEMA = "id LONG, key STRING"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--capacity", type=int, default=10)
    args = parser.parse_args(argv)

    import aiospark

    spark = aiospark.local_session("local[2]", app_name="aiospark-stream-kill", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": 100,
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    })
    try:
        source = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
        enriched = aiospark.unordered_wait(source, ServiceCall(args.url, attempt_timeout=30.0), ITEM_SCHEMA,
                                           capacity=args.capacity, timeout=60)
        query = (enriched.writeStream.format("parquet")
                 .option("path", args.sink)
                 .option("checkpointLocation", args.checkpoint)
                 .queryName("aiospark_stream_kill")
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
    from tests.chaos.stream_job import main as _main

    _main(sys.argv[1:])
