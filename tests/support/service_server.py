"""Asyncio core of the fault-injecting test service (internal).

Public entry points live in :mod:`tests.support.service`; this module holds
the request handler, the fault and latency draws and the counters.  Everything
here runs on the service's own event loop: counters are only mutated on that
loop, and readers from other threads get a consistent copy through
:meth:`ServiceCore.snapshot` scheduled onto the loop.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import zlib
from collections import deque
from json.encoder import encode_basestring_ascii as _quote_json
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from .service_config import ServiceConfig

__all__ = ["ServiceCore", "item_value", "expected_item", "MAX_ARRIVALS"]

#: How many arrival timestamps are kept (the oldest are dropped beyond this).
MAX_ARRIVALS = 1_000_000

_JSON = {"Content-Type": "application/json"}
_OK, _ERROR, _HANG, _RESET, _SLOW_BODY, _R429 = range(6)


def item_value(key: str) -> int:
    """Deterministic value the service returns for ``key`` (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass"))


def expected_item(key: str) -> dict[str, Any]:
    """The JSON object ``GET /item/{key}`` answers with (handy for assertions)."""
    return {"key": key, "value": item_value(key), "name": f"item-{key}"}


def _item_json(key: str) -> bytes:
    """``json.dumps(expected_item(key)).encode()``, about 5x faster."""
    k = _quote_json(key)
    return b'{"key": %s, "value": %d, "name": "item-%s}' % (k.encode(), item_value(key), k[1:].encode())


def _json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(obj).encode(), headers=headers or _JSON)


