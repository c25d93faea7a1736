"""``aiospark demo``: enrich ~100k rows from an HTTP service, then do it the way people do today.

Starts a service on 127.0.0.1 in a child process (tens of ms per call, with jitter), runs a real
local Spark job that calls it for every row with ``unordered_wait``, then runs a plain blocking
Python UDF (one ``urllib`` call at a time per task) on a sample of the same rows, and prints both
speeds and the speed-up -- and where the time went: the CPU seconds of the service, of Spark's
Python workers and JVM, and the latency inside the service against the latency the job saw. On a
small machine the service and the job share the CPUs, and the Little's-law bound (calls in flight
/ latency) is only reachable when neither needs much of them.

Example::

    figures = run_demo(rows=20_000, sample=100)   # prints as it goes; returns the measured figures
    figures["rows_per_s"], figures["cpu_bound_rows_per_s"]
"""
from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from ..core import AsyncFunction


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

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
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
             live: bool | None = None) -> dict[str, Any]:
    """Run the demo; returns the measured figures (also printed through ``out``).

    Example::

        run_demo(rows=20_000, sample=100, out=lambda line: None)["speedup"]   # e.g. 60.0
    """
    import os

    from pyspark.sql import functions as F

    from ..spark.metrics import Metrics
    from ..spark.session import local_session
    from ..spark.wait import unordered_wait
    from .demo_cpu import cpu_delta, cpu_snapshot
    from .demo_service import DemoService
    from .progress import Progress

    out(f"starting a service on 127.0.0.1 in its own process: {latency * 1000:.0f} ms +/- "
        f"{jitter * 1000:.0f} ms per call")
    with DemoService(latency, jitter) as service:
        out(f"starting local Spark (local[{tasks}]) ...")
        spark = local_session(f"local[{tasks}]", app_name="aiospark-demo")
        try:
            df = spark.range(0, rows, 1, tasks)
            enrich = HttpEnrich(service.url, connections=capacity)
            # warm the Python workers so both variants start equal
            unordered_wait(spark.range(0, tasks * 10, 1, tasks), enrich, "id LONG, name STRING, value LONG").count()

            out(f"\naiospark.unordered_wait: {rows:,} rows, {tasks} tasks x capacity {capacity} ...")
            metrics = Metrics("demo")
            enriched = unordered_wait(df, enrich, "id LONG, name STRING, value LONG", capacity=capacity,
                                      timeout=30, metrics=metrics)
            service.reset()
            cpu_before = cpu_snapshot(os.getpid(), service.pid)
            t0 = time.perf_counter()
            with Progress(metrics, live=live):
                result = enriched.collect()
            async_seconds = time.perf_counter() - t0
            cpu = cpu_delta(cpu_before, cpu_snapshot(os.getpid(), service.pid))
            served = service.stats()
            count = len(result)
            async_rate = count / async_seconds
            for row in result[:show]:
                out(f"  {row.asDict()}")
            out(f"  metrics: {metrics.total}")

            lookup = _blocking_lookup(service.url)
            blocking_udf = F.udf(lookup, "string")
            out(f"\nplain Python UDF, one blocking call at a time per task: {sample:,}-row sample ...")
            t0 = time.perf_counter()
            names = spark.range(0, sample, 1, tasks).select(blocking_udf("id").alias("name")).collect()
            if len(names) != sample or not all(n.name for n in names):
                raise RuntimeError(f"the blocking UDF returned {len(names)} rows for {sample}")
            blocking_seconds = time.perf_counter() - t0
            blocking_rate = sample / blocking_seconds
        finally:
            spark.stop()

    bound = tasks * capacity / latency if latency > 0 else float("inf")
    out("\n| variant                  |    rows | seconds |   rows/s |")
    out("|--------------------------|---------|---------|----------|")
    out(f"| aiospark unordered_wait  | {count:>7,} | {async_seconds:>7.1f} | {async_rate:>8,.0f} |")
    out(f"| blocking Python UDF      | {sample:>7,} | {blocking_seconds:>7.1f} | {blocking_rate:>8,.0f} |")
    out(f"\nspeed-up: {async_rate / blocking_rate:,.0f}x  (the service answered {served['requests']:,} calls "
        f"for {count:,} rows)")
    client_p50 = metrics.total.quantile(0.5)
    figures: dict[str, Any] = {
        "rows": count, "seconds": async_seconds, "rows_per_s": async_rate, "baseline_rows_per_s": blocking_rate,
        "speedup": async_rate / blocking_rate, "littles_law_bound": bound, "service_requests": served["requests"],
        "service_cpu_seconds": served["cpu_seconds"], "service_p50_ms": served["latency_p50_ms"],
        "client_p50_ms": None if client_p50 is None else client_p50 * 1000, "cpu_seconds": cpu}
    figures.update(explain(figures, tasks=tasks, capacity=capacity, latency=latency, out=out))
    return figures


