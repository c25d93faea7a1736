"""What ``aiospark journal --compact`` buys a rerun (issue 48, item 5): a journal written by many runs.

Run:  python benchmarks/journal_compact.py [--runs R] [--keys-per-run K] [--rounds N]

``local[2]``, ``unordered_wait`` (the table route: ``Journal(dir, key="key")``) of a no-op
``async def``, ``noop`` sink. ``R`` runs each record ``K`` new keys (``spark.range`` slices, 2
tasks), leaving the table one Parquet file per task, flush and run. Then a fully recorded rerun over
all ``R*K`` rows is timed ``N`` times, ``--compact`` runs (through the CLI's ``main``; the runs
count as ended at once), and the rerun is timed ``N`` times again, side by side in one process.
Prints a Markdown table with the command.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._spark import command_line, load_line, local_spark, markdown_table, median
from benchmarks.journal_scale import SCHEMA, noop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--keys-per-run", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if min(args.runs, args.keys_per_run, args.rounds) < 1:
        parser.error("--runs, --keys-per-run and --rounds must be at least 1")
    from pyspark.sql import functions as F

    import aiospark
    import aiospark.journal.table_compact as table_compact
    from aiospark.app.cli import main as cli

    spark = local_spark(2)
    tmp = tempfile.mkdtemp(prefix="aiospark-journal-compact-")
    loc = f"{tmp}/j"
    start = os.getloadavg()

    def job(lo: int, hi: int) -> float:
        df = spark.range(lo, hi, 1, 2).withColumn("key", F.col("id"))
        out = aiospark.unordered_wait(df, noop, SCHEMA, capacity=100, journal=aiospark.Journal(loc, key="key"))
        t = time.perf_counter()
        out.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t

    def files() -> int:
        return len(glob.glob(f"{loc}/*/table/**/*.parquet", recursive=True))

    try:
        k, rows = args.keys_per_run, args.runs * args.keys_per_run
        for i in range(args.runs):
            job(i * k, (i + 1) * k)
        before_files = files()
        before = [job(0, rows) for _ in range(args.rounds)]
        table_compact.TABLE_QUIET_SECONDS = 0.0  # the runs above have ended
        t = time.perf_counter()
        if cli(["journal", loc, "--compact"]) != 0:
            raise SystemExit("--compact failed")
        took = time.perf_counter() - t
        after_files = files()
        after = [job(0, rows) for _ in range(args.rounds)]
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    rate = [rows / 2 / w for w in before], [rows / 2 / w for w in after]
    print(f"\ncommand: `{command_line(argv)}`  \n{load_line(start, os.getloadavg())}; local[2], "
          f"{args.runs} runs of {k:,} new keys, then a rerun of {rows:,} rows (every one recorded)\n")
    print(markdown_table(
        ["journal", "table files", "rerun wall s (rounds)", "rerun rows/s per task (median)"],
        [["as the runs left it", f"{before_files:,}", ", ".join(f"{w:.2f}" for w in before), f"{median(rate[0]):,.0f}"],
         [f"after --compact ({took:.1f} s, CLI included)", f"{after_files:,}", ", ".join(f"{w:.2f}" for w in after),
          f"{median(rate[1]):,.0f}"]]))


if __name__ == "__main__":
    main()
