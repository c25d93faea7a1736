"""Issue 29's engine-cost table per Python version and per worker event loop, in one run.

Run (any venv with pyspark, pyarrow, aiohttp and uvloop; aiospark need not be installed in it: the
children run with ``PYTHONPATH=<repo>/src:<repo>``)::

    python benchmarks/per_version.py --python 3.11=/work/venv/bin/python \\
        --python 3.12=/tmp/aiospark-ci/py3.12/bin/python [--rounds 3] [--quick] [--loops uvloop,asyncio]

For every round, every version and every loop it runs ``benchmarks/engine_cost.py --loop LOOP`` in a
fresh process with that version's python as the driver's and the Spark workers' python and
``AIOSPARK_LOOP=LOOP`` (the workers pick their loop when they start, so one process per loop): one
Spark session measures all the workloads there, each ratio the median of ``--pairs`` jobs, each
against its reference taken right before and after it (the bare references run plain ``asyncio.run``
whatever the loop). Then it prints one table: a row per workload; per version the value on each
loop, the target, PASS/FAIL per round and loop, and the faster loop; with the command line and
``uptime``'s load averages before and after.
A child that fails (e.g. while ``src/`` is being edited) is retried once a minute later.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks.engine_cost import LOOPS, WORKLOADS, detail, fmt, fmt_target, target, uptime  # noqa: E402

SHORT = {"uvloop": "uv", "asyncio": "aio"}


def child_env(python: str, loop: str) -> dict[str, str]:
    """The environment of a child on ``python`` (driver and workers) with the workers on ``loop``."""
    path = os.pathsep.join(p for p in (os.path.join(REPO, "src"), REPO, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, PYTHONPATH=path,
                AIOSPARK_LOOP=loop)


def run_engine_cost(python: str, loop: str, quick: bool, timeout: float, retry_after: float = 60.0,
                    batched_rows: int | None = None, pairs: int = 3) -> dict:
    """``engine_cost.py --loop loop`` on ``python``: its figures (see ``engine_cost.measure``) plus
    "seconds" (the child's wall time) and "table" (what it printed). Raises RuntimeError after two failures."""
    fd, out = tempfile.mkstemp(prefix="aiospark-engine-cost-", suffix=".json")
    os.close(fd)
    cmd = [python, os.path.join(HERE, "engine_cost.py"), "--loop", loop, "--json", out, *(["--quick"] if quick else []),
           *(["--batched-rows", str(batched_rows)] if batched_rows else []), "--pairs", str(pairs)]
    try:
        for attempt in (1, 2):
            t0 = time.perf_counter()
            done = subprocess.run(cmd, cwd=REPO, env=child_env(python, loop), capture_output=True, text=True,
                                  timeout=timeout)
            if done.returncode == 0:
                with open(out) as f:
                    r = json.load(f)
                r.update(seconds=time.perf_counter() - t0, table=done.stdout)
                return r
            tail = "\n".join(done.stderr.strip().splitlines()[-8:])
            print(f"  failed ({done.returncode}), attempt {attempt}:\n{tail}", file=sys.stderr, flush=True)
            if attempt == 1:
                time.sleep(retry_after)
        raise RuntimeError(f"{' '.join(cmd)} failed twice")
    finally:
        os.remove(out)


def cell_values(runs: list[dict | None], key: str) -> str:
    """The value of ``key`` in every round (``error`` for a failed child), joined by ' · '."""
    return " · ".join("error" if r is None or key not in r else fmt(key, r[key]["value"]) for r in runs)


def verdicts(per_loop: dict[str, list[dict | None]], key: str, version: str) -> str:
    """PASS/FAIL per round and loop ('uv PASS, aio FAIL · ...'), or '—' for a row without a target."""
    t = target(key, version)
    if t is None:
        return "—"
    rounds = len(next(iter(per_loop.values())))
    out = []
    for i in range(rounds):
        marks = []
        for loop, runs in per_loop.items():
            r = runs[i]
            mark = "error" if r is None or key not in r else ("PASS" if r[key]["value"] >= t else "FAIL")
            marks.append(f"{SHORT.get(loop, loop)} {mark}")
        out.append(", ".join(marks))
    return " · ".join(out)


def faster(per_loop: dict[str, list[dict | None]], key: str) -> str:
    """The loop with the higher median value over the rounds, and by how much."""
    medians = {}
    for loop, runs in per_loop.items():
        values = [r[key]["value"] for r in runs if r is not None and key in r]
        if values:
            medians[loop] = statistics.median(values)
    if len(medians) < 2:
        return "—"
    (best, b), (_, other) = sorted(medians.items(), key=lambda kv: -kv[1])[:2]
    return f"{best} (+{(b / other - 1) * 100:.0f} %)" if other > 0 else best


def print_table(results: dict[str, dict[str, list[dict | None]]], loops: list[str]) -> None:
    header = ["workload", "unit"]
    for version in results:
        header += [f"{version} {loop}" for loop in loops] + [f"{version} target", f"{version} PASS/FAIL",
                                                             f"{version} faster loop"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for key, (label, unit) in WORKLOADS.items():
        cells = [label, unit]
        for version, per_loop in results.items():
            cells += [cell_values(per_loop[loop], key) for loop in loops]
            # the scale rows (no target) do not run on the workers' loop: no winner to name
            cells += [fmt_target(key, version), verdicts(per_loop, key, version),
                      faster(per_loop, key) if target(key, version) is not None else "—"]
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", required=True, metavar="VERSION=PATH",
                        help="a version label (3.12) and its venv's python (repeatable)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of (every version x every loop)")
    parser.add_argument("--loops", default=",".join(LOOPS), help="the workers' loops to measure (AIOSPARK_LOOP)")
    parser.add_argument("--quick", action="store_true", help="smaller row counts (a smoke run)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one child may take")
    parser.add_argument("--tables", action="store_true", help="also print every child's own table")
    parser.add_argument("--batched-rows", type=int, metavar="N", help="engine_cost.py's --batched-rows")
    parser.add_argument("--pairs", type=int, default=3, metavar="N",
                        help="engine_cost.py's --pairs: jobs per ratio, the value is their median (default 3)")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be >= 1")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.batched_rows is not None and args.batched_rows < 100_000:
        parser.error("--batched-rows must be at least 100000 (engine_cost.py refuses fewer)")
    loops = [lp.strip() for lp in args.loops.split(",") if lp.strip()]
    if not loops or set(loops) - {*LOOPS, "auto"}:
        parser.error(f"--loops takes a comma-separated list of {', '.join((*LOOPS, 'auto'))}, got {args.loops!r}")
    pythons = []
    for item in args.python:
        label, sep, path = item.partition("=")
        if not sep or not os.path.exists(path):
            parser.error(f"--python takes VERSION=PATH to an existing interpreter, got {item!r}")
        try:
            tuple(map(int, label.split(".")[:2]))
        except ValueError:
            parser.error(f"--python's VERSION is a Python version like 3.12, got {label!r}")
        pythons.append((label, path))

    command = "python benchmarks/per_version.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    load_before, t_start = uptime(), time.perf_counter()
    results: dict[str, dict[str, list[dict | None]]] = {label: {lp: [] for lp in loops} for label, _ in pythons}
    runs_log = []
    for rnd in range(1, args.rounds + 1):
        for label, path in pythons:
            for loop in loops:
                print(f"round {rnd}/{args.rounds}: {label} on {loop} ...", file=sys.stderr, flush=True)
                try:
                    r = run_engine_cost(path, loop, args.quick, args.timeout, batched_rows=args.batched_rows,
                                        pairs=args.pairs)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"  {e}", file=sys.stderr, flush=True)
                    r = None
                results[label][loop].append(r)
                runs_log.append((rnd, label, loop, r))
                if r is not None:
                    print(f"  {r['seconds']:.0f} s", file=sys.stderr, flush=True)
    load_after = uptime()

    print(f"command: `{command}`\n")
    print(f"uptime load averages (1, 5, 15 min) before: {load_before}; after: {load_after}; "
          f"{os.cpu_count()} cores; {args.rounds} round(s), {'--quick row counts' if args.quick else 'full row counts'}; "
          f"{(time.perf_counter() - t_start) / 60:.1f} min in all\n")
    print_table(results, loops)
    print(f"\nValues per round are separated by ' · '. Each is the median of {args.pairs} job(s) (a ratio: the Spark "
          "job over the mean of its references measured right before and after it); the bare references run plain "
          "asyncio.run. PASS/FAIL per round and loop (uv = uvloop, aio = asyncio); 'faster loop' compares the "
          "medians over the rounds.\n")
    for rnd, label, loop, r in runs_log:
        if r is None:
            print(f"- round {rnd}, {label} {loop}: failed twice")
            continue
        figures = "; ".join(f"{k} {detail(k, r[k])}" for k in WORKLOADS if k in r and "rates" in r[k])
        print(f"- round {rnd}, {label} {loop}: python {r['python']}, workers ran {', '.join(r['worker_loop'])}, "
              f"HttpLookup auto = {r.get('transport')}, {r['seconds']:.0f} s, uptime {r['uptime'][0]} -> "
              f"{r['uptime'][1]}; {figures}")
    if args.tables:
        for rnd, label, loop, r in runs_log:
            if r is not None:
                print(f"\n### round {rnd}, {label}, {loop}\n\n{r['table']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
