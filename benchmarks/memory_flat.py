"""Python worker memory under unordered_wait with capacity 1000: flat from 1M to 10M rows.

Run:  python benchmarks/memory_flat.py [--rows 1000000,10000000] [--capacity 1000] [--latency 0]

For each row count, a fresh local Spark session (so a fresh Python worker) runs ONE task over that
many rows through ``aiospark.unordered_wait``. The function yields once (``await asyncio.sleep(0)``,
or sleeps ``--latency`` seconds) so ``capacity`` calls really are in flight, and returns, sampled
every 1024 calls in the worker, its current RSS (``/proc/self/statm``) and its peak RSS so far
(``getrusage(RUSAGE_SELF).ru_maxrss``). Input order is call order, so the maximum over the rows with
``id < n`` is the worker's state after ``n`` calls. Printed per row count: the RSS at the first call,
the peak current RSS after 10 % of the rows and after all of them, and the worker's lifetime
``ru_maxrss`` (which also catches transients between samples).

tests/chaos/test_memory.py is the scaled-down check that runs with the test suite.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_EVERY = 1024
_PAGE = os.sysconf("SC_PAGE_SIZE")
_state = {"calls": 0, "rss": 0, "maxrss": 0}
LATENCY = float(os.environ.get("AIOSPARK_MEMORY_LATENCY", "0"))


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


async def probe(row):
    """Runs on the worker: one yield (or a short sleep), then (id, rss, maxrss, pid)."""
    state = _state
    state["calls"] += 1
    if state["calls"] % SAMPLE_EVERY == 1:
        state["rss"] = current_rss()
        state["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    await asyncio.sleep(LATENCY)
    return (row["id"], state["rss"], state["maxrss"], os.getpid())


def measure(rows: int, capacity: int) -> dict:
    from pyspark.sql import functions as F

    import aiospark

    spark = aiospark.local_session("local[2]", app_name="aiospark-memory-flat",
                                   conf={"spark.sql.execution.arrow.maxRecordsPerBatch": 1000})
    try:
        out = aiospark.unordered_wait(spark.range(0, rows, 1, 1), probe,
                                      "id LONG, rss LONG, maxrss LONG, pid INT", capacity=capacity)
        tenth = rows // 10
        t0 = time.perf_counter()
        r = out.agg(F.count("*").alias("n"), F.sum("id").alias("ids"),
                    F.min_by("rss", "id").alias("first"),
                    F.max(F.when(F.col("id") < tenth, F.col("rss"))).alias("peak_tenth"),
                    F.max("rss").alias("peak"), F.max("maxrss").alias("maxrss"),
                    F.countDistinct("pid").alias("pids")).collect()[0]
        wall = time.perf_counter() - t0
    finally:
        spark.stop()
    if r.n != rows or r.ids != rows * (rows - 1) // 2:
        raise SystemExit(f"{rows} rows in, {r.n} out: rows lost or duplicated")
    return dict(rows=rows, wall=wall, first=r.first, peak_tenth=r.peak_tenth, peak=r.peak, maxrss=r.maxrss,
                pids=r.pids)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated row counts")
    parser.add_argument("--capacity", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds each call sleeps (0: one yield)")
    args = parser.parse_args(argv)
    # the workers import this module by name (see the bottom of the file) and read the latency from env
    os.environ["AIOSPARK_MEMORY_LATENCY"] = str(args.latency)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p)
    from aiospark.spark.session import use_this_python

    use_this_python()
    results = [measure(int(n), args.capacity) for n in args.rows.split(",")]

    mb = 1024 * 1024
    print(f"command: python benchmarks/memory_flat.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores; unordered_wait, capacity {args.capacity}, "
          f"one task, latency {args.latency} s; Python worker RSS in MB\n")
    print(f"| {'rows':>11} | {'rows/s':>8} | {'RSS 1st call':>12} | {'peak @10%':>9} | {'peak @100%':>10} "
          f"| {'growth':>7} | {'ru_maxrss':>9} |")
    print(f"|{'-' * 13}|{'-' * 10}|{'-' * 14}|{'-' * 11}|{'-' * 12}|{'-' * 9}|{'-' * 11}|")
    for r in results:
        print(f"| {r['rows']:>11,} | {r['rows'] / r['wall']:>8,.0f} | {r['first'] / mb:>12.1f} "
              f"| {r['peak_tenth'] / mb:>9.1f} | {r['peak'] / mb:>10.1f} | {(r['peak'] - r['peak_tenth']) / mb:>+7.1f} "
              f"| {r['maxrss'] / mb:>9.1f} |")
    if len(results) > 1:
        a, b = results[0], results[-1]
        print(f"\npeak RSS {a['rows']:,} -> {b['rows']:,} rows: {a['peak'] / mb:.1f} -> {b['peak'] / mb:.1f} MB "
              f"({(b['peak'] - a['peak']) / mb:+.1f} MB); ru_maxrss {a['maxrss'] / mb:.1f} -> {b['maxrss'] / mb:.1f} MB")


if __name__ == "__main__":
    # Re-import under its module name so Spark pickles ``probe`` by reference (workers import it from
    # benchmarks/ on PYTHONPATH) instead of by value from __main__.
    sys.path.insert(0, HERE)
    import memory_flat

    memory_flat.main()