def explain(f: dict[str, Any], *, tasks: int, capacity: int, latency: float, out: Any = print) -> dict[str, Any]:
    """Print where the time of the ``unordered_wait`` run went, from the figures :func:`run_demo` measured.

    ``f`` needs ``rows``, ``seconds``, ``rows_per_s``, ``littles_law_bound``, ``service_p50_ms``,
    ``client_p50_ms``, ``service_cpu_seconds`` and ``cpu_seconds`` (CPU seconds per group of
    :data:`aiospark.app.demo_cpu.GROUPS`, or None without ``/proc``). Returns ``cpu_bound_rows_per_s``
    (the rate the machine's CPUs allow at the CPU per row measured; None without ``/proc``) and
    ``verdict``: ``"cpu"`` (calls waited for a CPU), ``"latency"`` (calls took the service's
    latency, as the bound assumes) or ``"other"``.

    Example::

        explain(figures, tasks=2, capacity=200, latency=0.03)   # prints 4-6 lines
    """
    rows, seconds, rate, bound = max(f["rows"], 1), f["seconds"], f["rows_per_s"], f["littles_law_bound"]
    if latency > 0:
        out(f"\nwhere the time went -- Little's-law bound: {tasks} tasks x {capacity} in flight / "
            f"{latency * 1000:.0f} ms = {bound:,.0f} rows/s; this run: {rate:,.0f} ({rate / bound:.0%}).")
    else:  # no latency, no bound: only the CPU limits the rate
        out(f"\nwhere the time went -- a service with no latency: only CPU limits the rate ({rate:,.0f} rows/s).")
    service_p50, client_p50 = f["service_p50_ms"] or 0.0, f["client_p50_ms"] or 0.0
    out(f"  latency per call (p50): {service_p50:.1f} ms inside the service, {client_p50:.1f} ms as the "
        "Spark tasks saw it")
    cpu, cpu_bound, busy = f["cpu_seconds"], None, None
    if cpu is None:  # no /proc: the service's own count still says what it cost
        out(f"  CPU: the service used {f['service_cpu_seconds']:.1f} s ({f['service_cpu_seconds'] / rows * 1e3:.2f}"
            " ms per call); no /proc here to measure the rest")
    else:
        total = sum(cpu.values())
        busy = 1 - cpu["idle"] / total if total else 0.0
        cpus = total / seconds if seconds else 0.0
        out(f"  CPU seconds ({cpus:.0f} CPUs x {seconds:.1f} s = {total:.1f}): "
            + ", ".join(f"{name} {used:.1f}" for name, used in cpu.items()))
        used = cpu["service"] + cpu["python workers"] + cpu["spark jvm"] + cpu["driver"]
        if used > 0:
            cpu_bound = cpus / (used / rows)
            out(f"  CPU per row: {used / rows * 1e3:.2f} ms (service {cpu['service'] / rows * 1e3:.2f}, Spark's "
                f"Python workers {cpu['python workers'] / rows * 1e3:.2f}): {cpus:.0f} CPUs allow about "
                f"{cpu_bound:,.0f} rows/s; this run made {rate / cpu_bound:.0%} of that")
        if total and cpu["rest of the machine"] > 0.1 * total:
            out(f"  other processes on this machine took {cpu['rest of the machine'] / total:.0%} of the CPUs "
                "meanwhile")
    waited = client_p50 - service_p50
    if busy is not None and busy >= 0.8 and waited > 0.25 * latency * 1000:
        verdict = "cpu"
        out(f"=> CPU-bound, not latency-bound: the CPUs were {busy:.0%} busy and a call waited ~{waited:.0f} ms "
            "for one (in the task or in the service) on top of the service's latency. With the service on "
            "another machine or more cores, the job gets closer to the bound.")
    elif waited <= 0.25 * latency * 1000:
        verdict = "latency"
        out("=> latency-bound, as the bound assumes: calls took about the service's latency; the rest of "
            "the gap is the job's start and its last calls")
    else:
        verdict = "other"
        busy_text = "unmeasured" if busy is None else f"{busy:.0%} busy"
        out(f"=> a call waited ~{waited:.0f} ms beyond the service's latency; the CPUs were {busy_text}")
    return {"cpu_bound_rows_per_s": cpu_bound, "verdict": verdict}
