"""Quick throughput check of the fault-injecting service (is it fast enough for a benchmark?).

Starts a :class:`~tests.support.service.FaultService` in a child process and
drives it from this process with a closed-loop aiohttp client (``concurrency``
requests always in flight on keep-alive connections)::

    python -m tests.support.service_load --seconds 5 --concurrency 200 --latency 0.02

It reports the client-observed rate and the service's CPU use: a
``server_cpu_utilization`` well below 1.0 means the service was not the
bottleneck (the client was), and ``server_requests_per_cpu_second`` is the
service's capacity per core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from aiospark.runtime.worker_loop import worker_loop

from .service import FaultService
from .service_config import ServiceConfig

__all__ = ["measure_throughput", "main"]


async def _drive(svc: FaultService, concurrency: int, seconds: float, warmup: float) -> dict[str, Any]:
    statuses: dict[int, int] = {}
    base = svc.url

    async def worker(session: aiohttp.ClientSession, wid: int, until: float, count: bool) -> None:
        n = 0
        while time.monotonic() < until:
            async with session.get(f"{base}/item/w{wid}-{n % 64}") as resp:
                await resp.read()
                if count:
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
            n += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        until = time.monotonic() + warmup
        await asyncio.gather(*(worker(session, i, until, False) for i in range(concurrency)))
        before = await asyncio.to_thread(svc.stats, keys=False)
        client_cpu0, t0 = time.process_time(), time.monotonic()
        until = t0 + seconds
        await asyncio.gather(*(worker(session, i, until, True) for i in range(concurrency)))
        elapsed = time.monotonic() - t0
        client_cpu = time.process_time() - client_cpu0
        after = await asyncio.to_thread(svc.stats, keys=False)
    responses = sum(statuses.values())
    served = after["requests"] - before["requests"]
    server_cpu = after["cpu_seconds"] - before["cpu_seconds"]
    return {
        "seconds": round(elapsed, 3),
        "concurrency": concurrency,
        "client_requests_per_second": round(responses / elapsed),
        "client_cpu_seconds": round(client_cpu, 3),
        "server_requests": served,
        "server_cpu_seconds": round(server_cpu, 3),
        "server_cpu_utilization": round(server_cpu / elapsed, 3),
        "server_requests_per_cpu_second": round(served / server_cpu) if server_cpu > 0 else None,
        "peak_in_flight": after["peak_in_flight"],
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
    }


def measure_throughput(config: ServiceConfig | None = None, *, concurrency: int = 200,
                       seconds: float = 5.0, warmup: float = 1.0) -> dict[str, Any]:
    """Run the load described in the module docstring and return its figures as a dict.

    Example::

        report = measure_throughput(ServiceConfig(latency=0.02), concurrency=200, seconds=3)
        assert report["server_cpu_utilization"] < 0.9   # the service kept up
    """
    with FaultService(config or ServiceConfig(), process=True) as svc:
        return worker_loop().submit(_drive(svc, concurrency, seconds, warmup)).result()  # the process's one loop


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.service_load", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.02)
    args = parser.parse_args(argv)
    report = measure_throughput(ServiceConfig(latency=args.latency), concurrency=args.concurrency,
                                seconds=args.seconds, warmup=args.warmup)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
