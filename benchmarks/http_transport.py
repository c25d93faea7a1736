#!/usr/bin/env python3
"""HTTP clients bare and through aiospark, against nginx on 127.0.0.1 (issue: HTTP transport).

    python benchmarks/http_transport.py                       # the table (~15 min on 2 cores)
    python benchmarks/http_transport.py --rounds 3            # medians of 3 rounds
    python benchmarks/http_transport.py --clients aiohttp,httpx --rows 4000   # httpx too (slow)

nginx answers a small JSON body (``tests/support/nginx.py``, one worker process) about ten times
faster than any Python client asks, so these rates are the clients'. Every row is one GET of
``/item/<n>`` with ``--concurrency`` requests in flight per process or Spark task, n distinct (no
cache, no coalescing), the JSON body decoded.

* bare: plain asyncio (no Spark) with each client: aiohttp, pyreqwest, aiospark's ``HttpClient``
  (and httpx with ``--clients``); one process, or two at once (rates summed); on each loop.
* spark: ``lookup_join`` with ``HttpLookup(transport=...)`` and ``unordered_wait`` with an
  ``async def`` on aiohttp or on ``http_client()``, one Spark task (one partition) and two
  (``local[2]``), the worker loop set by ``AIOSPARK_LOOP``. Rate = rows / wall time of the action.

The target ratio (issue 19) is ``lookup_join`` + ``HttpLookup`` in one task over bare asyncio +
aiohttp in one process on asyncio's loop. This 2-core machine's speed drifts by 20-40 % within
minutes, so the pair is measured adjacent in time: bare aiohttp runs right before and right after
that Spark job (in the same Spark process, its JVM idle), and the job's rate is divided by the mean
of the two. The table prints that ratio per round and per loop.
nginx is needed: when it is missing and we are root, the set-up runs ``apt-get install -y nginx-light``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # tests/support holds the nginx fixture

BARE_CLIENTS = ("aiohttp", "pyreqwest", "HttpClient")  # and "httpx" on request
TARGET = "lookup_join[pyreqwest]"  # in one task, against bare aiohttp on asyncio's loop
SPARK_VARIANTS = ("lookup_join[aiohttp]", "lookup_join[pyreqwest]", "unordered_wait[aiohttp]",
                  "unordered_wait[HttpClient]")


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        import uvloop
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


async def _window(send, rows: int, concurrency: int) -> float:
    """``send(i)`` for i in range(rows), ``concurrency`` at a time; returns rows/s."""
    it = iter(range(rows))

    async def worker() -> None:
        for i in it:
            await send(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return rows / (time.perf_counter() - t0)


async def bare(client: str, base: str, rows: int, concurrency: int) -> float:
    """One process, plain asyncio, ``client`` GETting and decoding ``rows`` items."""
    if client == "aiohttp":
        import aiohttp
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:
            async def send(i: int) -> None:
                async with s.get(f"{base}/item/{i}") as r:
                    json.loads(await r.read())
            await _window(send, min(rows, 1000), concurrency)  # warm the pool
            return await _window(send, rows, concurrency)
    if client == "httpx":
        import httpx
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits) as s:
            async def send(i: int) -> None:
                (await s.get(f"{base}/item/{i}")).json()
            await _window(send, min(rows, 1000), concurrency)
            return await _window(send, rows, concurrency)
    if client == "pyreqwest":
        from pyreqwest.client import ClientBuilder
        async with ClientBuilder().max_connections(concurrency).build() as s:
            async def send(i: int) -> None:
                await (await s.get(f"{base}/item/{i}").build().send()).json()
            await _window(send, min(rows, 1000), concurrency)
            return await _window(send, rows, concurrency)
    from aiospark.connectors.http import HttpClient
    async with HttpClient(max_connections=concurrency) as c:
        async def send(i: int) -> None:
            (await c.get(f"{base}/item/{i}")).json()
        await _window(send, min(rows, 1000), concurrency)
        return await _window(send, rows, concurrency)


def child_bare(args: argparse.Namespace) -> None:
    loop = new_loop(args.loop)
    try:
        print(json.dumps(loop.run_until_complete(bare(args.client, args.base, args.rows, args.concurrency))),
              flush=True)
    finally:
        loop.close()
    # pyreqwest 0.15 can abort while the interpreter finalizes (its Tokio thread outlives the
    # client); the rate is out, so leave as Spark's workers do, without finalizing
    os._exit(0)


def run_bare(client: str, loop: str, procs: int, args: argparse.Namespace) -> float | None:
    cmd = [sys.executable, __file__, "--child-bare", "--client", client, "--loop", loop, "--base",
           args.base, "--rows", str(args.rows // procs), "--concurrency", str(args.concurrency)]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(procs)]
    rates = []
    for p in ps:
        out, err = p.communicate()
        if p.returncode:
            print(f"  bare {client} {loop}: failed: {err.strip().splitlines()[-1:]}", file=sys.stderr)
            return None
        rates.append(float(out.strip().splitlines()[-1]))
    return sum(rates)


def spark_job(spark, variant: str, base: str, c: int, tasks: int, rows: int) -> object:
    """The DataFrame of one Spark variant (``lookup_join[<transport>]``, ``unordered_wait[aiohttp]`` or
    ``unordered_wait[HttpClient]``) GETting ``rows`` items of ``base`` in ``tasks`` partitions, ``c`` in flight."""
    import aiospark
    from aiospark.connectors import HttpLookup
    from aiospark.connectors.http import http_client

    schema = "name STRING, price DOUBLE"

    async def with_aiohttp(row: dict) -> dict:
        import aiohttp
        s = globals().get("_SESSION")
        if s is None:  # one session per worker process, like a user's module-level client
            s = globals()["_SESSION"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c))
        async with s.get(f"{base}/item/{row['id']}") as r:
            d = json.loads(await r.read())
        return {"id": row["id"], "name": d["name"], "price": d["price"]}

    async def with_client(row: dict) -> dict:
        d = (await http_client(max_connections=c).get(f"{base}/item/{row['id']}")).json()
        return {"id": row["id"], "name": d["name"], "price": d["price"]}

    df = spark.range(0, rows, numPartitions=tasks)
    if variant.startswith("lookup_join"):
        src = HttpLookup(base + "/item/{id}", schema, transport=variant.split("[")[1][:-1], max_connections=c)
        return aiospark.lookup_join(df, src, on="id", capacity=c)
    fn = with_aiohttp if "aiohttp" in variant else with_client
    return aiospark.unordered_wait(df, fn, "id BIGINT, " + schema, capacity=c)


def child_spark(args: argparse.Namespace) -> None:
    """In a fresh process (the worker loop is chosen when the Python workers start)."""
    import aiospark

    spark = aiospark.local_session("local[2]", conf={"spark.executorEnv.AIOSPARK_LOOP": args.loop})

    def job(variant: str, tasks: int, rows: int) -> object:
        return spark_job(spark, variant, args.base, args.concurrency, tasks, rows)

    for variant in args.variants.split(","):  # warm-up: workers, JIT, pools
        for tasks in (1, 2):
            job(variant, tasks, 2000 * tasks).write.format("noop").mode("overwrite").save()
    for tasks in map(int, args.tasks.split(",")):
        for variant in args.variants.split(","):
            target = (variant, tasks) == (TARGET, 1)
            before = run_bare("aiohttp", "asyncio", 1, args) if target else None
            t0 = time.perf_counter()
            job(variant, tasks, args.rows).write.format("noop").mode("overwrite").save()
            rate = args.rows / (time.perf_counter() - t0)
            print(json.dumps([variant, tasks, rate]), flush=True)
            after = run_bare("aiohttp", "asyncio", 1, args) if target else None
            if before and after:
                print(json.dumps(["adjacent", before, rate, after]), flush=True)
    spark.stop()


def run_spark(loop: str, args: argparse.Namespace) -> dict:
    """The Spark variants on ``loop`` in a fresh process: {(variant, tasks): rows/s}, and under
    "adjacent" (bare aiohttp before, the target's rows/s, bare aiohttp after) when the target ran."""
    cmd = [sys.executable, __file__, "--child-spark", "--loop", loop, "--base", args.base, "--rows",
           str(args.rows), "--concurrency", str(args.concurrency), "--tasks", args.tasks,
           "--variants", args.variants]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "AIOSPARK_LOOP": loop})
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith('["adjacent"'):
            _, before, rate, after = json.loads(line)
            out["adjacent"] = (before, rate, after)
        elif line.startswith("["):
            v, t, r = json.loads(line)
            out[(v, t)] = r
    if p.returncode:
        print(f"  spark {loop}: failed: {p.stderr.strip().splitlines()[-3:]}", file=sys.stderr)
    return out


