#!/usr/bin/env python3
"""Key-ordered vs ordered vs unordered output under a heavy latency tail, side by side in one run.

    python -m benchmarks.key_order                  # 20k rows, capacity 200, one Spark task
    python -m benchmarks.key_order --rows 5000 --repeat 1

Every call sleeps a latency drawn (deterministically from the row id) from a heavy-tailed mix:
lognormal with a 5 ms median (sigma 1), and 1 % of calls at 300 ms. One Spark task, so
``capacity`` is the whole concurrency. What each mode pays:

* unordered: a slow call holds back nothing; the ceiling is capacity / mean latency;
* ordered: a slow call holds back every row behind it (head-of-line blocking: they occupy slots
  until it completes, so the queue fills with finished rows);
* key-ordered (``key=``): a slow call holds back only the later rows of its key. With many keys
  that is close to unordered; with few keys, calls of one key queue up behind each other.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time

import aiospark

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEDIAN, SIGMA, SLOW_FRACTION, SLOW = 0.005, 1.0, 0.01, 0.3


def latency(row_id: int) -> float:
    """A deterministic heavy-tailed latency per id (the same for every mode)."""
    import math
    import random

    rng = random.Random(row_id)
    if rng.random() < SLOW_FRACTION:
        return SLOW
    return MEDIAN * math.exp(SIGMA * rng.gauss(0.0, 1.0))


async def call(row):
    await asyncio.sleep(latency(row["id"]))
    return {"id": row["id"], "k": row["k"]}


def run_mode(spark, rows: int, keys: int, mode: str, capacity: int) -> float:
    df = spark.range(0, rows, 1, 1).selectExpr("id", f"id % {keys} AS k")
    schema = "id LONG, k LONG"
    if mode == "ordered":
        out = aiospark.ordered_wait(df, call, schema, capacity=capacity)
    elif mode == "unordered":
        out = aiospark.unordered_wait(df, call, schema, capacity=capacity)
    else:
        out = aiospark.unordered_wait(df, call, schema, capacity=capacity, key="k")
    began = time.perf_counter()
    count = len(out.collect())
    elapsed = time.perf_counter() - began
    assert count == rows, (mode, count)
    return rows / elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.key_order", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--capacity", type=int, default=200)
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000, 100, 10])
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds; the best of each is shown")
    args = parser.parse_args(argv)

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    spark = aiospark.local_session("local[1]", app_name="aiospark-key-order")
    modes = [("unordered", 1), ("ordered", 1)] + [(f"key-ordered, {k} keys", k) for k in args.keys]
    best = {name: 0.0 for name, _ in modes}
    try:
        run_mode(spark, 2000, 10, "unordered", args.capacity)  # warm-up: JVM, workers
        for _ in range(args.repeat):
            for name, keys in modes:
                mode = name.split(",")[0]
                best[name] = max(best[name], run_mode(spark, args.rows, keys, mode, args.capacity))
    finally:
        spark.stop()

    mean = sum(latency(i) for i in range(args.rows)) / args.rows
    bound = args.capacity / mean
    print(f"$ python -m benchmarks.key_order {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip())
    print(f"Python {platform.python_version()}, one Spark task, capacity {args.capacity}, {args.rows} rows, "
          f"latency lognormal median {MEDIAN * 1000:.0f} ms sigma {SIGMA} + {SLOW_FRACTION:.0%} at "
          f"{SLOW * 1000:.0f} ms (mean {mean * 1000:.1f} ms; capacity/mean = {bound:,.0f} rows/s); "
          f"load {os.getloadavg()[0]:.1f}")
    print("| mode | rows/s | vs unordered |")
    print("|---|---:|---:|")
    for name, _ in modes:
        print(f"| {name} | {best[name]:,.0f} | {best[name] / best['unordered']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
