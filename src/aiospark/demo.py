"""``aiospark demo``: enrich ~100k rows from an HTTP service, then do it the way people do today.

Starts a service on 127.0.0.1 in a child process (tens of ms per call, with jitter), runs a real
local Spark job that calls it for every row with ``unordered_wait``, then runs a plain blocking
Python UDF (one ``urllib`` call at a time per task) on a sample of the same rows, and prints both
speeds and the speed-up.
"""
from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, Dict, List, Optional

from .core import AsyncFunction


class HttpEnrich(AsyncFunction):
    """Looks each row's ``id`` up at ``{url}/item/{id}``; one aiohttp session per worker."""

    def __init__(self, url: str, connections: int = 1000):
        self.url = url
        self.connections = connections
        self.session: Any = None

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.connections, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=30))

    async def async_invoke(self, row: Dict[str, Any]) -> List[Dict[str, Any]]:
        async with self.session.get(f"{self.url}/item/{row['id']}") as response:
            response.raise_for_status()
            item = await response.json()
        return [{"id": row["id"], "name": item["name"], "value": item["value"]}]

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def _blocking_lookup(url: str):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def lookup(i):  # no type hints: PySpark would try to infer a pandas UDF from them
        with opener.open(f"{url}/item/{i}", timeout=30) as response:
            return json.loads(response.read())["name"]

    return lookup


def run_demo(rows: int = 100_000, sample: int = 400, latency: float = 0.03, jitter: float = 0.01,
             capacity: int = 200, tasks: int = 2, show: int = 5, out: Any = print,
             live: Optional[bool] = None) -> Dict[str, float]:
    """Run the demo; returns the measured figures (also printed through ``out``)."""
    from pyspark.sql import functions as F

    from .progress import Progress
    from .spark.metrics import Metrics
    from .spark.session import local_session
    from .spark.wait import unordered_wait
    from .testing.service import FaultService, ServiceConfig

    config = ServiceConfig(latency=latency, latency_dist="uniform", jitter=jitter, seed=1)
    out(f"starting a service on 127.0.0.1: {latency * 1000:.0f} ms +/- {jitter * 1000:.0f} ms per call")
    with FaultService(config, process=True) as service:
        out(f"starting local Spark (local[{tasks}]) ...")
        spark = local_session(f"local[{tasks}]", app_name="aiospark-demo")
        try:
            df = spark.range(0, rows, 1, tasks)
            enrich = HttpEnrich(service.url, connections=capacity)
            # warm the Python workers so both variants start equal
            unordered_wait(spark.range(0, tasks * 10, 1, tasks), enrich, "id LONG, name STRING, value LONG").count()
            service.reset_stats()

            out(f"\naiospark.unordered_wait: {rows:,} rows, {tasks} tasks x capacity {capacity} ...")
            metrics = Metrics("demo")
            enriched = unordered_wait(df, enrich, "id LONG, name STRING, value LONG", capacity=capacity,
                                      timeout=30, metrics=metrics)
            t0 = time.perf_counter()
            with Progress(metrics, live=live):
                result = enriched.collect()
            async_seconds = time.perf_counter() - t0
            count = len(result)
            async_rate = count / async_seconds
            for row in result[:show]:
                out(f"  {row.asDict()}")
            out(f"  metrics: {metrics.total}")
            requests = service.stats()["requests"]

            lookup = _blocking_lookup(service.url)
            blocking_udf = F.udf(lookup, "string")
            out(f"\nplain Python UDF, one blocking call at a time per task: {sample:,}-row sample ...")
            t0 = time.perf_counter()
            names = spark.range(0, sample, 1, tasks).select(blocking_udf("id").alias("name")).collect()
            assert len(names) == sample and all(n.name for n in names)
            blocking_seconds = time.perf_counter() - t0
            blocking_rate = sample / blocking_seconds
        finally:
            spark.stop()

    bound = tasks * capacity / latency
    out("\n| variant                  |    rows | seconds |   rows/s |")
    out("|--------------------------|---------|---------|----------|")
    out(f"| aiospark unordered_wait  | {count:>7,} | {async_seconds:>7.1f} | {async_rate:>8,.0f} |")
    out(f"| blocking Python UDF      | {sample:>7,} | {blocking_seconds:>7.1f} | {blocking_rate:>8,.0f} |")
    out(f"\nspeed-up: {async_rate / blocking_rate:,.0f}x  (service saw {requests:,} calls for {count:,} rows; "
        f"Little's-law bound {bound:,.0f} rows/s)")
    return {"rows": count, "seconds": async_seconds, "rows_per_s": async_rate,
            "baseline_rows_per_s": blocking_rate, "speedup": async_rate / blocking_rate}
