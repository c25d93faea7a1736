"""aiospark inside Spark vs bare asyncio running the same coroutine at the same concurrency.

Run:  python benchmarks/spark_throughput.py [--rows 100000] [--latency 0.02] [--capacity 100] [--tasks 2]
      python benchmarks/spark_throughput.py --latency 0 --rows 1000000 --modes unordered   # no-op calls

Both sides run ``await asyncio.sleep(latency)`` per row with ``capacity`` calls in flight per task:
bare asyncio in ``tasks`` separate processes (one loop each, a done-callback refilling the window),
aiospark as ``unordered_wait`` / ``ordered_wait`` / ``async_udf`` on ``local[tasks]`` with ``tasks``
partitions. Spark's Python workers and the JVM's JIT are warmed up first (``--warmup`` no-op jobs
through every measured mode).

Two rates per Spark variant: *wall* = rows / the wall time of the action (job scheduling and task
start-up included), and *active* = rows / (last call completed - first call started), timed inside
the tasks the way the bare asyncio processes time themselves (their start-up is not counted
either). Prints a table with both, efficiency against Little's law and the ratios to bare asyncio.
"""
from __future__ import annotations

import argparse
import asyncio
import glob
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
import uuid


def _bare_worker(rows: int, latency: float, capacity: int, start_at: float, out) -> None:
    async def call(x):
        if latency:
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
    parser.add_argument("--warmup", type=int, default=4,
                        help="no-op jobs of 400k rows run first through every mode measured (JIT warm-up)")
    args = parser.parse_args(argv)

    import aiospark
    from pyspark.sql import functions as F

    spark = aiospark.local_session(f"local[{args.tasks}]", conf={"spark.sql.execution.arrow.maxRecordsPerBatch": 10000})
    latency, capacity = args.latency, args.capacity

    async def sleepy(row):
        await asyncio.sleep(latency)
        return row

    df = spark.range(0, args.rows, 1, args.tasks)
    per_task = args.rows // args.tasks
    stamps = tempfile.mkdtemp(prefix="aiospark-bench-")

    def make_job(mode: str, fn, frame):
        if mode == "unordered":
            return lambda: aiospark.unordered_wait(frame, fn, "id LONG", capacity=capacity).count()
        if mode == "ordered":
            return lambda: aiospark.ordered_wait(frame, fn, "id LONG", capacity=capacity).count()
        column_fn = aiospark.async_udf("long", capacity=capacity)(fn)
        return lambda: frame.select(F.sum(column_fn("id"))).collect()

    async def noop(row):
        return row

    modes = args.modes.split(",")
    # Warm up the Python workers (reused across jobs) and the JVM's JIT for every plan measured
    # (mapInArrow and the Arrow UDF compile different code): without this the JIT compiles them
    # during the measured runs, taking a large share of the two cores from the tasks.
    aiospark.unordered_wait(spark.range(0, 1000, 1, args.tasks), sleepy, "id LONG").count()
    warm_df = spark.range(0, 400_000, 1, args.tasks)
    for mode in modes:
        for _ in range(args.warmup):
            make_job(mode, noop, warm_df)()

    bound = args.tasks * capacity / latency if latency > 0 else float("inf")
    results = []
    bare = bare_asyncio(args.rows, latency, capacity, args.tasks)
    results.append(("bare asyncio", bare, bare))
    for mode in modes:
        job = make_job(mode, _timed(latency, stamps, per_task), df)
        for old in glob.glob(os.path.join(stamps, "*.json")):
            os.remove(old)
        t0 = time.perf_counter()
        job()
        wall = args.rows / (time.perf_counter() - t0)
        marks = [json.load(open(f)) for f in glob.glob(os.path.join(stamps, "*.json"))]
        active = args.rows / (max(m["last"] for m in marks) - min(m["first"] for m in marks))
        results.append((f"aiospark {mode}", wall, active))

    print(f"command: python {' '.join(sys.argv)}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, {args.rows} rows, latency {latency} s, "
          f"capacity {capacity}, {args.tasks} tasks; Little's-law bound {bound:,.0f} rows/s\n")
    print(f"| {'variant':<20} | {'wall rows/s':>11} | {'active rows/s':>13} | {'of bound':>8} "
          f"| {'vs bare (wall)':>14} | {'vs bare (active)':>16} |")
    print(f"|{'-' * 22}|{'-' * 13}|{'-' * 15}|{'-' * 10}|{'-' * 16}|{'-' * 18}|")
    for name, wall, active in results:
        of_bound = f"{active / bound:.2f}" if bound != float("inf") else "—"
        print(f"| {name:<20} | {wall:>11,.0f} | {active:>13,.0f} | {of_bound:>8} "
              f"| {wall / bare:>14.3f} | {active / bare:>16.3f} |")
    print("\nwall = the whole Spark action; active = first call started -> last call completed, timed in the "
          "tasks (bare asyncio is timed the same way, without its process start-up)")
    spark.stop()


def _timed(latency: float, stamps: str, per_task: int):
    """``await asyncio.sleep(latency)``, noting when the task's first call started and its last ended."""
    state = {}  # one per task: Spark unpickles its own copy of the function for every task

    async def timed(row):
        if not state:
            state.update(first=time.time(), n=0)
        if latency:  # --latency 0: a true no-op (completes without suspending)
            await asyncio.sleep(latency)
        state["n"] += 1
        if state["n"] == per_task:
            with open(os.path.join(stamps, f"{uuid.uuid4().hex}.json"), "w") as f:
                json.dump({"first": state["first"], "last": time.time()}, f)
        return row

    timed.__name__ = "sleepy"
    return timed


if __name__ == "__main__":
    main()
