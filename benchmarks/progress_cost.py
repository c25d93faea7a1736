"""What ``progress=True`` costs the driver: CPU seconds per second of the display, and per job.

Run:  python benchmarks/progress_cost.py [--rows N] [--partitions P] [--rounds R] [--interval S]

Rounds alternate a job without and with ``progress=`` (``local[2]``, ``unordered_wait``, a 20 ms
``asyncio.sleep`` service, capacity 100, ``noop`` sink); the display renders in place (``live=True``)
into a throw-away stream every ``--interval`` seconds, the worst case (a log writes every 30 s).
Printed: the rendering thread's own CPU (``time.thread_time``) per second it ran, the driver
process's CPU per second of the job (``resource.getrusage``: the listener on the collector's
thread included) with and without, and the jobs' seconds.
"""
from __future__ import annotations

import argparse
import asyncio
import io
import resource
import statistics
import sys
import time

SCHEMA = "id LONG, v LONG"


async def service(row):
    await asyncio.sleep(0.02)
    return {"id": row["id"], "v": row["id"] * 2}


class Sink(io.TextIOBase):
    """Counts what the display writes and keeps nothing."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, text: str) -> int:
        self.chars += len(text)
        return len(text)

    def isatty(self) -> bool:
        return True


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(spark, rows: int, partitions: int, progress) -> tuple:
    import aiospark

    out = aiospark.unordered_wait(spark.range(0, rows, 1, partitions), service, SCHEMA, capacity=100,
                                  progress=progress)
    c0, t0 = cpu(), time.perf_counter()
    out.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - t0
    return seconds, cpu() - c0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)

    import aiospark
    from aiospark import ProgressOptions
    from aiospark.spark.progress_live import BOARD

    spark = aiospark.local_session("local[2]")
    run(spark, 2_000, 2, False)  # warm the workers
    plain, shown = [], []
    sink = Sink()
    for _ in range(args.rounds):
        plain.append(run(spark, args.rows, args.partitions, False))
        before = (BOARD.cpu_seconds, BOARD.wall_seconds)
        shown.append(run(spark, args.rows, args.partitions,
                         ProgressOptions(stream=sink, live=True, interval=args.interval, quiet=0.5)))
        while BOARD.thread is not None:  # let the display end so its thread's CPU is counted
            time.sleep(0.05)
        shown[-1] += (BOARD.cpu_seconds - before[0], BOARD.wall_seconds - before[1])
    spark.stop()

    def med(values):
        return statistics.median(values)

    print(f"\nprogress cost on the driver: {args.rows:,} rows, {args.partitions} tasks, local[2], 20 ms calls, "
          f"capacity 100, in-place updates every {args.interval:g} s, {args.rounds} rounds (median)")
    print("| job                  | seconds | driver CPU s | driver CPU s/s | display thread CPU s/s |")
    print("|----------------------|---------|--------------|----------------|------------------------|")
    print(f"| without progress     | {med([s for s, _ in plain]):7.2f} | {med([c for _, c in plain]):12.3f} | "
          f"{med([c / s for s, c in plain]):14.4f} |                      - |")
    print(f"| progress=True (live) | {med([r[0] for r in shown]):7.2f} | {med([r[1] for r in shown]):12.3f} | "
          f"{med([r[1] / r[0] for r in shown]):14.4f} | {med([r[2] / r[3] for r in shown]):22.5f} |")
    print(f"(the display wrote {sink.chars:,} characters)")
    print("command: python benchmarks/progress_cost.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
