"""aiospark ``unordered_wait`` side by side with PyFlink's ``AsyncDataStream.unordered_wait``.

Same workload on both: ``rows`` elements (60,000), one task (PyFlink parallelism 1 / Spark
``local[1]`` with one partition), capacity 1000, a 60 s timeout, and an async function that does
``await asyncio.sleep(0.01)`` and returns its input. PyFlink writes to a ``DiscardingSink`` (its
``execute_and_collect`` path caps near 1k rows/s); aiospark's output is aggregated by Spark.

PyFlink pins other versions of pandas/pyarrow/numpy, so it lives in its own venv and runs as a
subprocess of that venv's python::

    python3 -m venv /tmp/pyflink-venv && /tmp/pyflink-venv/bin/pip install apache-flink==2.3.0
    python -m benchmarks.pyflink_compare [--pyflink-python /tmp/pyflink-venv/bin/python]

Two rates per side: *active* = rows / (last call completed - first call started), timed inside the
Python worker the same way on both sides (excludes cluster and worker start-up), and *wall* = rows /
the whole action (Spark: the job, workers and the JVM's JIT already warm from ``--warmup`` no-op
jobs, as in a job that has been running for a while; PyFlink: ``env.execute()``, mini-cluster
start-up included). The ratio is taken on the active rates.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PYFLINK_PYTHON = "/tmp/pyflink-venv/bin/python"

# Runs inside the PyFlink venv. argv: rows latency capacity timeout_seconds out_json
PYFLINK_JOB = r'''
import asyncio, json, sys, time
rows, latency, capacity, timeout_s, out_path = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5]

import pyflink
from pyflink.common import Time, Types
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import AsyncDataStream, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import Sink
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import AsyncFunction


class Sleepy(AsyncFunction):
    """await asyncio.sleep(latency); return [value] -- timing the active phase inside the worker."""

    def open(self, runtime_context):
        self.first = None
        self.count = 0

    async def async_invoke(self, value):
        if self.first is None:
            self.first = time.time()
        await asyncio.sleep(latency)
        self.count += 1
        if self.count == rows:
            with open(out_path, "w") as f:
                json.dump({"first": self.first, "last": time.time(), "count": self.count}, f)
        return [value]


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.set_python_executable(sys.executable)
source = env.from_source(NumberSequenceSource(0, rows - 1), WatermarkStrategy.no_watermarks(), "sequence",
                         type_info=Types.LONG())
out = AsyncDataStream.unordered_wait(source, Sleepy(), Time.seconds(timeout_s) if timeout_s > 0
                                     else Time.milliseconds(0), capacity, Types.LONG())
out.sink_to(Sink("org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink"))
t0 = time.time()
env.execute("pyflink-async-unordered")
wall = time.time() - t0
with open(out_path) as f:
    active = json.load(f)
print("RESULT " + json.dumps({"version": pyflink.__version__ if hasattr(pyflink, "__version__") else "?",
                              "wall": wall, "active": active["last"] - active["first"],
                              "count": active["count"]}))
'''


def pyflink_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('apache-flink'))"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip() if out.returncode == 0 else ""


def run_pyflink(python: str, rows: int, latency: float, capacity: int, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pyflink-compare-") as tmp:
        script = os.path.join(tmp, "job.py")
        with open(script, "w") as f:
            f.write(PYFLINK_JOB)
        out_json = os.path.join(tmp, "active.json")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON",
                                                                 "PYSPARK_DRIVER_PYTHON")}
        t0 = time.time()
        proc = subprocess.run([python, script, str(rows), str(latency), str(capacity), str(timeout), out_json],
                              capture_output=True, text=True, env=env, cwd=tmp, timeout=3600)
        total = time.time() - t0
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            tail = "\n".join((proc.stdout + "\n" + proc.stderr).strip().splitlines()[-30:])
            raise RuntimeError(f"the PyFlink job failed (exit {proc.returncode}):\n{tail}")
        result = json.loads(line[len("RESULT "):])
        result["process"] = total
        return result


# ------------------------------------------------------------------------------------------ aiospark
def _aiospark_function(rows: int, latency: float, out_path: str):
    import aiospark

    class Sleepy(aiospark.AsyncFunction):
        """await asyncio.sleep(latency); return [row] -- timed inside the worker like the PyFlink one."""

        async def open(self):
            self.first = None
            self.count = 0

        async def async_invoke(self, row):
            if self.first is None:
                self.first = time.time()
            await asyncio.sleep(latency)
            self.count += 1
            if self.count == rows:
                with open(out_path, "w") as f:
                    json.dump({"first": self.first, "last": time.time(), "count": self.count}, f)
            return [row]

    return Sleepy()


def run_aiospark(rows: int, latency: float, capacity: int, timeout: float, warmup: int = 3) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import aiospark

    spark = aiospark.local_session("local[1]", app_name="aiospark-vs-pyflink")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="aiospark-compare-") as tmp:
            def job(n: int, path: str):
                df = spark.range(0, n, 1, 1)
                out = aiospark.unordered_wait(df, _aiospark_function(n, latency, path), "id LONG",
                                              capacity=capacity, timeout=timeout)
                return out.agg(F.count("id").alias("n"), F.sum("id").alias("s"))

            job(min(rows, 2 * capacity), os.path.join(tmp, "warm.json")).collect()  # warm the worker up

            async def noop(row):
                return row

            for _ in range(warmup):  # and the JVM's JIT, as in a job that has run for a while
                aiospark.unordered_wait(spark.range(0, 200_000, 1, 1), noop, "id LONG").agg(F.count("id")).collect()
            action = job(rows, os.path.join(tmp, "active.json"))
            t0 = time.perf_counter()
            got = action.collect()[0]
            wall = time.perf_counter() - t0
            if (got["n"], got["s"]) != (rows, rows * (rows - 1) // 2):
                raise AssertionError(f"aiospark output is wrong: {got}")
            with open(os.path.join(tmp, "active.json")) as f:
                active = json.load(f)
    finally:
        spark.stop()
    return {"wall": wall, "active": active["last"] - active["first"], "count": active["count"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pyflink_compare", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--latency", type=float, default=0.01, help="asyncio.sleep per element (s)")
    parser.add_argument("--capacity", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=60.0, help="per-element timeout on both sides (s)")
    parser.add_argument("--pyflink-python", default=DEFAULT_PYFLINK_PYTHON,
                        help=f"python of a venv with apache-flink installed (default {DEFAULT_PYFLINK_PYTHON})")
    parser.add_argument("--warmup", type=int, default=3, help="no-op Spark jobs of 200k rows run first (JIT)")
    parser.add_argument("--no-timeout-row", action="store_true",
                        help="also run PyFlink with timeout 0 (no per-element threading.Timer)")
    args = parser.parse_args(argv)

    python = args.pyflink_python
    version = pyflink_version(python) if os.path.exists(python) else ""
    if not version:
        print(f"No PyFlink found at {python}. PyFlink pins its own pandas/pyarrow/numpy, so install it into a "
              "separate venv (not this python):\n\n"
              "    python3 -m venv /tmp/pyflink-venv\n"
              "    /tmp/pyflink-venv/bin/pip install apache-flink==2.3.0   # newest 2.x: pip index versions "
              "apache-flink\n\n"
              "then run again (or pass --pyflink-python /path/to/venv/bin/python). Needs Java 11+.",
              file=sys.stderr)
        return 2

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    import pyspark

    command = "python -m benchmarks.pyflink_compare " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    load0 = os.getloadavg()
    bound = args.capacity / args.latency
    # aiospark first. Run right after PyFlink, aiospark measured 39-41k rows/s (three runs)
    # against 49k before it; no PyFlink process outlives its job (checked with ps), so the cause
    # is not known. docs/benchmarks.md gives both orders.
    print(f"[aiospark] running {args.rows:,} rows ...", file=sys.stderr, flush=True)
    aio = run_aiospark(args.rows, args.latency, args.capacity, args.timeout, args.warmup)
    print(f"[pyflink] running {args.rows:,} rows ...", file=sys.stderr, flush=True)
    flink = run_pyflink(python, args.rows, args.latency, args.capacity, args.timeout)
    flink0 = None
    if args.no_timeout_row:
        print("[pyflink] running again with timeout 0 ...", file=sys.stderr, flush=True)
        flink0 = run_pyflink(python, args.rows, args.latency, args.capacity, 0)
    load1 = os.getloadavg()

    rate = lambda r, k: args.rows / r[k]  # noqa: E731
    ref = rate(aio, "active")
    lines = [
        "## aiospark vs PyFlink Async I/O (one task)", "",
        f"- command: `{command}`",
        f"- machine: {os.cpu_count()} cores; Python {platform.python_version()}; PySpark {pyspark.__version__}; "
        f"apache-flink {version} (venv {python})",
        f"- workload: {args.rows:,} rows, `await asyncio.sleep({args.latency})` per row, capacity {args.capacity}, "
        f"timeout {args.timeout:g} s, parallelism 1 / `local[1]`; Little's-law bound {bound:,.0f} rows/s",
        f"- load average before: {' '.join(f'{x:.2f}' for x in load0)}; after: {' '.join(f'{x:.2f}' for x in load1)}",
        "",
        "| engine | active rows/s | of bound | wall rows/s | wall s | aiospark ÷ this (active) |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, r: dict[str, Any]) -> str:
        a = rate(r, "active")
        return (f"| {name} | {a:,.0f} | {a / bound:.3f} | {rate(r, 'wall'):,.0f} | {r['wall']:.1f} | "
                f"{ref / a:.1f}x |")

    lines.append(row(f"PyFlink {version} AsyncDataStream.unordered_wait → DiscardingSink", flink))
    if flink0 is not None:
        lines.append(row(f"PyFlink {version}, timeout 0 (no threading.Timer per element)", flink0))
    lines.append(row("aiospark unordered_wait", aio))
    lines += ["", "active = rows / (last call completed − first call started), timed inside the Python worker "
                  "on both sides; wall = the whole action (PyFlink: env.execute() with mini-cluster start-up; "
                  f"Spark: the job on a warm worker, after {args.warmup} no-op jobs warming the JIT up).", ""]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