class _Counters:
    """Plain counters; mutated only on the service loop."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.connections_open = 0
        self.clear()

    def clear(self) -> None:
        self.requests = 0
        self.ok = 0
        self.errors_5xx = 0
        self.rate_limited_429 = 0
        self.hangs = 0
        self.resets = 0
        self.slow_bodies = 0
        self.cancelled = 0
        self.overload_rejections = 0
        self.bad_requests = 0
        self.item_requests = 0
        self.batch_requests = 0
        self.batch_keys = 0
        self.echo_requests = 0
        self.statuses: dict[int, int] = {}
        self.key_hits: dict[str, int] = {}
        self.arrivals: deque[float] = deque(maxlen=MAX_ARRIVALS)
        self.peak_in_flight = self.in_flight
        self.peak_connections = self.connections_open
        self.connections_total = 0
        self.since = time.monotonic()

    def snapshot(self, arrivals: bool = False, keys: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            name: getattr(self, name)
            for name in (
                "requests", "ok", "errors_5xx", "rate_limited_429", "hangs", "resets", "slow_bodies",
                "cancelled", "overload_rejections", "bad_requests", "item_requests", "batch_requests",
                "batch_keys", "echo_requests", "in_flight", "peak_in_flight", "connections_open",
                "peak_connections", "connections_total",
            )
        }
        out["statuses"] = {str(k): v for k, v in sorted(self.statuses.items())}
        if keys:
            out["key_hits"] = dict(self.key_hits)
        out["first_arrival"] = self.arrivals[0] if self.arrivals else None
        out["last_arrival"] = self.arrivals[-1] if self.arrivals else None
        out["since"] = self.since
        out["now"] = time.monotonic()
        out["cpu_seconds"] = time.process_time()  # of the whole serving process
        if arrivals:
            out["arrivals"] = list(self.arrivals)
        return out


class _CountingServer(web.Server):
    """Low-level aiohttp server that counts open TCP connections."""

    def __init__(self, handler: Any, *, counters: _Counters, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._counters = counters

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        c = self._counters
        c.connections_open += 1
        c.connections_total += 1
        if c.connections_open > c.peak_connections:
            c.peak_connections = c.connections_open

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._counters.connections_open -= 1


class ServiceCore:
    """The service on the current event loop: ``await start()``, ``await close()``.

    Serves the data endpoints on :attr:`port` and the control endpoints
    (``/stats``, ``/reset``, ``/config``, ``/health``) on both :attr:`port` and
    :attr:`control_port`; connections to the control port are not counted.
    """

    def __init__(self, config: ServiceConfig, *, shutdown_timeout: float = 0.5, backlog: int = 4096) -> None:
        self._install(config)
        self.counters = _Counters()
        self.port = 0
        self.control_port = 0
        self._shutdown_timeout = shutdown_timeout
        self._backlog = backlog
        self._seed(config.seed)
        self._stopping: asyncio.Event | None = None
        self._runners: list[web.BaseRunner] = []

    # -- lifecycle ---------------------------------------------------------
    def _seed(self, seed: int | None) -> None:
        self._fault_rng = random.Random(seed)
        self._seq = 0  # position in the burst_429 cycle
        self._latency_rng = random.Random(None if seed is None else f"{seed}:latency")

    async def start(self) -> None:
        self._stopping = asyncio.Event()
        data = _CountingServer(self._handle, counters=self.counters, handler_cancellation=True, access_log=None)
        control = web.Server(self._handle_control_port, handler_cancellation=True, access_log=None)
        try:
            for server, port in ((data, self.config.port), (control, 0)):
                runner = web.ServerRunner(server, shutdown_timeout=self._shutdown_timeout)
                await runner.setup()
                self._runners.append(runner)
                await web.TCPSite(runner, self.config.host, port, backlog=self._backlog).start()
        except BaseException:
            await self.close()
            raise
        self.port = self._runners[0].addresses[0][1]
        self.control_port = self._runners[1].addresses[0][1]

    async def close(self) -> None:
        """Stop listening, release hung requests (their connections are aborted), close all."""
        runners, self._runners = self._runners, []
        for runner in runners:  # stop accepting first, so nothing new arrives meanwhile
            for site in list(runner.sites):
                await site.stop()
        if self._stopping is not None:
            self._stopping.set()
        await asyncio.sleep(0)
        await asyncio.gather(*(r.cleanup() for r in runners), return_exceptions=True)

    # -- state ---------------------------------------------------------------
    def snapshot(self, arrivals: bool = False, keys: bool = True) -> dict[str, Any]:
        return self.counters.snapshot(arrivals=arrivals, keys=keys)

    def reset(self) -> None:
        self.counters.clear()

    def apply(self, changes: dict[str, Any]) -> ServiceConfig:
        """Validate and install config ``changes``; a changed ``seed`` re-seeds the draws."""
        new = self.config.runtime_replace(**changes)
        if "seed" in changes:
            self._seed(new.seed)
        self._install(new)
        return new

    # -- draws ---------------------------------------------------------------
    def _latency(self, cfg: ServiceConfig) -> float:
        rng = self._latency_rng
        if cfg.slow_fraction and rng.random() < cfg.slow_fraction:
            return cfg.slow_latency
        if cfg.latency_dist == "fixed":
            return cfg.latency
        if cfg.latency_dist == "uniform":
            return cfg.latency + rng.uniform(-cfg.jitter, cfg.jitter)
        if cfg.latency <= 0:
            return 0.0
        return cfg.latency * math.exp(cfg.sigma * rng.gauss(0.0, 1.0))

    def _install(self, cfg: ServiceConfig) -> None:
        """Make ``cfg`` current and precompute its draw tables (keeps the hot path lean)."""
        edges = []
        acc = 0.0
        for rate, outcome, status in (
            (cfg.error_rate / 2, _ERROR, 500), (cfg.error_rate / 2, _ERROR, 503),
            (cfg.hang_rate, _HANG, 200), (cfg.reset_rate, _RESET, 200),
            (cfg.slow_body_rate, _SLOW_BODY, 200), (cfg.rate_429, _R429, 429),
        ):
            acc += rate
            if rate > 0:
                edges.append((acc, outcome, status))
        if edges and acc >= 1.0 - 1e-9:  # rates summing to 1: no float gap may leave room for "ok"
            edges[-1] = (2.0,) + edges[-1][1:]
        self._edges = tuple(edges)
        self._fixed_latency = (
            cfg.latency if cfg.latency_dist == "fixed" and cfg.slow_fraction == 0 else None
        )
        self.config = cfg

    def _draw(self, cfg: ServiceConfig) -> tuple[int, int]:
        """(outcome, status) for one /item or /batch request: one uniform draw per request."""
        u = self._fault_rng.random()
        self._seq += 1
        burst = cfg.burst_429
        if burst is not None and (self._seq - 1) % burst[0] >= burst[0] - burst[1]:
            return _R429, 429
        for edge, outcome, status in self._edges:
            if u < edge:
                return outcome, status
        return _OK, 200

    # -- request handling ----------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.raw_path
        q = path.find("?")
        if q >= 0:
            path = path[:q]
        if path[:1] != "/":  # absolute-form target ("http://host:port/item/x"), as sent via proxies
            parts = path.split("/", 3)
            path = "/" + (parts[3] if len(parts) == 4 else "")
        method = request.method
        if path.startswith("/item/"):
            if method != "GET" and method != "HEAD":
                return _json_response({"error": "use GET /item/{key}"}, 405)
            key = unquote(path[6:])
            if not key:
                return _json_response({"error": "empty key: use GET /item/{key}"}, 404)
            self.counters.item_requests += 1
            return await self._serve(request, (key,), "item")
        if path == "/batch":
            return await self._batch(request)
        if path == "/echo":
            self.counters.echo_requests += 1
            return await self._serve(request, (), "echo")
        return await self._control(request, path)

    async def _handle_control_port(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.raw_path.split("?", 1)[0]
        return await self._control(request, path)

    async def _batch(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method != "POST":
            return _json_response({"error": 'use POST /batch with {"keys": [...]}'}, 405)
        try:
            keys = json.loads(await request.read())["keys"]
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise TypeError
        except (ValueError, TypeError, KeyError):
            self.counters.bad_requests += 1
            return _json_response({"error": 'body must be JSON {"keys": [<str>, ...]}'}, 400)
        c = self.counters
        c.batch_requests += 1
        c.batch_keys += len(keys)
        return await self._serve(request, keys, "batch")

    async def _serve(self, request: web.BaseRequest, keys: Any, kind: str) -> web.StreamResponse:
        c = self.counters
        cfg = self.config
        c.requests += 1
        c.arrivals.append(time.monotonic())
        hits = c.key_hits
        for key in keys:
            hits[key] = hits.get(key, 0) + 1
        if cfg.max_concurrency is not None and c.in_flight >= cfg.max_concurrency:
            c.overload_rejections += 1
            return self._commit_status(cfg.overload_status, cfg, "overloaded")
        c.in_flight += 1
        if c.in_flight > c.peak_in_flight:
            c.peak_in_flight = c.in_flight
        committed = False
        try:
            outcome, status = (_OK, 200) if kind == "echo" else self._draw(cfg)
            if outcome == _R429:
                committed = True
                return self._commit_status(429, cfg)
            if outcome == _HANG:
                committed = True
                c.hangs += 1
                assert self._stopping is not None
                await self._stopping.wait()  # until the client goes away (cancels us) or close()
                return self._abort(request)
            delay = self._fixed_latency
            if delay is None:
                delay = self._latency(cfg)
            if delay > 0:
                await asyncio.sleep(delay)
            committed = True
            if outcome == _ERROR:
                return self._commit_status(status, cfg)
            if outcome == _RESET:
                c.resets += 1
                return self._abort(request)
            if kind == "item":
                body = _item_json(keys[0])
            elif kind == "batch":
                body = json.dumps({"results": {k: expected_item(k) for k in keys}}).encode()
            else:
                query = request.query
                body = json.dumps({"query": {k: query[k] for k in query}, "items": [[k, v] for k, v in query.items()]}).encode()
            if outcome == _SLOW_BODY:
                c.slow_bodies += 1
                c.statuses[200] = c.statuses.get(200, 0) + 1
                return await self._slow_body(request, body, cfg.slow_body_seconds)
            c.ok += 1
            c.statuses[200] = c.statuses.get(200, 0) + 1
            return web.Response(body=body, headers=_JSON)
        finally:
            c.in_flight -= 1
            if not committed:
                c.cancelled += 1

    def _commit_status(self, status: int, cfg: ServiceConfig, reason: str = "injected") -> web.Response:
        c = self.counters
        c.statuses[status] = c.statuses.get(status, 0) + 1
        if status == 429:
            c.rate_limited_429 += 1
            ra = cfg.retry_after
            headers = {"Content-Type": "application/json", "Retry-After": str(int(ra)) if ra == int(ra) else repr(ra)}
            return _json_response({"error": f"{reason}: rate limited", "retry_after": ra}, 429, headers)
        c.errors_5xx += 1
        return _json_response({"error": f"{reason} {status}"}, status)

    @staticmethod
    def _abort(request: web.BaseRequest) -> web.Response:
        transport = request.transport
        if transport is not None:
            transport.abort()
        # Never delivered: aiohttp sees the closed transport and drops it quietly.
        return web.Response(status=500)

    @staticmethod
    async def _slow_body(request: web.BaseRequest, body: bytes, seconds: float) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=_JSON)
        resp.content_length = len(body)
        pieces = max(1, min(len(body), 10))
        step = -(-len(body) // pieces)
        gap = seconds / max(1, pieces - 1)
        try:
            await resp.prepare(request)
            for i in range(0, len(body), step):
                if i:
                    await asyncio.sleep(gap)
                await resp.write(body[i:i + step])
        except ConnectionError:
            pass  # the client went away mid-body
        return resp

    async def _control(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        method = request.method
        if path == "/stats" and method == "GET":
            query = request.query
            return _json_response(self.snapshot(
                arrivals=query.get("arrivals", "0") not in ("0", "", "false"),
                keys=query.get("keys", "1") not in ("0", "", "false"),
            ))
        if path == "/reset" and method == "POST":
            self.reset()
            return _json_response({"reset": True})
        if path == "/config" and method == "GET":
            return _json_response(self.config.to_dict())
        if path == "/config" and method == "POST":
            try:
                changes = json.loads(await request.read() or b"{}")
                if not isinstance(changes, dict):
                    raise TypeError("body must be a JSON object of ServiceConfig field changes")
                return _json_response(self.apply(changes).to_dict())
            except (ValueError, TypeError) as exc:
                return _json_response({"error": str(exc)}, 400)
        if path == "/health" and method == "GET":
            return _json_response({"ok": True, "port": self.port, "control_port": self.control_port})
        if path in ("/stats", "/reset", "/config", "/health"):
            return _json_response({"error": f"method {method} not allowed on {path}"}, 405)
        return _json_response({"error": f"not found: {path}"}, 404)
