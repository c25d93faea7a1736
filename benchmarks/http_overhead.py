#!/usr/bin/env python3
"""Where one Spark task's HTTP rows/s go: the worker's loop and operator, without Spark, paired.

    python benchmarks/http_overhead.py                    # 20k rows, 8 interleaved rounds, uvloop
    python benchmarks/http_overhead.py --spin-us 8 --rounds 12

The Python worker of a ``lookup_join`` task runs its calls on aiospark's worker loop through
``run_partition`` and the operator. This script drives exactly that (no JVM, no Arrow) against nginx
on 127.0.0.1, 100 requests in flight, and compares, round by round in alternating order:

* ``bare pyreqwest``: 100 coroutines on the worker loop, each GET + JSON decode in a loop;
* ``operator + pyreqwest``: the same request as an ``async def`` through ``run_partition``;
* ``... + spin``: that, plus ``--spin-us`` of pure Python per row on the loop thread -- what a
  microsecond of per-row Python costs when the HTTP client hands every response over from its own
  thread under the GIL;
* ``lookup_join`` function: what ``lookup_join`` runs per row (``Lookuper`` + ``HttpLookup`` on
  pyreqwest + the join).

Ratios are medians of per-round ratios (each round runs every variant once, adjacent in time), as
this machine's speed drifts within minutes (docs/benchmarks.md, "HTTP transport").
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # tests/support holds the nginx fixture

CONCURRENCY = 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--spin-us", type=float, default=8.0, help="pure Python per row in the spin variant")
    ap.add_argument("--loop", default=os.environ.get("AIOSPARK_LOOP", "uvloop"), choices=("asyncio", "uvloop"))
    args = ap.parse_args()
    os.environ["AIOSPARK_LOOP"] = args.loop  # read when the worker loop starts

    from pyreqwest.client import ClientBuilder

    from aiospark.connectors import HttpLookup
    from aiospark.runtime.bridge import run_partition
    from aiospark.runtime.worker_loop import WorkerLoop
    from aiospark.spark.lookup_join import _LookupJoin  # what lookup_join runs per row
    from aiospark.spark.options import CallOptions
    from benchmarks.http_transport import _window  # c coroutines sending n requests, rows/s
    from tests.support.nginx import NginxServer

    n, c = args.rows, CONCURRENCY
    spin_n = _calibrate(args.spin_us)
    wl = WorkerLoop()
    options: dict[int, CallOptions] = {}

    def through(function) -> float:
        """rows/s of ``function`` over ``n`` rows through run_partition and the operator."""
        opts = options.get(id(function))
        if opts is None:
            opts = options[id(function)] = CallOptions.create(function, ordered=False, timeout=60, capacity=c,
                                                              retry=None, name="bench")

        async def make(output):
            return await opts.make_operator(wl, output)

        chunks = ([{"id": i} for i in range(s, min(s + 10_000, n))] for s in range(0, n, 10_000))
        t0 = time.perf_counter()
        got = sum(len(b) for b in run_partition(chunks, make, capacity=c, loop=wl))
        if got != n:
            raise SystemExit(f"{got} rows out of {n}")
        return n / (time.perf_counter() - t0)

    with NginxServer(workers=1) as srv:
        base = srv.url("").rstrip("/")
        client = wl.submit(_build(ClientBuilder, c)).result()

        async def get(i: int) -> None:
            await (await client.get(f"{base}/item/{i}").build().send()).json()

        def bare() -> float:
            return wl.submit(_window(get, n, c)).result()

        async def call(row: dict) -> dict:
            await get(row["id"])
            return row

        async def call_and_spin(row: dict) -> dict:
            _spin(spin_n)
            await get(row["id"])
            return row

        join = _LookupJoin(HttpLookup(base + "/item/{id}", "name STRING, price DOUBLE", transport="pyreqwest",
                                      max_connections=c), ["id"], ["name", "price"], "left", None, True,
                           names=["id", "name", "price"])
        variants = {
            "bare pyreqwest": bare,
            "operator + pyreqwest": lambda: through(call),
            f"operator + pyreqwest + {args.spin_us:g} us Python": lambda: through(call_and_spin),
            "lookup_join function (HttpLookup)": lambda: through(join),
        }
        for run in variants.values():  # warm-up: pools, open()
            run()
        rates: dict[str, list[float]] = {k: [] for k in variants}
        names = list(variants)
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for name in names if rnd % 2 == 0 else names[::-1]:
                rates[name].append(variants[name]())
        wl.submit(client.close()).result()
    wl.shutdown()

    print(f"\n$ python benchmarks/http_overhead.py {' '.join(sys.argv[1:])}")
    print(f"worker loop {args.loop}, nginx 1 worker on 127.0.0.1, {c} in flight, {n} rows, {args.rounds} rounds\n")
    print(f"| {'variant':<44} | {'rows/s (median)':>15} | {'vs bare (paired)':>16} |")
    print(f"|{'-' * 46}|{'-' * 17}|{'-' * 18}|")
    ref = rates["bare pyreqwest"]
    for name, rs in rates.items():
        paired = statistics.median(r / b for r, b in zip(rs, ref))
        print(f"| {name:<44} | {statistics.median(rs):>15.0f} | {paired:>15.2f}x |")
    plain, spun = rates["operator + pyreqwest"], rates[f"operator + pyreqwest + {args.spin_us:g} us Python"]
    extra_us = statistics.median(1e6 / s - 1e6 / p for s, p in zip(spun, plain))
    print(f"\n{args.spin_us:g} us of Python per row cost {extra_us:.1f} us of wall time per row (paired median)")


async def _build(builder, c: int):
    return builder().max_connections(c).build()


def _spin(k: int) -> int:
    x = 0
    for i in range(k):
        x += i
    return x


def _calibrate(us: float) -> int:
    """Iterations of ``_spin`` that take about ``us`` microseconds here."""
    k = 200_000
    t0 = time.perf_counter()
    _spin(k)
    return max(0, round(us / ((time.perf_counter() - t0) * 1e6 / k)))


if __name__ == "__main__":
    main()
