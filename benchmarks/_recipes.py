"""Worker-side code of ``benchmarks.compare``: the call every variant makes, and the recipes.

This module is imported *by reference* on the Spark Python workers (``compare`` puts the repository
root on their ``PYTHONPATH``), so module globals here (a lazily created aiohttp session, thread-local
keep-alive connections) really live once per worker process, as they would in a user's module.

The call: "look up row ``id`` and return its name" through one of three transports:

* ``http``  -- ``GET {base_url}/item/{id}`` on the FaultService (real HTTP over loopback),
  parse the JSON, return ``["name"]`` (= ``"item-<id>"``);
* ``sleep`` -- ``await asyncio.sleep(latency)`` (async variants) or ``time.sleep(latency)``
  (thread / naive variants), then return ``"item-<id>"``: the framework's own overhead only;
* ``noop``  -- return ``"item-<id>"`` at once (the async function never suspends).

Per-row latencies of the ``sleep`` transport follow the scenario (fixed, lognormal, rare slow calls)
and are a deterministic function of the id, so every variant sees the same latencies.
"""
from __future__ import annotations

import asyncio
import http.client
import importlib
import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import aiospark

# ----------------------------------------------------------------------------------------------- transport


@dataclass(frozen=True)
class Transport:
    kind: str                      # "http" | "sleep" | "noop"
    base_url: str = ""
    latency: float = 0.02          # median for "lognormal"
    dist: str = "fixed"            # "fixed" | "lognormal"
    sigma: float = 1.0
    slow_fraction: float = 0.0
    slow_latency: float = 2.0
    seed: int = 1

    @property
    def host_port(self):
        hostport = self.base_url.split("://", 1)[1]
        host, port = hostport.rsplit(":", 1)
        return host, int(port)


_TABLE_SIZE = 1 << 16
_tables: dict[Transport, list[float]] = {}


def _latency_table(t: Transport) -> list[float]:
    """65,536 latencies drawn once per transport (seeded, numpy: ~1 ms): row ``id`` sleeps ``table[mix(id)]``."""
    table = _tables.get(t)
    if table is None:
        import numpy as np

        rng = np.random.default_rng(t.seed)
        if t.dist == "lognormal":
            values = t.latency * np.exp(t.sigma * rng.standard_normal(_TABLE_SIZE))
        else:
            values = np.full(_TABLE_SIZE, t.latency)
        if t.slow_fraction:
            values[rng.random(_TABLE_SIZE) < t.slow_fraction] = t.slow_latency
        table = _tables[t] = values.tolist()
    return table


def latency_for(t: Transport, key: int) -> float:
    if t.dist == "fixed" and not t.slow_fraction:
        return t.latency
    return _latency_table(t)[((key * 2654435761) >> 7) & (_TABLE_SIZE - 1)]


def name_of(key: int) -> str:
    return f"item-{key}"


# ------------------------------------------------------------------------------------------- sync calls
_local = threading.local()


def _keepalive_get(t: Transport, key: int) -> str:
    """GET /item/{key} on this thread's own keep-alive connection (http.client)."""
    conn = getattr(_local, "conn", None)
    if conn is None:
        host, port = t.host_port
        conn = _local.conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("GET", f"/item/{key}")
        resp = conn.getresponse()
        body = resp.read()
    except (http.client.HTTPException, OSError):
        conn.close()  # stale keep-alive connection: reconnect once
        conn.request("GET", f"/item/{key}")
        resp = conn.getresponse()
        body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET /item/{key} -> {resp.status}")
    return json.loads(body)["name"]


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def sync_lookup(t: Transport, key: int, keepalive: bool = True) -> str:
    if t.kind == "http":
        if keepalive:
            return _keepalive_get(t, key)
        with _NO_PROXY.open(f"{t.base_url}/item/{key}", timeout=60) as resp:  # a new connection per call
            return json.loads(resp.read())["name"]
    if t.kind == "sleep":
        time.sleep(latency_for(t, key))
    return name_of(key)


# ------------------------------------------------------------------------------------------ async calls
async def async_lookup(t: Transport, session: Any, key: int) -> str:
    if t.kind == "http":
        async with session.get(f"{t.base_url}/item/{key}") as resp:
            resp.raise_for_status()
            return (await resp.json())["name"]
    if t.kind == "sleep":
        await asyncio.sleep(latency_for(t, key))
    return name_of(key)


def new_session(t: Transport, capacity: int) -> Any:
    """An aiohttp session with ``capacity`` pooled connections (``None`` when no HTTP is made)."""
    if t.kind != "http":
        return None
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=capacity),
                                 timeout=aiohttp.ClientTimeout(total=120))


# -------------------------------------------------------------------------------- 1. naive Python UDF
class NaiveLookup:
    """A plain ``@udf``: one blocking call per row, a new urllib connection each time."""

    def __init__(self, t: Transport):
        self.t = t
        self.__name__ = "naive_lookup"

    def __call__(self, key: int) -> str:
        return sync_lookup(self.t, key, keepalive=False)


# ------------------------------------------------- 4. Spark's Arrow UDF thread pool (concurrency.level)
class SyncLookup:
    """The blocking call for ``udf(..., useArrow=True)`` + ``pythonUDF.arrow.concurrency.level``."""

    def __init__(self, t: Transport):
        self.t = t
        self.__name__ = "sync_lookup"

    def __call__(self, key: int) -> str:
        return sync_lookup(self.t, key, keepalive=True)


