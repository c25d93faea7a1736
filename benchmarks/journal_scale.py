"""Journal at scale (issue 48, "Scale, measured"): rows/s and Python worker memory with and without a
journal, a fully recorded rerun, and equal keys called once.

Run:  python benchmarks/journal_scale.py [--rows-per-task N] [--tasks T] [--rounds R]
                                         [--dup-rows M] [--dup-keys K] [--only plain,write,rerun,dedup]

``local[T]``, input ``spark.range(N*T, numPartitions=T)`` with a ``key`` column, a no-op ``async def``
(returns ``{"key": .., "v": ..}`` of the key alone, so an outcome served for an equal key is the
right one), ``unordered_wait`` with capacity 100, ``noop`` sink. Each round runs every side once, in
this order, and the tables give the median of the rounds (ratios and differences are taken within a
round, then the median):

* ``plain``  -- no journal;
* ``write``  -- ``Journal(<fresh dir>, key="key")``: every row called and recorded;
* ``rerun``  -- the same journal again: every row recorded, no call;
* ``dedup``  -- ``--dup-rows`` rows, ``key = id % K`` (every key in every partition), a fresh
  journal; against ``distinct``, the same rows with ``key = id`` and a fresh journal.

Rows/s are per task (rows / wall / T). Peak RSS is the largest VmHWM of one Python worker, sampled
from the driver (``_spark.WorkerPeakRss``): a fully recorded rerun never calls the function, so the
function cannot measure it. Workers are reused between jobs (Spark's default, what a user's jobs
see): each job's peak is reset to the worker's RSS at the job's start, shown as "held at start"
(what earlier jobs left in it, the journal's included). ``--fresh-workers`` gives every task a
worker of its own (``spark.python.worker.reuse=false``), so its peak is strictly that task's; the
worker's start (fork, imports: seconds on a loaded machine) is then in every wall time, and the
caption gives it (a job of one row a task takes that long too). Calls are the operator's own counter
(``out.aiospark_metrics.total.calls``); the journal's size is what its directory holds, whatever its
layout. Only the public API (``aiospark.unordered_wait``, ``aiospark.Journal``) is used, so the
script runs unchanged whether the journal keeps its outcomes per partition or per key bucket.

Targets: write >= 0.8 of plain; rerun >= 200,000 rows/s per task; peak RSS of write and rerun
within 256 MiB of plain; dedup <= K + capacity calls at >= 0.8 of distinct's rows/s.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # run as a file: benchmarks._spark

from benchmarks._spark import MIB, WorkerPeakRss, command_line, load_line, local_spark, markdown_table, median  # noqa: E402

SCHEMA = "key LONG, v LONG"
CAPACITY = 100
SIDES = ("plain", "write", "rerun", "dedup")


async def noop(row):
    return {"key": row["key"], "v": row["key"] + 1}


@dataclass
class Run:
    rows: int
    wall: float
    peak: int      # bytes, largest worker
    held: int      # bytes, the largest RSS a worker had at the job's start (reused workers)
    workers: int
    calls: int

    def per_task(self, tasks: int) -> float:
        return self.rows / self.wall / tasks


def run(spark, rows: int, tasks: int, keys: int | None = None, journal_dir: str | None = None) -> Run:
    """One job: ``rows`` rows in ``tasks`` partitions, ``key = id % keys`` (``id`` when None)."""
    from pyspark.sql import functions as F

    import aiospark

    key = F.col("id") if keys is None else F.col("id") % keys
    df = spark.range(0, rows, 1, tasks).withColumn("key", key)
    journal = None if journal_dir is None else aiospark.Journal(journal_dir, key="key")
    out = aiospark.unordered_wait(df, noop, SCHEMA, capacity=CAPACITY, journal=journal)
    with WorkerPeakRss() as rss:
        start = time.perf_counter()
        out.write.format("noop").mode("overwrite").save()
        wall = time.perf_counter() - start
    calls = out.aiospark_metrics.total.calls
    # counted apart, untimed: rows a journal's table serves never reach the operator's counters
    # (every row is recorded by now: this action calls nothing)
    emitted = out.count()
    if emitted != rows:
        raise SystemExit(f"{rows:,} rows in, {emitted:,} rows out: rows lost or duplicated")
    return Run(rows, wall, rss.peak, rss.held, rss.workers, calls)


def disk(path: str) -> tuple[int, int]:
    """Bytes and files under ``path`` (whatever the journal's layout)."""
    size = files = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.path.getsize(os.path.join(dirpath, name))
                files += 1
            except OSError:
                pass
    return size, files


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def fmt_rounds(values, spec: str = ",.0f") -> str:
    return ", ".join(format(v, spec) for v in values)


def parse_only(text: str) -> list[str]:
    sides = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise argparse.ArgumentTypeError(f"--only takes a comma-separated subset of {','.join(SIDES)}; got {text!r}")
    return sides


def positive(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-task", type=positive, default=1_000_000)
    parser.add_argument("--tasks", type=positive, default=2)
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--dup-rows", type=positive, default=1_000_000)
    parser.add_argument("--dup-keys", type=positive, default=100_000)
    parser.add_argument("--fresh-workers", action="store_true",
                        help="a new Python worker per task: peaks strictly the task's, but every rate then includes "
                             "the worker's start")
    parser.add_argument("--only", type=parse_only, default=list(SIDES),
                        help=f"comma-separated sides to measure, of {','.join(SIDES)} (default: all)")
    args = parser.parse_args(argv)
    if args.dup_keys > args.dup_rows:
        parser.error(f"--dup-keys ({args.dup_keys:,}) must not exceed --dup-rows ({args.dup_rows:,})")
    only, tasks, rows = set(args.only), args.tasks, args.rows_per_task * args.tasks
    command = command_line(argv)

    spark = local_spark(tasks, reuse_workers=not args.fresh_workers)
    tmp = tempfile.mkdtemp(prefix="aiospark-journal-scale-")
    res: dict[str, list[Run]] = {s: [] for s in ("plain", "write", "rerun", "dedup", "distinct")}
    sizes: dict[str, list[tuple[int, int]]] = {s: [] for s in ("write", "rerun", "dedup", "distinct")}
    load_start = os.getloadavg()
    try:
        run(spark, 2000 * tasks, tasks)  # warm-up: the JVM's code paths, the modules on the workers
        run(spark, 2000 * tasks, tasks, journal_dir=f"{tmp}/warm")
        fixed = median([run(spark, tasks, tasks).wall for _ in range(3)])  # one row a task: what a job costs anyway
        for i in range(args.rounds):
            if "plain" in only:
                res["plain"].append(run(spark, rows, tasks))
            written = f"{tmp}/write{i}"
            if "write" in only or "rerun" in only:
                first = run(spark, rows, tasks, journal_dir=written)
                sizes["write"].append(disk(written))
                if "write" in only:  # else only the rerun's journal is being made
                    res["write"].append(first)
            if "rerun" in only:
                res["rerun"].append(run(spark, rows, tasks, journal_dir=written))
                sizes["rerun"].append(disk(written))
            shutil.rmtree(written, ignore_errors=True)
            if "dedup" in only:
                for side, keys in (("dedup", args.dup_keys), ("distinct", None)):
                    path = f"{tmp}/{side}{i}"
                    res[side].append(run(spark, args.dup_rows, tasks, keys=keys, journal_dir=path))
                    sizes[side].append(disk(path))
                    shutil.rmtree(path, ignore_errors=True)
        load_end = os.getloadavg()
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    caption = (f"command: `{command}`  \n{load_line(load_start, load_end)}; local[{tasks}], {args.rounds} rounds "
               f"(medians), capacity {CAPACITY}, no-op async def, noop sink, workers {'not ' if args.fresh_workers else ''}"
               f"reused; a job of one row a task takes {fixed:.2f} s (in every wall time below)")
    rate = {s: [r.per_task(tasks) for r in runs] for s, runs in res.items()}
    peak = {s: [r.peak / MIB for r in runs] for s, runs in res.items()}

    def paired(a: str, b: str, f) -> list[float]:
        return [f(x, y) for x, y in zip(res[a], res[b])] if res[a] and res[b] else []

    tables = []
    rss_cols = ["side", "rows/s per task (rounds)", "median", "peak RSS MiB/worker (rounds)", "median",
                "held at start MiB", "workers"]

    def side_row(s: str) -> list[str]:
        return [s, fmt_rounds(rate[s]), f"{median(rate[s]):,.0f}", fmt_rounds(peak[s], ".1f"),
                f"{median(peak[s]):.1f}", fmt_rounds([r.held / MIB for r in res[s]], ".1f"),
                str(max((r.workers for r in res[s]), default=0))]

    if res["plain"]:
        tables.append((f"1. No journal: {args.rows_per_task:,} rows per task", rss_cols, [side_row("plain")]))
    if res["write"]:
        ratio = paired("write", "plain", lambda w, p: w.wall and p.wall / w.wall)
        grow = paired("write", "plain", lambda w, p: (w.peak - p.peak) / MIB)
        rows2 = [side_row("write") + [
            f"{median(ratio):.3f}" if ratio else "n/a", verdict(median(ratio) >= 0.8 if ratio else None),
            f"{median(grow):+.1f}" if grow else "n/a", verdict(median(grow) <= 256 if grow else None)]]
        tables.append(("2. First run with a journal (every row called and recorded)",
                       rss_cols + ["write/plain", ">= 0.8", "RSS - plain MiB", "<= 256"], rows2))
    if res["rerun"]:
        grow = paired("rerun", "plain", lambda r, p: (r.peak - p.peak) / MIB)
        calls = [r.calls for r in res["rerun"]]
        rows3 = [side_row("rerun") + [
            verdict(median(rate["rerun"]) >= 200_000), f"{median(grow):+.1f}" if grow else "n/a",
            verdict(median(grow) <= 256 if grow else None), fmt_rounds(calls, "d")]]
        tables.append(("3. Fully recorded rerun over the same journal",
                       rss_cols + [">= 200k", "RSS - plain MiB", "<= 256", "calls"], rows3))
    if res["dedup"]:
        bound = args.dup_keys + CAPACITY
        ratio = paired("dedup", "distinct", lambda d, u: d.wall and u.wall / d.wall)
        calls = [r.calls for r in res["dedup"]]
        rows4 = [
            ["distinct keys", f"{args.dup_rows:,}", fmt_rounds([r.calls for r in res["distinct"]], ",d"),
             fmt_rounds(rate["distinct"]), f"{median(rate['distinct']):,.0f}", "", "", "", ""],
            [f"key = id % {args.dup_keys:,}", f"{args.dup_keys:,}", fmt_rounds(calls, ",d"),
             fmt_rounds(rate["dedup"]), f"{median(rate['dedup']):,.0f}", f"{bound:,}",
             verdict(max(calls) <= bound), f"{median(ratio):.3f}", verdict(median(ratio) >= 0.8)]]
        tables.append((f"4. Equal keys: {args.dup_rows:,} rows over {tasks} partitions, a fresh journal each",
                       ["input", "distinct keys", "calls (rounds)", "rows/s per task (rounds)", "median",
                        "calls <= K + capacity", "", "dedup/distinct", ">= 0.8"], rows4))
    disk_rows = []
    for side, what, keys in (("write", "after 2", rows), ("rerun", "after 3 (same journal)", rows),
                             ("dedup", "after 4, equal keys", args.dup_keys),
                             ("distinct", "after 4, distinct keys", args.dup_rows)):
        if sizes[side]:
            b = median([s for s, _ in sizes[side]])
            disk_rows.append([what, f"{keys:,}", f"{b / MIB:,.1f}", f"{b / keys:.1f}",
                              fmt_rounds([n for _, n in sizes[side]], "d")])
    if disk_rows:
        tables.append(("5. The journal on disk", ["journal", "keys", "MiB (median)", "bytes per key", "files (rounds)"],
                       disk_rows))

    for title, headers, body in tables:
        print(f"\n**{title}**\n\n{caption}\n")
        print(markdown_table(headers, body))


if __name__ == "__main__":
    main()
