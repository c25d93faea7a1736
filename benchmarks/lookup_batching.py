#!/usr/bin/env python3
"""Lookup throughput: batched vs one-key-per-call, and a warm 90%-hit cache vs no cache.

Runs against a real redis-server (started on 127.0.0.1 in a temp dir) and a local
aiohttp endpoint that takes 5 ms per request (in a subprocess), with a fixed number
of lookups in flight, like the Spark operator's async capacity (256, 600 and 1000 by default:
batches of 100 need several batches in flight, and concurrent lookups of hot keys coalesce more
as concurrency grows, which lifts the uncached baseline).

    python3 benchmarks/lookup_batching.py                     # full run (~6 min)
    python3 benchmarks/lookup_batching.py --concurrency 600   # one level
    python3 benchmarks/lookup_batching.py --quick             # smaller counts
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time

from aiospark.connectors import HttpLookup, RedisLookup
from aiospark.lookup import LookupCache, Lookuper

# Run as a file (`python benchmarks/x.py`), the repository root is not on sys.path; the test
# servers live in tests/support, so put the root there (`python -m benchmarks.x` needs nothing).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.support.servers import RedisServer

HTTP_SERVER = r"""
import asyncio, json, sys
from aiohttp import web
DELAY = float(sys.argv[1])
async def item(request):
    await asyncio.sleep(DELAY)
    k = request.match_info["id"]
    return web.json_response({"id": k, "v": int(k)}) if int(k) < 1_000_000 else web.Response(status=404)
async def batch(request):
    body = await request.json()
    await asyncio.sleep(DELAY)
    return web.json_response({"results": {str(k): {"id": str(k), "v": int(k)} for k in body["keys"]}})
