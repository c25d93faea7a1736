"""The small HTTP service behind ``aiospark demo``: JSON per item after a set latency, on 127.0.0.1.

It runs in a process of its own (so it never shares the Spark job's GIL) and measures itself: how
many item requests it answered, the CPU seconds its process used and the latency it added per call
as seen from the server side, so the demo can tell the service's time from the job's.

Example::

    with DemoService(latency=0.03, jitter=0.01) as service:
        urllib.request.urlopen(service.url + "/item/7").read()  # {"id": "7", "name": "item-7", ...}
        service.stats()   # {"requests": 1, "cpu_seconds": ..., "latency_p50_ms": 30.4, ...}

Endpoints: ``GET /item/{id}`` -> ``{"id": id, "name": "item-<id>", "value": crc32(id)}`` after
``latency +/- jitter`` seconds (uniform); ``GET /stats`` (not counted, no delay); ``GET /reset``.
The server is plain asyncio (a ``Protocol`` speaking just enough HTTP/1.1: GET, keep-alive,
``Connection: close``), about a third of the CPU per call of a full web framework, because on a
2-core laptop the service's CPU is taken from the job it is there to demonstrate.

Command line: ``python -m aiospark.app.demo_service --port 8080`` prints its URL, then serves until
Ctrl-C (``--exit-on-stdin-eof``: until its stdin closes, which is how :class:`DemoService` ties it
to the parent process). ``python -m aiospark.app.demo_service --openai --port 11434`` serves the
deterministic OpenAI-compatible endpoint of :mod:`aiospark.app.demo_openai` instead.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import urllib.request
import zlib
from collections import deque
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from .demo_process import Child, run_until_stopped

HOST = "127.0.0.1"
_MAX_HEADER = 16 * 1024
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def item(key: str) -> dict[str, Any]:
    """The JSON object the service returns for ``key`` (also what a test expects)."""
    return {"id": key, "name": f"item-{key}", "value": zlib.crc32(key.encode())}


class _State:
    """Counters of one server process; only touched on its event loop."""

    def __init__(self, latency: float, jitter: float, seed: int | None):
        self.latency, self.jitter = latency, jitter
        self.random = random.Random(seed)
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.durations: list[float] = []
        self.cpu0 = time.process_time()
        self.t0 = time.monotonic()

    def delay(self) -> float:
        return max(0.0, self.latency + self.random.uniform(-self.jitter, self.jitter))

    def stats(self) -> dict[str, Any]:
        d = sorted(self.durations)

        def q(p: float) -> float | None:
            return round(d[min(len(d) - 1, int(p * len(d)))] * 1000, 2) if d else None

        return {"requests": self.requests, "cpu_seconds": round(time.process_time() - self.cpu0, 3),
                "wall_seconds": round(time.monotonic() - self.t0, 3), "latency_p50_ms": q(0.5),
                "latency_p99_ms": q(0.99), "target_latency_ms": self.latency * 1000, "pid": os.getpid()}


class _Http(asyncio.Protocol):
    """One connection: requests are answered in arrival order (HTTP/1.1 pipelining stays correct)."""

    def __init__(self, state: _State):
        self.state = state
        self.buffer = b""
        self.pending: deque[tuple[str, bool]] = deque()
        self.busy = False
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or parts[0] != "GET":  # no request bodies here: refuse and hang up
                self.pending.append(("!405", True))
                self.buffer = b""
                break
            headers = {k.strip().lower(): v.strip().lower()
                       for k, _, v in (line.partition(":") for line in lines[1:])}
            close = headers.get("connection") == "close" or (
                parts[2] == "HTTP/1.0" and headers.get("connection") != "keep-alive")
            self.pending.append((parts[1], close))
        if len(self.buffer) > _MAX_HEADER:
            self.pending.append(("!431", True))
            self.buffer = b""
        self._next()

    def _next(self) -> None:
        if self.busy or not self.pending or self.transport is None or self.transport.is_closing():
            return
        path, close = self.pending.popleft()
        if path.startswith("/item/"):
            self.busy = True
            start = time.monotonic()
            asyncio.get_running_loop().call_later(self.state.delay(), self._answer_item, path, close, start)
            return
        if path.startswith("/stats"):
            self._write(200, self.state.stats(), close)
        elif path.startswith("/reset"):
            self.state.reset()
            self._write(200, {"reset": True}, close)
        else:
            status = int(path[1:]) if path.startswith("!") else 404
            self._write(status, {"error": f"no such endpoint: {path[:100]}"}, close)
        self._next()

    def _answer_item(self, path: str, close: bool, start: float) -> None:
        self.busy = False
        state = self.state
        state.requests += 1
        self._write(200, item(unquote(path[len("/item/"):])), close)
        # measured after the write, so a service starved of CPU shows it in its own latency
        state.durations.append(time.monotonic() - start)
        self._next()

    def _write(self, status: int, body: dict[str, Any], close: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        payload = json.dumps(body).encode()
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Headers Too Large"}.get(status, "")
        self.transport.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n".encode() + payload)
        if close:
            self.pending.clear()
            self.transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.transport = None
        self.pending.clear()


async def serve(latency: float, jitter: float, port: int = 0, seed: int | None = None,
                ready: Any = print) -> None:
    """Serve on ``127.0.0.1:port`` until cancelled; ``ready(url)`` is called once listening."""
    state = _State(latency, jitter, seed)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Http(state), HOST, port, backlog=4096)
    ready(f"http://{HOST}:{server.sockets[0].getsockname()[1]}")
    async with server:
        await server.serve_forever()


class DemoService:
    """The demo service in a child process; a context manager (see the module docstring)."""

    def __init__(self, latency: float = 0.03, jitter: float = 0.01, seed: int | None = 1, port: int = 0):
        if latency < 0 or jitter < 0 or jitter > latency:
            raise ValueError(f"need 0 <= jitter <= latency, got latency={latency}, jitter={jitter}")
        self.latency, self.jitter, self.seed, self.port = latency, jitter, seed, port
        self.url = ""
        self._child: Child | None = None

    def __enter__(self) -> DemoService:
        args = ["--latency", repr(self.latency), "--jitter", repr(self.jitter), "--port", str(self.port)]
        self._child = Child(args + ([] if self.seed is None else ["--seed", str(self.seed)])).__enter__()
        self.url = self._child.url
        return self

    def __exit__(self, *exc: Any) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.__exit__()

    @property
    def pid(self) -> int:
        """The service process's id."""
        assert self._child is not None, "not running"
        return self._child.pid

    def stats(self) -> dict[str, Any]:
        """Item requests answered, CPU seconds of the service process, server-side latency p50/p99."""
        with _NO_PROXY.open(self.url + "/stats", timeout=30) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        """Zero the counters (after a warm-up)."""
        with _NO_PROXY.open(self.url + "/reset", timeout=30) as response:
            response.read()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiospark.app.demo_service [--latency S --jitter S --port N --seed N]``;
    ``--openai ...``: the OpenAI-compatible endpoint of :mod:`aiospark.app.demo_openai` instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--openai" in argv:
        from .demo_openai import main as openai_main

        return openai_main([a for a in argv if a != "--openai"])
    parser = argparse.ArgumentParser(prog="python -m aiospark.app.demo_service", description=__doc__.split("\n")[0],
                                     epilog="--openai [--help]: a deterministic OpenAI-compatible endpoint instead")
    parser.add_argument("--latency", type=float, default=0.03, help="seconds per call (default 0.03)")
    parser.add_argument("--jitter", type=float, default=0.01, help="+/- seconds, uniform (default 0.01)")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port (default)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="stop when stdin closes (how DemoService ties it to its parent)")
    args = parser.parse_args(argv)

    def ready(url: str) -> None:
        print(url, flush=True)

    return run_until_stopped(serve(args.latency, args.jitter, args.port, args.seed, ready), args.exit_on_stdin_eof)


if __name__ == "__main__":
    sys.exit(main())