# ------------------------------------------------------------------------- 2. thread pool mapInPandas
class ThreadPoolRecipe:
    """``mapInPandas`` + ``ThreadPoolExecutor(capacity)``: ``list(pool.map(call, batch))`` per Arrow batch.

    The common recipe: one pool per partition, each thread with its own keep-alive connection;
    ``list(pool.map(...))`` is a barrier at the end of every batch.
    """

    def __init__(self, t: Transport, capacity: int):
        self.t = t
        self.capacity = capacity

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        t = self.t
        call = lambda key: sync_lookup(t, key)  # noqa: E731
        with ThreadPoolExecutor(self.capacity) as pool:
            for pdf in batches:
                ids = pdf["id"].tolist()
                yield pd.DataFrame({"id": pdf["id"], "name": list(pool.map(call, ids))})


# ------------------------------------------------------------------------ 3. per-batch asyncio.gather
class GatherRecipe:
    """``mapInPandas`` running ``asyncio.run(gather(...))`` per Arrow batch (the common blog recipe).

    A new loop and aiohttp session per batch, a semaphore of ``capacity``; the batch's slowest call
    is a barrier before the next batch starts.
    """

    def __init__(self, t: Transport, capacity: int):
        self.t = t
        self.capacity = capacity

    async def _batch(self, ids: list[int]) -> list[str]:
        t = self.t
        sem = asyncio.Semaphore(self.capacity)
        session = new_session(t, self.capacity)

        async def one(key: int) -> str:
            async with sem:
                return await async_lookup(t, session, key)

        try:
            return await asyncio.gather(*(one(k) for k in ids))
        finally:
            if session is not None:
                await session.close()

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        for pdf in batches:
            names = asyncio.run(self._batch(pdf["id"].tolist()))
            yield pd.DataFrame({"id": pdf["id"], "name": names})


# ------------------------------------------------------------------------------------------ 5. aiospark
class AioLookup(aiospark.AsyncFunction):
    """``unordered_wait`` / ``ordered_wait``: aiohttp session opened in ``open()``, limit = capacity."""

    def __init__(self, t: Transport, capacity: int):
        self.t = t
        self.capacity = capacity
        self.session = None

    async def open(self) -> None:
        self.session = new_session(self.t, self.capacity)

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        key = row["id"]
        return [{"id": key, "name": await async_lookup(self.t, self.session, key)}]

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


_udf_sessions: dict[Any, Any] = {}


def _worker_session(t: Transport, capacity: int) -> Any:
    """A module-level aiohttp session, created lazily once per worker process (and event loop)."""
    key = (id(asyncio.get_running_loop()), os.getpid(), capacity)
    session = _udf_sessions.get(key)
    if session is None:
        session = _udf_sessions[key] = new_session(t, capacity)
    return session


class AsyncUdfLookup:
    """The ``async def`` behind ``aiospark.async_udf``: one value per row, order kept."""

    def __init__(self, t: Transport, capacity: int):
        self.t = t
        self.capacity = capacity
        self.__name__ = self.__qualname__ = "lookup_name"

    async def __call__(self, key: int) -> str:
        t = self.t
        return await async_lookup(t, _worker_session(t, self.capacity) if t.kind == "http" else None, key)


# -------------------------------------------------------------------------- bare asyncio (no Spark)
def bare_worker(t: Transport, lo: int, hi: int, capacity: int, ready: Any, go: Any, out: Any,
                loop_kind: str = "asyncio") -> None:
    """Ids ``lo..hi`` at ``capacity`` in flight: a done-callback refills the window (one process).

    Signals ``ready`` once imported, starts when ``go`` is set, puts
    ``(elapsed, cpu_seconds, peak_rss_bytes, total_name_chars)`` on ``out``.
    """

    async def main() -> int:
        loop = asyncio.get_running_loop()
        session = new_session(t, capacity)
        done = loop.create_future()
        source = iter(range(lo, hi))
        finished = 0
        total_len = 0

        def on_done(task: asyncio.Task) -> None:
            nonlocal finished, total_len
            finished += 1
            if task.exception() is not None:
                if not done.done():
                    done.set_exception(task.exception())
                return
            total_len += len(task.result())
            refill()

        def refill() -> None:
            for key in source:
                loop.create_task(async_lookup(t, session, key)).add_done_callback(on_done)
                return
            if finished == hi - lo and not done.done():
                done.set_result(None)

        for _ in range(capacity):
            refill()
        if hi == lo:
            done.set_result(None)
        try:
            await done
        finally:
            if session is not None:
                await session.close()
        return total_len

    if t.kind == "http":
        importlib.import_module("aiohttp")  # imported before the clock starts, like a warmed-up worker
    latency_for(t, 0)  # the latency table too
    ready.put(os.getpid())
    go.wait()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    factory = None
    if loop_kind == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        total_len = runner.run(main())
    elapsed = time.perf_counter() - t0
    out.put((elapsed, time.process_time() - cpu0, peak_rss(), total_len))


def peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM of its own memory map.

    Not ``getrusage().ru_maxrss``: Linux keeps that across ``exec``, so a spawned child would report
    the RSS of the parent it was forked from.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
