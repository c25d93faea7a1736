"""Adaptive concurrency (capacity="auto") against a service with a real concurrency limit.

Run:  python benchmarks/adaptive.py [--rows 4000] [--limit 40] [--latency 0.02]

The fault-injecting service (a separate process on 127.0.0.1) serves at most ``--limit`` requests
at once and answers 503 to the rest. Every variant retries 503s with exponential back-off, so all
rows get through; what differs is how long it takes and how hard the service was hammered. Fixed
capacities below the limit waste throughput, fixed capacities above it overload the service;
"auto" should find the limit by itself. One Spark task, so capacity is the whole concurrency.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import aiospark
from aiospark import AsyncFunction, Metrics, RetryStrategy
from aiospark.connectors import is_retryable
# Run as a file (`python benchmarks/x.py`), the repository root is not on sys.path; the test
# servers live in tests/support, so put the root there (`python -m benchmarks.x` needs nothing).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.support.service import FaultService, ServiceConfig


class Fetch(AsyncFunction):
    def __init__(self, url):
        self.url = url

    async def open(self):
        import aiohttp

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def async_invoke(self, row):
        async with self.session.get(f"{self.url}/item/{row['id']}") as response:
            if response.status in (429, 503) or response.status >= 500:
                raise Overloaded(response.status)
            return [{"id": row["id"]}]

    async def close(self):
        await self.session.close()


class Overloaded(Exception):
    retryable = True

    def __init__(self, status):
        super().__init__(f"HTTP {status}")
        self.status = status


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--capacities", default="10,40,100,400,auto")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    spark = aiospark.local_session("local[1]")
    retry = RetryStrategy.exponential_backoff(20, 0.01, 1.0, jitter=0.3, exception_predicate=is_retryable)
    results = []
    with FaultService(ServiceConfig(latency=args.latency, max_concurrency=args.limit, overload_status=503),
                      process=True) as service:
        fetch = Fetch(service.url)
        aiospark.unordered_wait(spark.range(0, 50, 1, 1), fetch, "id LONG", capacity=10).count()  # warm up
        for text in args.capacities.split(","):
            capacity = text if text == "auto" else int(text)
            service.reset_stats()
            metrics = Metrics(f"capacity={text}")
            df = aiospark.unordered_wait(spark.range(0, args.rows, 1, 1), fetch, "id LONG", capacity=capacity,
                                         retry=retry, timeout=60, metrics=metrics)
            t0 = time.perf_counter()
            assert df.count() == args.rows
            seconds = time.perf_counter() - t0
            stats = service.stats(keys=False)
            results.append((text, args.rows / seconds, stats["requests"], stats["overload_rejections"],
                            metrics.total.inflight_peak))
    spark.stop()
    bound = args.limit / args.latency
    print(f"command: python {' '.join(sys.argv)}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores; service: {args.limit} concurrent requests "
          f"max, {args.latency * 1000:.0f} ms each (bound {bound:,.0f} rows/s); {args.rows} rows, 1 task\n")
    print("| capacity | rows/s | of bound | requests | 503 rejections | peak in flight |")
    print("|---------:|-------:|---------:|---------:|---------------:|---------------:|")
    for text, rate, requests, rejected, peak in results:
        print(f"| {text:>8} | {rate:>6,.0f} | {rate / bound:>8.2f} | {requests:>8,} | {rejected:>14,} | {peak:>14,} |")


if __name__ == "__main__":
    main()
