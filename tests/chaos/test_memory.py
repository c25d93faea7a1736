"""Memory stays flat: millions of rows through unordered_wait (capacity 1000) in one Spark task.

The function (:func:`probe`) yields once (``await asyncio.sleep(0)``, so calls really are in flight
and the queue fills up to ``capacity``) and returns the Python worker's current RSS, read from
``/proc/self/statm`` every 1024 calls. Input order is call order, so ``max(rss)`` over the rows
with ``id < n`` is the worker's peak RSS after ``n`` calls: the test compares the peak after the
first SMALL rows with the peak after all LARGE rows of the same job (same worker, no cross-process
noise) and wants less than MARGIN_MB (and 15 %) of growth. ``benchmarks/memory_flat.py`` does the
same for 1M and 10M rows.

``AIOSPARK_MEMORY_ROWS=small,large`` overrides the sizes (default 100000,1000000).
"""
from __future__ import annotations

import asyncio
import os
import time

import pytest
from pyspark.sql import functions as F

import aiospark

pytestmark = pytest.mark.slow

SMALL, LARGE = (int(v) for v in os.environ.get("AIOSPARK_MEMORY_ROWS", "100000,1000000").split(","))
CAPACITY = 1000
MARGIN_MB = 20.0
SAMPLE_EVERY = 1024

_PAGE = os.sysconf("SC_PAGE_SIZE")
_state = {"calls": 0, "rss": 0}


def current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


async def probe(row):
    state = _state
    state["calls"] += 1
    if state["calls"] % SAMPLE_EVERY == 1:
        state["rss"] = current_rss()
    await asyncio.sleep(0)
    return (row["id"], state["rss"], os.getpid())


def test_worker_memory_stays_flat(spark):
    # warm the workers up (imports, first Arrow batches), then one task over LARGE rows
    aiospark.unordered_wait(spark.range(0, 20_000, 1, 1), probe, "id LONG, rss LONG, pid INT",
                            capacity=CAPACITY).count()
    out = aiospark.unordered_wait(spark.range(0, LARGE, 1, 1), probe, "id LONG, rss LONG, pid INT",
                                  capacity=CAPACITY)
    t0 = time.monotonic()
    r = out.agg(F.count("*").alias("n"), F.sum("id").alias("ids"),
                F.max(F.when(F.col("id") < SMALL, F.col("rss"))).alias("peak_small"),
                F.max("rss").alias("peak_large"), F.min("rss").alias("low"),
                F.min("pid").alias("pid_lo"), F.max("pid").alias("pid_hi")).collect()[0]
    wall = time.monotonic() - t0
    mb = 1024 * 1024
    growth = (r.peak_large - r.peak_small) / mb
    print(f"\n[memory] unordered_wait capacity {CAPACITY}, 1 task, {LARGE:,} rows in {wall:.1f} s "
          f"({LARGE / wall:,.0f} rows/s), worker pid {r.pid_lo}: peak RSS after {SMALL:,} rows "
          f"{r.peak_small / mb:.1f} MB, after {LARGE:,} rows {r.peak_large / mb:.1f} MB (growth {growth:+.1f} MB)")

    assert r.n == LARGE and r.ids == LARGE * (LARGE - 1) // 2, "rows lost or duplicated"
    assert r.pid_lo == r.pid_hi, "one task must run in one worker"
    assert r.low > 0 and r.peak_small > 0
    assert growth < MARGIN_MB, f"worker RSS grew by {growth:.1f} MB between {SMALL:,} and {LARGE:,} rows"
    assert r.peak_large < r.peak_small * 1.15
