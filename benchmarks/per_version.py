"""The reference figures per Python version: no-op rows/s per task, capacity 1000 against bare
asyncio, and the PyFlink ratio, each measured with that version's interpreter.

Run (one venv per version, each with ``pip install -e .`` done; PyFlink in its own venv, see
``benchmarks/pyflink_compare.py``)::

    python benchmarks/per_version.py --python 3.10=/tmp/v310/bin/python --python 3.12=/tmp/v312/bin/python \\
        [--pyflink-python /tmp/pyflink-venv/bin/python] [--quick]

For each version it runs, in this order and with that version's python as the Spark workers'
python: ``spark_throughput.py --latency 0`` (no-op calls, one task), ``spark_throughput.py
--capacity 1000 --latency 0.02`` (one task, side by side with bare asyncio in the same run) and
``pyflink_compare.py`` (aiospark on this version vs PyFlink); then prints one table, with the
command that produced it. The machines here are shared and noisy: every ratio is taken inside one
run, and the load average is printed with the table.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the markdown tables in ``text``, keyed by their first cell."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def number(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell) or "nan")


def run(python: str, args: list[str], timeout: float) -> str:
    env = dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python,
               PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([python, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def measure(python: str, pyflink: str | None, quick: bool) -> dict[str, tuple[float, ...]]:
    noop_rows, c1000_rows = ("300000", "100000") if quick else ("1000000", "200000")
    warmup = ["--warmup", "2"] if quick else []
    out: dict[str, tuple[float, ...]] = {}
    noop = table_rows(run(python, ["benchmarks/spark_throughput.py", "--latency", "0", "--rows", noop_rows,
                                   "--tasks", "1", *warmup], 1800))
    for mode in ("unordered", "ordered", "udf"):
        out[f"noop {mode}"] = (number(noop[f"aiospark {mode}"][1]),)  # active rows/s
    out["noop bare"] = (number(noop["bare asyncio"][1]),)
    c1000 = table_rows(run(python, ["benchmarks/spark_throughput.py", "--capacity", "1000", "--latency", "0.02",
                                    "--rows", c1000_rows, "--tasks", "1", *warmup], 1800))
    for mode in ("unordered", "ordered", "udf"):
        cells = c1000[f"aiospark {mode}"]
        out[f"c1000 {mode}"] = (number(cells[1]), number(cells[-1]))  # active rows/s, vs bare (active)
    if pyflink:
        flink = table_rows(run(python, ["-m", "benchmarks.pyflink_compare", "--pyflink-python", pyflink, *warmup],
                               1800))
        aio = next(v for k, v in flink.items() if k.startswith("aiospark"))
        pf = next(v for k, v in flink.items() if k.startswith("PyFlink"))
        out["pyflink"] = (number(aio[0]), number(pf[0]), number(pf[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", required=True, metavar="VERSION=PATH",
                        help="a version label and its venv's python (repeatable)")
    parser.add_argument("--pyflink-python", help="PyFlink's venv python (skip the PyFlink column if omitted)")
    parser.add_argument("--quick", action="store_true", help="fewer rows (a smoke run)")
    args = parser.parse_args(argv)
    pythons = []
    for item in args.python:
        label, sep, path = item.partition("=")
        if not sep or not os.path.exists(path):
            parser.error(f"--python takes VERSION=PATH to an existing interpreter, got {item!r}")
        pythons.append((label, path))

    command = "python benchmarks/per_version.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    results = {}
    for label, path in pythons:
        print(f"[{label}] measuring ...", file=sys.stderr, flush=True)
        results[label] = measure(path, args.pyflink_python, args.quick)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"command: `{command}`\n\nload average at the end: {load}\n")
    print("| Python | no-op rows/s per task: unordered / ordered / udf (bare asyncio) "
          "| capacity 1000, 20 ms: active rows/s, vs bare: unordered / ordered / udf | PyFlink: aiospark ÷ PyFlink |")
    print("|---|---|---|---|")
    for label, r in results.items():
        noop = " / ".join(f"{r[f'noop {m}'][0]:,.0f}" for m in ("unordered", "ordered", "udf"))
        c1000 = " / ".join(f"{r[f'c1000 {m}'][0]:,.0f} ({r[f'c1000 {m}'][1]:.2f})"
                           for m in ("unordered", "ordered", "udf"))
        flink = (f"{r['pyflink'][2]:.1f}x ({r['pyflink'][0]:,.0f} vs {r['pyflink'][1]:,.0f} rows/s)"
                 if "pyflink" in r else "—")
        print(f"| {label} | {noop} ({r['noop bare'][0]:,.0f}) | {c1000} | {flink} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