def ensure_nginx() -> None:
    from tests.support.nginx import nginx_binary
    if nginx_binary():
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "nginx-light"], check=False)
    if not nginx_binary():
        sys.exit("nginx is needed: apt-get install nginx-light (or set $NGINX to its path)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=40000)  # a Spark job's start is ~0.3 s of it
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--loops", default="asyncio,uvloop")
    ap.add_argument("--tasks", default="1,2")
    ap.add_argument("--clients", default=",".join(BARE_CLIENTS))
    ap.add_argument("--variants", default=",".join(SPARK_VARIANTS))
    ap.add_argument("--child-bare", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-spark", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--loop", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_bare:
        return child_bare(args)
    if args.child_spark:
        return child_spark(args)

    command = "python benchmarks/http_transport.py " + " ".join(sys.argv[1:])
    ensure_nginx()
    from tests.support.nginx import NginxServer
    loops = args.loops.split(",")
    procs = sorted({min(int(t), 2) for t in args.tasks.split(",")})
    results: dict[tuple, list[float]] = {}
    ratios: list[tuple[str, float]] = []
    with NginxServer(workers=1) as srv:
        args.base = srv.url("").rstrip("/")
        for rnd in range(args.rounds):
            print(f"round {rnd + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for loop in loops:
                for client in args.clients.split(","):
                    for n in procs:
                        r = run_bare(client, loop, n, args)
                        if r is not None:
                            results.setdefault(("bare", client, loop, n), []).append(r)
                for key, r in run_spark(loop, args).items():
                    if key == "adjacent":
                        before, rate, after = r
                        ratios.append((loop, rate / ((before + after) / 2), before, after))
                    else:
                        results.setdefault(("spark", key[0], loop, key[1]), []).append(r)
    adjacent = [b for _, _, before, after in ratios for b in (before, after)]
    ref = statistics.median(results.get(("bare", "aiohttp", "asyncio", 1)) or adjacent or [float("nan")])
    print(f"\n$ {command}")
    print(f"nginx 1 worker on 127.0.0.1, {args.concurrency} requests in flight per process/task, "
          f"{args.rows} rows, median of {args.rounds} round(s); x = / bare aiohttp on asyncio, 1 process\n")
    print(f"| {'what':<34} | {'loop':<7} | {'procs/tasks':>11} | {'rows/s':>8} | {'x':>5} |")
    print(f"|{'-' * 36}|{'-' * 9}|{'-' * 13}|{'-' * 10}|{'-' * 7}|")
    for (kind, what, loop, n), rs in results.items():
        m = statistics.median(rs)
        label = f"bare {what}" if kind == "bare" else what
        print(f"| {label:<34} | {loop:<7} | {n:>11} | {m:>8.0f} | {m / ref:>5.2f} |")
    print()
    for loop in loops:
        mine = [(r, b, a) for lp, r, b, a in ratios if lp == loop]
        if mine:
            rounds = ", ".join(f"{r:.2f}x ({b:.0f}/s, {a:.0f}/s)" for r, b, a in mine)
            print(f"target (>= 2.0x): {TARGET} 1 task on {loop} / mean of bare aiohttp (asyncio, 1 process) run "
                  f"right before and after it: median {statistics.median(r for r, _, _ in mine):.2f}x; "
                  f"per round (bare aiohttp before, after): {rounds}")


if __name__ == "__main__":
    main()
