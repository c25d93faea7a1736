"""The engine-cost table of issue 29 for this interpreter, on one worker event loop, in one Spark session.

Run:  python benchmarks/engine_cost.py [--loop uvloop|asyncio|auto] [--quick] [--json OUT.json]
      python benchmarks/per_version.py --python 3.11=/work/venv/bin/python ...  # per version and loop

Measures, in this order, on ``local[2]`` with this interpreter as the Spark workers' python and the
workers' loop set by ``AIOSPARK_LOOP`` (``spark.executorEnv.AIOSPARK_LOOP`` and this process's env):

* no-op ``async def`` through ``unordered_wait`` (capacity 100), 1M rows in 2 partitions: rows/s per task
  = (rows / 2) / wall time of the action writing to the ``noop`` sink, the median of ``--pairs`` jobs;
  bare asyncio no-op rows/s per process (2 processes, ``spark_throughput.bare_asyncio``) for scale;
* ``await asyncio.sleep(0.02)`` at capacity 1000 and 100, 2 tasks: *active* rates (first call started ->
  last call completed, timed inside the tasks, ``spark_throughput._timed``) over bare asyncio timed the
  same way;
* the user's own aiohttp GET (``unordered_wait``) and ``lookup_join`` + ``HttpLookup`` (transport
  ``auto``) against nginx on 127.0.0.1, 1 task, capacity 100: rows / wall time of the action over bare
  asyncio + aiohttp in one process (``http_transport.run_bare``);
* a batched no-op (``batch_size=256``, capacity 1024) over an identity ``mapInArrow`` of the same rows, 2 tasks, both
  rows/s per task to the ``noop`` sink: in the rows lane (a list of dicts per call) and in the columnar lane
  (``batch_format="pyarrow"``: a RecordBatch per call), each between two runs of the reference; and for
  scale, a ``mapInArrow`` that only turns every row into a dict and back (``to_pylist`` ->
  ``from_pylist``): the least any lane handing the function dicts can cost.

Every ratio is taken against its reference measured adjacent in time, ``--pairs`` times (default 3):
the reference runs before the first job and after every job (in this process, the JVM idle), jobs
that share a reference take turns (reference, aiohttp job, reference, lookup job, reference, aiohttp
job, ...), each job is divided by the mean of the two references around it, and a workload's value is
the median of its ratios. This machine's speed drifts by 20-40 % within minutes: one pair is a coin
flip near a target, the median of three is not. The bare references always run plain asyncio
(``asyncio.run``), whatever ``--loop`` says. Spark's Python workers and the JVM's JIT are warmed up
first through every plan measured.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # run as a script: benchmarks.* and tests.support (nginx)

from benchmarks.http_transport import ensure_nginx, run_bare, spark_job  # noqa: E402
from benchmarks.spark_throughput import _timed, bare_asyncio, timed_rates  # noqa: E402

LOOPS = ("uvloop", "asyncio")
CAPACITY = 100
BATCH = 256
BATCH_CAPACITY = 4 * BATCH  # inputs in flight: four batches

#: key -> (label in the tables, unit); targets: :func:`target`
WORKLOADS: dict[str, tuple[str, str]] = {
    "noop": ("no-op `async def` (unordered_wait), 2 tasks", "rows/s per task"),
    "bare_noop": ("bare asyncio no-op, 2 processes (scale)", "rows/s per process"),
    "sleep_c1000": ("20 ms sleep, capacity 1000, 2 tasks, active", "x bare asyncio"),
    "sleep_c100": ("20 ms sleep, capacity 100, 2 tasks, active", "x bare asyncio"),
    "aiohttp": ("user's aiohttp GET (unordered_wait), nginx, capacity 100, 1 task", "x bare aiohttp"),
    "lookup": ("`lookup_join` + `HttpLookup`, nginx, capacity 100, 1 task", "x bare aiohttp"),
    "batched": (f"batched no-op (batch_size={BATCH}, capacity {BATCH_CAPACITY}), 2 tasks", "x identity mapInArrow"),
    "batched_arrow": ("same, `batch_format=\"pyarrow\"` (columnar lane)", "x identity mapInArrow"),
    "dicts": ("`mapInArrow` through Python dicts (`to_pylist` -> `from_pylist`), no calls: a rows lane's "
              "ceiling (scale)", "x identity mapInArrow"),
    "map_in_arrow": ("identity `mapInArrow`, 2 tasks (scale)", "rows/s per task"),
}


def target(key: str, version: str) -> float | None:
    """The issue's lower bound for ``key`` on Python ``version`` ("3.12"), None for the scale rows.
    The no-op bound is given for 3.11 (75k) and 3.12 (160k); older take 3.11's, newer 3.12's."""
    if key == "noop":
        return 75_000.0 if tuple(map(int, version.split(".")[:2])) < (3, 12) else 160_000.0
    return {"sleep_c1000": 0.92, "sleep_c100": 0.97, "aiohttp": 0.95, "lookup": 2.5, "batched": 0.40,
            "batched_arrow": 0.40}.get(key)


def sizes(quick: bool) -> dict[str, int]:
    """Rows per workload (``--quick``: a smoke run of about a fifth)."""
    if quick:
        return {"noop": 200_000, "sleep_c1000": 40_000, "sleep_c100": 10_000, "http": 8_000, "batched": 1_000_000,
                "warmup": 100_000, "warmup_jobs": 2}
    return {"noop": 1_000_000, "sleep_c1000": 200_000, "sleep_c100": 40_000, "http": 40_000,
            "batched": 4_000_000, "warmup": 400_000, "warmup_jobs": 4}


async def _noop(row):
    return row


async def _noop_batch(rows):
    return rows


async def _noop_arrow(batch):
    return batch


async def _loop_name(row):
    return {"id": row["id"], "loop": type(asyncio.get_running_loop()).__module__}


def _identity(batches):
    yield from batches


def _through_dicts(batches):
    """What any lane handing functions a list of dicts pays at least: every row to a dict and back."""
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_pylist(batch.to_pylist(), schema=batch.schema)


def _noop_sink(df) -> float:
    """Seconds to run ``df`` into the ``noop`` sink."""
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def interleaved(reference, jobs: dict, pairs: int) -> tuple[dict[str, dict], list[float]]:
    """Run each job of ``jobs`` ({key: measure()}) ``pairs`` times, taking turns, with ``reference()``
    before the first and after every job (all return rates). Returns ({key: {"value": median ratio,
    "ratios", "rates"}}, the references in order); a ratio is a job's rate over the mean of the two
    references around it."""
    references = [reference()]
    out: dict[str, dict] = {key: {"ratios": [], "rates": []} for key in jobs}
    for _ in range(pairs):
        for key, measured in jobs.items():
            rate = measured()
            references.append(reference())
            out[key]["rates"].append(rate)
            out[key]["ratios"].append(rate / ((references[-2] + references[-1]) / 2))
    for r in out.values():
        r["value"] = statistics.median(r["ratios"])
    return out, references


def measure(loop: str, quick: bool, log=lambda msg: None, batched_rows: int | None = None,
            pairs: int = 3) -> dict:
    """All workloads in one Spark session on the workers' ``loop``: {key: {"value": ..., ...}}, plus
    "worker_loop" (the loop module the workers really ran) and "transport" (what HttpLookup's auto chose).
    ``batched_rows`` overrides the rows of the batched job and of its ``mapInArrow`` reference; each
    ratio is the median of ``pairs`` (see :func:`interleaved`)."""
    import aiospark
    from aiospark.connectors.http.choose import resolve_transport

    n = sizes(quick)
    if batched_rows is not None:
        n["batched"] = batched_rows
    os.environ["AIOSPARK_LOOP"] = loop
    spark = aiospark.local_session("local[2]", conf={"spark.executorEnv.AIOSPARK_LOOP": loop,
                                                     "spark.sql.execution.arrow.maxRecordsPerBatch": 10000})
    out: dict = {"python": platform.python_version(), "loop": loop}
    try:
        out["worker_loop"] = sorted({r["loop"] for r in aiospark.unordered_wait(
            spark.range(0, 4, 1, 2), _loop_name, "id LONG, loop STRING").collect()})

        def noop_df(rows):
            return aiospark.unordered_wait(spark.range(0, rows, 1, 2), _noop, "id LONG", capacity=CAPACITY)

        def batched_df(rows):
            return aiospark.unordered_wait(spark.range(0, rows, 1, 2), _noop_batch, "id LONG", batch_size=BATCH,
                                           capacity=BATCH_CAPACITY)

        def columnar_df(rows):
            return aiospark.unordered_wait(spark.range(0, rows, 1, 2), _noop_arrow, "id LONG", batch_size=BATCH,
                                           capacity=BATCH_CAPACITY, batch_format="pyarrow")

        def arrow_df(rows):
            df = spark.range(0, rows, 1, 2)
            return df.mapInArrow(_identity, df.schema)

        def dicts_df(rows):
            df = spark.range(0, rows, 1, 2)
            return df.mapInArrow(_through_dicts, df.schema)

        log("warm-up")
        for make in (noop_df, batched_df, columnar_df, arrow_df, dicts_df):
            for _ in range(n["warmup_jobs"]):
                _noop_sink(make(n["warmup"]))

        log("no-op")
        rows = n["noop"]
        # an absolute rate (the median job), the bare references around the jobs for scale
        ratios, references = interleaved(lambda: bare_asyncio(rows, 0.0, CAPACITY, 2) / 2,
                                         {"noop": lambda: rows / 2 / _noop_sink(noop_df(rows))}, pairs)
        rates = ratios["noop"]["rates"]
        out["noop"] = {"value": statistics.median(rates), "rates": rates, "rows": rows}
        out["bare_noop"] = {"value": statistics.median(references), "rates": references, "rows": rows}

        stamps = tempfile.mkdtemp(prefix="aiospark-engine-cost-")
        try:
            for key, capacity in (("sleep_c1000", 1000), ("sleep_c100", 100)):
                log(key)
                rows = n[key]
                timed = _timed(0.02, stamps, rows // 2)
                job = aiospark.unordered_wait(spark.range(0, rows, 1, 2), timed, "id LONG", capacity=capacity)
                ratios, references = interleaved(
                    lambda r=rows, c=capacity: bare_asyncio(r, 0.02, c, 2),
                    {key: lambda j=job, r=rows: timed_rates(
                        lambda: j.write.format("noop").mode("overwrite").save(), r, stamps)[1]}, pairs)
                out[key] = dict(ratios[key], rows=rows, references=references)
        finally:
            shutil.rmtree(stamps, ignore_errors=True)

        ensure_nginx()
        from tests.support.nginx import NginxServer
        with NginxServer(workers=1) as srv:
            base = srv.url("").rstrip("/")
            rows = n["http"]
            bare_args = argparse.Namespace(base=base, rows=rows, concurrency=CAPACITY)
            variants = {"aiohttp": "unordered_wait[aiohttp]", "lookup": "lookup_join[auto]"}
            for variant in variants.values():  # warm-up: workers, pools
                _noop_sink(spark_job(spark, variant, base, CAPACITY, 1, 2000))
            out["transport"] = resolve_transport("auto")
            log("aiohttp, lookup")
            ratios, references = interleaved(
                lambda: run_bare("aiohttp", "asyncio", 1, bare_args) or float("nan"),
                {key: lambda v=variant, r=rows: r / _noop_sink(spark_job(spark, v, base, CAPACITY, 1, r))
                 for key, variant in variants.items()}, pairs)
            for key in variants:
                out[key] = dict(ratios[key], rows=rows, references=references)

        rows = n["batched"]
        log("batched")
        ratios, references = interleaved(
            lambda: rows / 2 / _noop_sink(arrow_df(rows)),
            {key: lambda m=make: rows / 2 / _noop_sink(m(rows))
             for key, make in (("batched", batched_df), ("batched_arrow", columnar_df), ("dicts", dicts_df))},
            pairs)
        for key in ratios:
            out[key] = dict(ratios[key], rows=rows, references=references)
        out["map_in_arrow"] = {"value": statistics.median(references), "rows": rows}
    finally:
        spark.stop()
    return out


def detail(key: str, r: dict) -> str:
    """The figures behind a value: every job's ratio and rate and the references around them (for
    an absolute rate, its jobs' rates)."""
    if "ratios" not in r:
        rates = " / ".join(f"{x:,.0f}" for x in r.get("rates", ()))
        return f"rows/s {rates}; {r['rows']:,} rows" if rates else f"{r['rows']:,} rows"
    ratios = " / ".join(f"{x:.3f}" for x in r["ratios"])
    rates = " / ".join(f"{x:,.0f}" for x in r["rates"])
    references = " / ".join(f"{x:,.0f}" for x in r["references"])
    return f"ratios {ratios}; rows/s {rates} vs references {references}; {r['rows']:,} rows"


def fmt(key: str, value: float) -> str:
    return f"{value:.3f}" if WORKLOADS[key][1].startswith("x ") else f"{value:,.0f}"


def fmt_target(key: str, version: str) -> str:
    t = target(key, version)
    return "—" if t is None else f">= {fmt(key, t)}"


def verdict(key: str, version: str, value: float) -> str:
    t = target(key, version)
    return "—" if t is None else ("PASS" if value >= t else "FAIL")


def print_table(r: dict, command: str, load: tuple[str, str]) -> None:
    version = ".".join(r["python"].split(".")[:2])
    print(f"command: `{command}`\n")
    print(f"python {r['python']}, {os.cpu_count()} cores, AIOSPARK_LOOP={r['loop']} (workers ran: "
          f"{', '.join(r['worker_loop'])}), HttpLookup transport auto = {r.get('transport', '?')}; "
          f"uptime before: {load[0]}; after: {load[1]}\n")
    print("| workload | unit | value | target | verdict | figures |")
    print("|---|---|---|---|---|---|")
    for key, (label, unit) in WORKLOADS.items():
        if key in r:
            v = r[key]["value"]
            print(f"| {label} | {unit} | {fmt(key, v)} | {fmt_target(key, version)} | "
                  f"{verdict(key, version, v)} | {detail(key, r[key])} |")


def uptime() -> str:
    """``uptime``'s load averages (1, 5, 15 min)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=(*LOOPS, "auto"), default="auto",
                        help="the Spark workers' event loop (AIOSPARK_LOOP); bare references use asyncio.run")
    parser.add_argument("--quick", action="store_true", help="smaller row counts (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument("--batched-rows", type=int, metavar="N",
                        help="rows of each batched and mapInArrow job (default 4,000,000)")
    parser.add_argument("--pairs", type=int, default=3, metavar="N",
                        help="jobs per ratio, each between two references; the value is their median (default 3)")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if args.batched_rows is not None and args.batched_rows < 100_000:
        parser.error("--batched-rows must be at least 100000 (two tasks of whole Arrow batches)")
    command = "python benchmarks/engine_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    before = uptime()
    r = measure(args.loop, args.quick, log=lambda msg: print(f"[{args.loop}] {msg}", file=sys.stderr, flush=True),
                batched_rows=args.batched_rows, pairs=args.pairs)
    load = (before, uptime())
    r["uptime"] = load
    print_table(r, command, load)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
