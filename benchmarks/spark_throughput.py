"""aiospark inside Spark vs bare asyncio running the same coroutine at the same concurrency.

Run:  python benchmarks/spark_throughput.py [--rows 100000] [--latency 0.02] [--capacity 100] [--tasks 2]

Both sides run ``await asyncio.sleep(latency)`` per row with ``capacity`` calls in flight per task:
bare asyncio in ``tasks`` separate processes (one loop each, a done-callback refilling the window),
aiospark as ``unordered_wait`` / ``ordered_wait`` / ``async_udf`` on ``local[tasks]`` with ``tasks``
partitions. Spark's Python workers are warmed up first; the Spark time is the wall time of the
action. Prints a table with rows/s, efficiency against Little's law and the ratio to bare asyncio.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import sys
import time


def _bare_worker(rows: int, latency: float, capacity: int, start_at: float, out) -> None:
    async def call(x):
        await asyncio.sleep(latency)
        return x

    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        source = iter(range(rows))
        finished = 0

        def on_done(_t):
            nonlocal finished
            finished += 1
            refill()

        def refill():
            for x in source:
                loop.create_task(call(x)).add_done_callback(on_done)
                return
            if finished == rows and not done.done():
                done.set_result(None)

        for _ in range(capacity):
            refill()
        await done

    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.perf_counter()
    asyncio.run(main())
    out.put(time.perf_counter() - t0)


def bare_asyncio(rows: int, latency: float, capacity: int, tasks: int) -> float:
    """rows/s of ``tasks`` processes, each running rows/tasks calls at ``capacity`` concurrency."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 1.0
    procs = [ctx.Process(target=_bare_worker, args=(rows // tasks, latency, capacity, start_at, out))
             for _ in range(tasks)]
    for p in procs:
        p.start()
    elapsed = max(out.get() for _ in procs)
    for p in procs:
        p.join()
    return rows / elapsed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--capacity", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--modes", default="unordered,ordered,udf")
    args = parser.parse_args(argv)

    import aiospark
    from pyspark.sql import functions as F

    spark = aiospark.local_session(f"local[{args.tasks}]", conf={"spark.sql.execution.arrow.maxRecordsPerBatch": 10000})
    latency, capacity = args.latency, args.capacity

    async def sleepy(row):
        await asyncio.sleep(latency)
        return row

    @aiospark.async_udf("long", capacity=capacity)
    async def sleepy_udf(x):
        await asyncio.sleep(latency)
        return x

    df = spark.range(0, args.rows, 1, args.tasks)
    # warm up the Python workers (they are reused across jobs)
    aiospark.unordered_wait(spark.range(0, 1000, 1, args.tasks), sleepy, "id LONG").count()

    bound = args.tasks * capacity / latency if latency > 0 else float("inf")
    results = []
    bare = bare_asyncio(args.rows, latency, capacity, args.tasks)
    results.append(("bare asyncio", bare))
    for mode in args.modes.split(","):
        if mode == "unordered":
            job = lambda: aiospark.unordered_wait(df, sleepy, "id LONG", capacity=capacity).count()
        elif mode == "ordered":
            job = lambda: aiospark.ordered_wait(df, sleepy, "id LONG", capacity=capacity).count()
        else:
            job = lambda: df.select(F.sum(sleepy_udf("id"))).collect()
        t0 = time.perf_counter()
        job()
        results.append((f"aiospark {mode}", args.rows / (time.perf_counter() - t0)))

    print(f"command: python {' '.join(sys.argv)}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, {args.rows} rows, latency {latency} s, "
          f"capacity {capacity}, {args.tasks} tasks; Little's-law bound {bound:,.0f} rows/s\n")
    print(f"| {'variant':<20} | {'rows/s':>9} | {'of bound':>8} | {'vs bare asyncio':>15} |")
    print(f"|{'-' * 22}|{'-' * 11}|{'-' * 10}|{'-' * 17}|")
    for name, rate in results:
        print(f"| {name:<20} | {rate:>9,.0f} | {rate / bound:>8.2f} | {rate / bare:>15.3f} |")
    spark.stop()


if __name__ == "__main__":
    main()
