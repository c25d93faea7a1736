"""Journal overhead: rows/s with and without ``journal=``, and reading a finished journal.

Run:  python benchmarks/journal_overhead.py [--rows N] [--rounds R] [--read-rows M] [--read-rounds K]

Both sides in one run, alternating (``local[2]``, 2 tasks, capacity 100, a 20 ms ``asyncio.sleep``
service, ``unordered_wait``, ``noop`` sink): a fresh directory journal per round (every row is
called and recorded). Then a finished journal of ``--read-rows`` rows is read back ``--read-rounds``
times: a rerun that makes no call, reported as rows/s per task. The issue's targets: >= 0.90 of the
rows/s without a journal; >= 100k rows/s per task reading. The machine's load average is printed
at the start and the end: on a shared machine compare the ratio of one run, not absolute rates.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # run as a file: benchmarks._spark

from benchmarks._spark import load_line, local_spark  # noqa: E402

SCHEMA = "id LONG, v LONG"


async def service(row):
    await asyncio.sleep(0.02)
    return {"id": row["id"], "v": row["id"] * 2}


async def instant(row):
    return {"id": row["id"], "v": row["id"] * 2}


def worker_cpu():
    """CPU seconds used so far by this driver's Python workers (PySpark's daemon and its children,
    the exited ones included): what a rate per CPU second divides by, a figure the machine's load
    changes far less than wall-clock rates."""
    import psutil

    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            if "python" in proc.name():
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def run(spark, rows, function, journal=None, capacity=100):
    import aiospark

    df = spark.range(0, rows, 1, 2)
    out = aiospark.unordered_wait(df, function, SCHEMA, capacity=capacity, journal=journal)
    start = time.perf_counter()
    out.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--read-rows", type=int, default=400000)
    parser.add_argument("--read-rounds", type=int, default=3)
    args = parser.parse_args()

    import aiospark

    spark = local_spark(2)
    tmp = tempfile.mkdtemp(prefix="aiospark-journal-bench-")
    load_start = os.getloadavg()
    try:
        run(spark, 2000, service)  # warm-up: workers started, modules imported
        run(spark, 2000, service, aiospark.Journal(f"{tmp}/warm", key="id"))
        plain, journaled, plain_cpu, journaled_cpu = [], [], [], []
        for i in range(args.rounds):
            cpu = worker_cpu()
            plain.append(args.rows / run(spark, args.rows, service))
            plain_cpu.append(worker_cpu() - cpu)
            cpu = worker_cpu()
            journaled.append(args.rows / run(spark, args.rows, service, aiospark.Journal(f"{tmp}/w{i}", key="id")))
            journaled_cpu.append(worker_cpu() - cpu)
        read_journal = aiospark.Journal(f"{tmp}/read", key="id")
        write_s = run(spark, args.read_rows, instant, read_journal, capacity=1000)
        read_s, read_cpu = [], []
        for _ in range(args.read_rounds):
            cpu = worker_cpu()
            read_s.append(run(spark, args.read_rows, instant, aiospark.Journal(f"{tmp}/read", key="id"),
                              capacity=1000))
            read_cpu.append(worker_cpu() - cpu)
        load_end = os.getloadavg()
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    bound = 2 * 100 / 0.02
    best_plain, best_journal = max(plain), max(journaled)
    print(f"command: {' '.join([sys.executable] + sys.argv)}")
    print(load_line(load_start, load_end))
    print(f"{args.rows} rows, 2 tasks, capacity 100, 20 ms service (Little's-law bound {bound:,.0f} rows/s)")
    print(f"{'side':<28}{'rounds (rows/s)':<40}{'best':>10}")
    print(f"{'without journal':<28}{', '.join(f'{r:,.0f}' for r in plain):<40}{best_plain:>10,.0f}")
    print(f"{'with journal (directory)':<28}{', '.join(f'{r:,.0f}' for r in journaled):<40}{best_journal:>10,.0f}")
    print(f"ratio with/without (best): {best_journal / best_plain:.3f}   (median of rounds: "
          f"{sorted(journaled)[len(journaled) // 2] / sorted(plain)[len(plain) // 2]:.3f})")
    us = [sum(c) / len(c) / args.rows * 1e6 for c in (plain_cpu, journaled_cpu)]
    print(f"Python workers' CPU per row (mean of rounds): {us[0]:.1f} us without, {us[1]:.1f} us with the journal "
          f"(+{us[1] - us[0]:.1f} us a row: what the journal costs where CPU, not the service, is the limit)")
    per_task = [args.read_rows / 2 / s for s in read_s]
    print(f"reading a finished journal of {args.read_rows:,} rows (no call), rows/s per task: "
          f"{', '.join(f'{r:,.0f}' for r in per_task)} (best {max(per_task):,.0f}, median "
          f"{sorted(per_task)[len(per_task) // 2]:,.0f}); writing it: {args.read_rows / 2 / write_s:,.0f} "
          "rows/s per task")
    per_cpu = [args.read_rows / c for c in read_cpu if c > 0]
    print(f"reading it per CPU second of the Python workers (a task's rate on a core of its own): "
          f"{', '.join(f'{r:,.0f}' for r in per_cpu)} rows")


if __name__ == "__main__":
    main()