async def main():
    app = web.Application()
    app.router.add_get("/item/{id}", item)
    app.router.add_post("/batch", batch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


async def drive(lookuper: Lookuper, keys: list, concurrency: int) -> tuple[float, dict]:
    """Run all ``keys`` through ``lookuper`` with ``concurrency`` lookups in flight."""
    it = iter(keys)

    async def worker() -> None:
        for k in it:
            await lookuper.lookup((k,))

    async with lookuper:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        return elapsed, lookuper.stats()


async def warm_then_drive(lookuper: Lookuper, warm: list, keys: list, concurrency: int) -> tuple[float, dict]:
    async with lookuper:
        await asyncio.gather(*(lookuper.lookup((k,)) for k in warm))
        base = lookuper.stats()
        it = iter(keys)

        async def worker() -> None:
            for k in it:
                await lookuper.lookup((k,))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        stats = lookuper.stats()
        return elapsed, {k: stats[k] - base.get(k, 0) for k in stats}


def hot_cold_keys(n: int, hot: int, hit_rate: float, cold_start: int, seed: int = 7) -> list[int]:
    rnd = random.Random(seed)
    cold = iter(range(cold_start, cold_start + n))
    return [rnd.randrange(hot) if rnd.random() < hit_rate else next(cold) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts")
    ap.add_argument("--concurrency", default="256,600,1000",
                    help="lookups in flight, or a comma list run one after the other (default 256,600,1000)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per scenario, best kept (default 2)")
    args = ap.parse_args()
    n_redis = 10_000 if args.quick else 50_000
    n_http = 3_000 if args.quick else 30_000
    n_cache = 20_000 if args.quick else 50_000
    try:
        levels = [int(x) for x in str(args.concurrency).split(",")]
        if min(levels) < 1:
            raise ValueError
    except ValueError:
        ap.error(f"--concurrency takes ints >= 1 separated by commas, got {args.concurrency!r}")
    rows: list[tuple] = []

    def best(make_coro) -> tuple[float, dict]:
        """Run a scenario ``--repeat`` times (fresh Lookuper each time); keep the fastest."""
        return min((asyncio.run(make_coro()) for _ in range(max(1, args.repeat))), key=lambda r: r[0])

    def record(name: str, n: int, elapsed: float, stats: dict, base: float | None = None) -> float:
        rate = n / elapsed
        rows.append((name, f"{c:,}", n, stats.get("source_calls", 0), elapsed, rate,
                     f"{rate / base:.1f}x" if base else "1.0x"))
        print(f"  {name}: {rate:,.0f} lookups/s", file=sys.stderr, flush=True)
        return rate

    with RedisServer() as redis_srv:
        client = redis_srv.client()
        pipe = client.pipeline(transaction=False)
        for i in range(max(n_redis, n_cache)):
            pipe.set(f"bench:{i}", json.dumps({"id": str(i), "v": i}))
        pipe.execute()
        client.close()

        def redis_source() -> RedisLookup:
            return RedisLookup("bench:{id}", "id STRING, v BIGINT", url=redis_srv.url, kind="json",
                               max_connections=64, password_env=None)

        for c in levels:
            keys = list(range(n_redis))
            random.Random(1).shuffle(keys)
            e, s = best(lambda: drive(Lookuper(redis_source(), batch=False), keys, c))
            base = record("redis  GET per key (no batch)", n_redis, e, s)
            e, s = best(lambda: drive(Lookuper(redis_source(), batch=True, max_batch_size=100), keys, c))
            record("redis  MGET batches of <=100", n_redis, e, s, base)

            hot = 1_000
            stream = hot_cold_keys(n_cache, hot, 0.9, cold_start=hot)
            e, s = best(lambda: warm_then_drive(Lookuper(redis_source(), batch=False), [], stream, c))
            base = record("redis  no cache, no batch (90%-hit stream)", n_cache, e, s)
            e, s = best(lambda: warm_then_drive(
                Lookuper(redis_source(), cache=LookupCache(max_rows=50_000), batch=False),
                list(range(hot)), stream, c))
            hit = s["cache_hits"] / max(1, s["cache_hits"] + s["cache_misses"])
            record(f"redis  warm cache ({hit:.0%} hits), no batch", n_cache, e, s, base)
            e, s = best(lambda: warm_then_drive(Lookuper(redis_source(), batch=True), [], stream, c))
            record("redis  no cache, batched", n_cache, e, s, base)
            e, s = best(lambda: warm_then_drive(
                Lookuper(redis_source(), cache=LookupCache(max_rows=50_000), batch=True),
                list(range(hot)), stream, c))
            record("redis  warm cache + batched", n_cache, e, s, base)

    proc = subprocess.Popen([sys.executable, "-c", HTTP_SERVER, "0.005"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        url = f"http://127.0.0.1:{port}"

        def http_source() -> HttpLookup:
            return HttpLookup(url + "/item/{id}", "id STRING, v BIGINT", batch_url=url + "/batch",
                              max_connections=100)

        for c in levels:
            keys = list(range(n_http))
            e, s = best(lambda: drive(Lookuper(http_source(), batch=False), keys, c))
            base = record("http5ms GET per key (no batch)", n_http, e, s)
            keys = list(range(n_http, 2 * n_http))
            e, s = best(lambda: drive(Lookuper(http_source(), batch=True, max_batch_size=100), keys, c))
            record("http5ms POST batches of <=100", n_http, e, s, base)
            stream = hot_cold_keys(n_http, 500, 0.9, cold_start=3 * n_http)
            e, s = best(lambda: warm_then_drive(Lookuper(http_source(), batch=False), [], stream, c))
            base = record("http5ms no cache, no batch (90%-hit stream)", n_http, e, s)
            e, s = best(lambda: warm_then_drive(
                Lookuper(http_source(), cache=LookupCache(max_rows=50_000), batch=False),
                list(range(500)), stream, c))
            record("http5ms warm cache (90% hits), no batch", n_http, e, s, base)
    finally:
        proc.terminate()
        proc.wait(10)

    print(f"\n$ python3 benchmarks/lookup_batching.py{' --quick' if args.quick else ''}"
          f"{'' if args.concurrency == '256,600,1000' else f' --concurrency {args.concurrency}'}")
    print(f"({os.cpu_count()} CPUs, Python {sys.version.split()[0]}; 'vs baseline': the no-batch, no-cache "
          "row above it at the same number in flight)\n")
    head = ("scenario", "in flight", "lookups", "source calls", "seconds", "lookups/s", "vs baseline")
    table = [head] + [(name, inflight, f"{n:,}", f"{calls:,}", f"{sec:.2f}", f"{rate:,.0f}", speed)
                      for name, inflight, n, calls, sec, rate, speed in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for i, r in enumerate(table):
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("-|-".join("-" * w for w in widths))

if __name__ == "__main__":
    main()
