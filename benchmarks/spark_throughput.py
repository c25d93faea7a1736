"""aiospark inside Spark vs bare asyncio running the same coroutine at the same concurrency.

Run:  python benchmarks/spark_throughput.py [--rows 100000] [--latency 0.02] [--capacity 100] [--tasks 2]
      python benchmarks/spark_throughput.py --latency 0 --rows 1000000 --modes unordered   # no-op calls
      python benchmarks/spark_throughput.py --capacity 1000 --rows 200000 --repeat 5      # medians of 5 rounds

Both sides run ``await asyncio.sleep(latency)`` per row with ``capacity`` calls in flight per task:
bare asyncio in ``tasks`` separate processes (one loop each, a done-callback refilling the window),
aiospark as ``unordered_wait`` / ``ordered_wait`` / ``async_udf`` on ``local[tasks]`` with ``tasks``
partitions. Spark's Python workers and the JVM's JIT are warmed up first (``--warmup`` no-op jobs
through every measured mode).

Two rates per Spark variant: *wall* = rows / the wall time of the action (job scheduling and task
start-up included), and *active* = rows / (last call completed - first call started), timed inside
the tasks the way the bare asyncio processes time themselves (their start-up is not counted
either). Prints a table with both, efficiency against Little's law and the ratios to bare asyncio.

These machines are virtual and share their host: the same job varies by +-15 % from one minute to
the next. With ``--repeat N`` every round runs bare asyncio and then each Spark variant, a variant's
ratio is taken against the bare run *of its own round*, and the table shows medians (min-max) over
the rounds, plus the CPU time the hypervisor took away (steal) while they ran.
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
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of (bare asyncio, then every mode); medians of per-round ratios")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")

    from pyspark.sql import functions as F

    import aiospark

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
    names = ["bare asyncio"] + [f"aiospark {mode}" for mode in modes]
    runs = {name: [] for name in names}  # name -> [(wall, active, active / bare of the round)]
    steal0 = _cpu_times()
    for _ in range(args.repeat):
        bare = bare_asyncio(args.rows, latency, capacity, args.tasks)
        runs["bare asyncio"].append((bare, bare, 1.0, bare / bare))
        for mode in modes:
            job = make_job(mode, _timed(latency, stamps, per_task), df)
            wall, active = timed_rates(job, args.rows, stamps)
            runs[f"aiospark {mode}"].append((wall, active, active / bare, wall / bare))
    steal = _steal_share(steal0, _cpu_times())

    print(f"command: python {' '.join(sys.argv)}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, {args.rows} rows, latency {latency} s, "
          f"capacity {capacity}, {args.tasks} tasks; Little's-law bound {bound:,.0f} rows/s; "
          f"{args.repeat} round(s); CPU stolen by the hypervisor meanwhile: {steal}\n")
    width = 18 if args.repeat > 1 else 16
    print(f"| {'variant':<20} | {'wall rows/s':>11} | {'active rows/s':>13} | {'of bound':>8} "
          f"| {'vs bare (wall)':>{width}} | {'vs bare (active)':>{width}} |")
    print(f"|{'-' * 22}|{'-' * 13}|{'-' * 15}|{'-' * 10}|{'-' * (width + 2)}|{'-' * (width + 2)}|")
    for name in names:
        rounds = runs[name]
        wall, active = _median([r[0] for r in rounds]), _median([r[1] for r in rounds])
        of_bound = f"{active / bound:.2f}" if bound != float("inf") else "—"
        print(f"| {name:<20} | {wall:>11,.0f} | {active:>13,.0f} | {of_bound:>8} "
              f"| {_spread([r[3] for r in rounds]):>{width}} | {_spread([r[2] for r in rounds]):>{width}} |")
    print("\nwall = the whole Spark action; active = first call started -> last call completed, timed in the "
          "tasks (bare asyncio is timed the same way, without its process start-up)")
    if args.repeat > 1:
        print("rates are medians over the rounds; ratios are medians (min-max) of each round's ratio to the "
              "bare asyncio run of the same round")
    spark.stop()


def timed_rates(job, rows: int, stamps: str) -> tuple[float, float]:
    """Run ``job`` (a Spark action calling a :func:`_timed` function that writes to ``stamps``):
    (wall rows/s, active rows/s), active = rows / (last call completed - first call started)."""
    for old in glob.glob(os.path.join(stamps, "*.json")):
        os.remove(old)
    t0 = time.perf_counter()
    job()
    wall = rows / (time.perf_counter() - t0)
    marks = []
    for name in glob.glob(os.path.join(stamps, "*.json")):
        with open(name) as f:
            marks.append(json.load(f))
    return wall, rows / (max(m["last"] for m in marks) - min(m["first"] for m in marks))


def _median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _spread(ratios) -> str:
    if len(ratios) == 1:
        return f"{ratios[0]:.3f}"
    return f"{_median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})"


def _cpu_times():
    """The machine's cumulative CPU times (/proc/stat's first line), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None


def _steal_share(before, after) -> str:
    if not before or not after or len(after) < 8:
        return "unknown"
    delta = [b - a for a, b in zip(before, after)]
    total = sum(delta[:8])
    return f"{delta[7] / total * 100:.1f} %" if total else "unknown"


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
