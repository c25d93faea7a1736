"""Reliability ("nothing lost, nothing hangs") tests, and the code they run on Spark's Python workers.

Spark pickles the functions it runs by reference, so everything a worker executes lives in an
importable module: this package (``tests.chaos``) holds the HTTP ``AsyncFunction`` shared by the
chaos, timeout, task-failure and streaming tests; the helper scripts (``kill_worker_job``,
``stream_job``) are started by the tests as driver subprocesses with ``python -m tests.chaos.<name>``.
"""
from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from aiospark import AsyncFunction
from aiospark.connectors import ConnectorError, ConnectorTimeout
from aiospark.connectors.http import HttpStatusError, parse_retry_after

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Output schema of :class:`ServiceCall` (the input's ``id`` and ``key`` plus the service's answer).
ITEM_SCHEMA = "id LONG, key STRING, value LONG, name STRING"

#: Error texts an ``on_error="row"`` row may carry in the chaos tests (``ErrorRow`` = "Type: message").
KNOWN_ERRORS = ("HttpStatusError", "ConnectorError", "ConnectorTimeout", "AsyncTimeoutError")


class ServiceCall(AsyncFunction):
    """``GET {url}/item/{key}`` with aiohttp, one ``ClientSession`` per Python worker.

    Maps what the service does to the connector errors of :mod:`aiospark.connectors`, so retry
    strategies can use ``aiospark.connectors.is_retryable``:

    * 429 / 5xx -> :class:`HttpStatusError` (``retryable=True``, ``retry_after`` from the header);
    * the per-attempt client timeout (``attempt_timeout``; hangs, slow bodies) -> :class:`ConnectorTimeout`;
    * a reset connection (any ``aiohttp.ClientError``) -> :class:`ConnectorError` (``retryable=True``).

    ``pool_limit=0`` leaves aiohttp's connection pool unbounded, so the only bound on open
    connections is aiospark's ``capacity``. The operator's own ``timeout`` cancels a running attempt
    (asyncio cancellation), which aiohttp answers by closing that attempt's connection.

    ``peak_file``: when given, the worker counts attempts that are alive at once (entered and not
    yet unwound, cancellation included) and appends every new peak to that file as
    ``"<pid> <peak>"`` -- the client-side view of "calls in flight".
    """

    def __init__(self, url: str, *, attempt_timeout: float | None = None, pool_limit: int = 0,
                 peak_file: str | None = None):
        self.url = url
        self.attempt_timeout = attempt_timeout
        self.pool_limit = pool_limit
        self.peak_file = peak_file
        self.session: Any = None
        self._alive = self._peak = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "session": None}

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.pool_limit),
            timeout=aiohttp.ClientTimeout(total=self.attempt_timeout))

    async def fetch(self, key: str) -> dict[str, Any]:
        import aiohttp

        try:
            async with self.session.get(f"{self.url}/item/{key}") as resp:
                data = await resp.read()
                status = resp.status
                if status != 200:
                    retryable = status == 429 or status >= 500
                    raise HttpStatusError(f"HTTP {status} for /item/{key}", status=status, retryable=retryable,
                                          retry_after=parse_retry_after(resp.headers.get("Retry-After")))
                return json.loads(data)
        except asyncio.TimeoutError:  # aiohttp's per-attempt timeout (never the operator's: that cancels)
            raise ConnectorTimeout(f"no answer within {self.attempt_timeout} s for /item/{key}") from None
        except aiohttp.ClientError as exc:
            raise ConnectorError(f"/item/{key}: {type(exc).__name__}: {exc}", retryable=True) from None

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        if self.peak_file is None:
            body = await self.fetch(row["key"])
        else:
            self._alive += 1
            if self._alive > self._peak:
                self._peak = self._alive
                with open(self.peak_file, "a") as f:
                    f.write(f"{os.getpid()} {self._peak}\n")
            try:
                body = await self.fetch(row["key"])
            finally:
                self._alive -= 1
        return [{"id": row["id"], "key": row["key"], "value": body["value"], "name": body["name"]}]

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await session.close()



# -- driver-side helpers (the test process); imports kept lazy so workers do not pay for them ---------


def kill_tree(proc: Any) -> list[int]:
    """SIGKILL the subprocess ``proc`` and all its descendants, by pid; return the pids signalled.

    A Spark driver's descendants are its JVM and PySpark's daemon and workers (the daemon puts itself
    in a process group of its own, so killing the driver's group alone would not reach them).
    """
    import signal
    import subprocess

    import psutil

    pids: list[int] = []
    try:
        parent = psutil.Process(proc.pid)
        family = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        try:
            p.send_signal(signal.SIGKILL)
            pids.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    psutil.wait_procs([p for p in family if p.pid != proc.pid], timeout=10)
    return pids


def log_tail(proc: Any, limit: int = 3000) -> str:
    """The end of a driver subprocess's stderr log (see the ``driver`` fixture), for messages."""
    try:
        with open(proc.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-limit:]
    except (OSError, AttributeError):
        return ""


def wait_until(predicate: Any, timeout: float, interval: float = 0.1, what: str = "") -> Any:
    """Poll ``predicate()`` until it returns something truthy (returned); fail the test on timeout."""
    import time

    import pytest

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)
