"""Design probe for issue 48's rerun target: what a recorded rerun costs when Spark alone serves it.

Run:  python benchmarks/journal_typed_probe.py [ROWS_PER_TASK]     (2 tasks, two rounds; default 1,000,000)

Sides, each on ``spark.range(N*2, numPartitions=2)`` with ``key = id`` and a ``noop`` sink:

* ``plain unordered_wait``  -- the operator calling a no-op ``async def`` (no journal);
* ``spark join``            -- the input joined on ``key`` with the outcomes stored as typed columns
  in Parquet (``key LONG, v LONG``): what a rerun would run if outcomes were a table Spark reads;
* ``spark left join``       -- the same as a left join (the rows without an outcome would go on to
  the operator);
* ``dropDuplicates + op``   -- equal keys removed by Spark before the operator (dedup's cost);
* ``left anti + op``        -- the operator after an anti join with an empty outcome table (a first run).

Rows/s are per task (rows / wall / 2). The point: whether a rerun that never enters Python can read
at >= 200,000 rows/s per task where the Python operator itself cannot.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # run as a file: benchmarks._spark

from benchmarks._spark import load_line, local_spark  # noqa: E402

TASKS = 2


async def noop(row):
    return {"key": row["key"], "v": row["key"] + 1}


def main() -> None:
    from pyspark.sql import functions as F

    import aiospark

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    spark = local_spark(TASKS)
    df = spark.range(0, n * TASKS, 1, TASKS).withColumn("key", F.col("id")).drop("id")
    folder = tempfile.mkdtemp(prefix="aiospark-typed-")
    table = os.path.join(folder, "outcomes")
    spark.range(0, n * TASKS, 1, TASKS).select(F.col("id").alias("key"), (F.col("id") + 1).alias("v")) \
        .write.parquet(table)
    start_load = os.getloadavg()
    print(f"command: python benchmarks/journal_typed_probe.py {n}")

    def sink(frame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    def operator(frame):
        return aiospark.unordered_wait(frame, noop, "key LONG, v LONG", capacity=100)

    sides = {
        "plain unordered_wait": lambda: sink(operator(df)),
        "spark join": lambda: sink(df.join(spark.read.parquet(table), "key").select("key", "v")),
        "spark left join": lambda: sink(df.join(spark.read.parquet(table), "key", "left")),
        "dropDuplicates + op": lambda: sink(operator(df.dropDuplicates(["key"]))),
        "left anti + op": lambda: sink(operator(df.join(spark.read.parquet(table).limit(0), "key", "left_anti"))),
    }
    try:
        print("| round | side | rows/s per task | wall s |\n|---|---|---:|---:|")
        for round_ in (1, 2):
            for name, run in sides.items():
                start = time.perf_counter()
                run()
                wall = time.perf_counter() - start
                print(f"| {round_} | {name} | {n * TASKS / wall / TASKS:,.0f} | {wall:.2f} |", flush=True)
        print(load_line(start_load, os.getloadavg()))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
