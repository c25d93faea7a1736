"""A fault-injecting HTTP service on 127.0.0.1 for tests and benchmarks (test infrastructure, not shipped).

Spark workers (and tests) call it over loopback as if it were a real remote
API: it adds latency (fixed, uniform or lognormal, plus rare very slow calls),
injects faults (500/503, hangs, connection resets, slow bodies, 429 with
``Retry-After``, 429 bursts), can enforce a real concurrency limit, and counts
everything it sees (outcomes, requests and TCP connections in flight and their
peaks, per-key hits, arrival timestamps).

Endpoints (faults apply to ``/item`` and ``/batch`` only):

* ``GET /item/{key}`` -> ``{"key": key, "value": crc32(key), "name": "item-<key>"}``;
  the key is the percent-decoded rest of the path, so ``/item/a%2Fb`` and
  ``/item/a/b`` both mean ``"a/b"`` (see :func:`expected_item`).
* ``POST /batch`` with ``{"keys": [...]}`` -> ``{"results": {key: item}}`` (one latency).
* ``GET /echo?a=1&b=2`` -> ``{"query": {...}, "items": [[k, v], ...]}`` (latency, no faults).
* ``GET /stats`` (``?arrivals=1`` adds timestamps, ``?keys=0`` drops ``key_hits``),
  ``POST /reset``, ``GET|POST /config`` (JSON field changes), ``GET /health``.

Two ways to run it, same interface:

* in a daemon thread with its own event loop (default)::

      with FaultService(ServiceConfig(latency=0.02, error_rate=0.1, seed=1)) as svc:
          urllib.request.urlopen(svc.url + "/item/k1")
          assert svc.stats()["requests"] == 1
          svc.update(error_rate=0.0)

* in a child process (``process=True``) so a benchmark's client does not share
  the GIL with the server; ``stats()``/``update()`` go over HTTP to a separate
  control port whose connections are not counted.

Command line (prints the service URL on the first stdout line, serves until killed)::

    python -m tests.support.service --latency 0.02 --error-rate 0.05 --port 0

``python -m tests.support.service_load`` measures its throughput (see
:mod:`tests.support.service_load`).

Arrival timestamps are ``time.monotonic()`` values; on Linux that clock is
system-wide, so process-mode timestamps compare with the caller's clock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from .service_config import LOOPBACK_HOST, ServiceConfig
from .service_server import MAX_ARRIVALS, ServiceCore, expected_item, item_value  # re-exported

__all__ = ["FaultService", "LimitedService", "ServiceConfig", "expected_item", "item_value", "main",
           "MAX_ARRIVALS"]

_START_TIMEOUT = 20.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FaultService:
    """A running fault-injecting HTTP service on 127.0.0.1 (see the module docstring).

    ``FaultService(config)`` runs in a background thread; ``process=True`` runs
    it in a child process started with ``sys.executable``.  Keyword
    ``overrides`` are applied to ``config`` (``FaultService(latency=0.01)``).
    :meth:`start` (or ``with``) returns once the port is listening;
    :meth:`stop` closes everything within about a second, hung requests included.

    Example::

        with FaultService(ServiceConfig(latency=0.005, hang_rate=1.0)) as svc:
            ...  # call svc.url + "/item/x" with a short client timeout
            assert svc.stats()["hangs"] >= 1
            svc.update(hang_rate=0.0)
            svc.reset_stats()
    """

    def __init__(self, config: ServiceConfig | None = None, *, process: bool = False, **overrides: Any) -> None:
        config = config if config is not None else ServiceConfig()
        self._config = config.replace(**overrides) if overrides else config
        self.process = process
        self._url: str | None = None
        self._control_url: str | None = None
        self._stopped = False
        # thread mode
        self._core: ServiceCore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # process mode
        self._proc: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> FaultService:
        """Start serving (idempotent); returns ``self`` once the port accepts connections."""
        if self._url is not None:
            return self
        if self._stopped:
            raise RuntimeError("this FaultService was stopped; create a new one")
        if self.process:
            self._start_process()
        else:
            self._start_thread()
        return self

    def stop(self) -> None:
        """Stop serving and free the port; hung requests get their connections aborted."""
        if self._stopped:
            return
        self._stopped = True
        if self._proc is not None:
            if self._finalizer is not None:
                self._finalizer()
        elif self._loop is not None and self._thread is not None:
            loop, core = self._loop, self._core
            assert core is not None
            if self._thread.is_alive():
                fut = asyncio.run_coroutine_threadsafe(core.close(), loop)
                try:
                    fut.result(timeout=5.0)
                except Exception:
                    fut.cancel()
                try:
                    loop.call_soon_threadsafe(loop.stop)
                except RuntimeError:
                    pass  # loop already closed
            self._thread.join(timeout=5.0)

    def __enter__(self) -> FaultService:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        mode = "process" if self.process else "thread"
        return f"<FaultService {mode} url={self._url!r} stopped={self._stopped}>"

    # -- properties --------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL, e.g. ``"http://127.0.0.1:40123"``."""
        if self._url is None:
            raise RuntimeError("FaultService is not started; use `with FaultService(...) as svc` or .start()")
        return self._url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def control_url(self) -> str:
        """URL of the uncounted control port (``/stats``, ``/reset``, ``/config``)."""
        self.url  # noqa: B018 - raises if not started
        assert self._control_url is not None
        return self._control_url

    @property
    def pid(self) -> int:
        """Process id of the serving process (the child in process mode, else this process)."""
        self.url  # noqa: B018 - raises if not started
        return self._proc.pid if self._proc is not None else os.getpid()

    @property
    def config(self) -> ServiceConfig:
        """The configuration currently in force (after :meth:`update` calls)."""
        return self._config

    # -- state -------------------------------------------------------------------
    def stats(self, *, arrivals: bool = False, keys: bool = True) -> dict[str, Any]:
        """Consistent snapshot of the counters (thread mode: also after :meth:`stop`).

        Keys: ``requests`` (``/item``+``/batch``+``/echo`` arrivals), outcomes
        ``ok``, ``errors_5xx``, ``rate_limited_429``, ``hangs``, ``resets``,
        ``slow_bodies``, ``cancelled`` (client left before an answer was chosen),
        ``overload_rejections`` (also counted in 5xx/429), ``bad_requests``;
        ``statuses`` (``{"200": n, ...}``), ``item_requests``, ``batch_requests``,
        ``batch_keys``, ``echo_requests``, ``in_flight``/``peak_in_flight``,
        ``connections_open``/``peak_connections``/``connections_total``,
        ``key_hits`` (unless ``keys=False``), ``first_arrival``/``last_arrival``,
        ``since``/``now`` (monotonic), ``cpu_seconds`` (CPU time of the serving
        process: only the service's own in process mode) and, with
        ``arrivals=True``, ``arrivals``.
        """
        if self._proc is not None:
            flags = f"arrivals={int(arrivals)}&keys={int(keys)}"
            return self._http("GET", f"/stats?{flags}")
        return self._on_loop(lambda: self._require_core().snapshot(arrivals=arrivals, keys=keys))

    def arrivals(self) -> list[float]:
        """Monotonic arrival times of the last (up to 1,000,000) data requests."""
        return list(self.stats(arrivals=True, keys=False)["arrivals"])

    def reset_stats(self) -> None:
        """Zero the counters (gauges ``in_flight``/``connections_open`` stay; peaks drop to them)."""
        if self._proc is not None:
            self._http("POST", "/reset", {})
        else:
            self._on_loop(lambda: self._require_core().reset())

    def update(self, **changes: Any) -> ServiceConfig:
        """Change the configuration of the running service, e.g. ``update(error_rate=0.0)``.

        Validated like :class:`ServiceConfig` (``host``/``port`` cannot change);
        returns the new configuration.  A new ``seed`` restarts the random draws.
        """
        new = self._config.runtime_replace(**changes)  # raises before touching the service
        if self._url is None:
            self._config = new
            return new
        if self._proc is not None:
            new = ServiceConfig.from_dict(self._http("POST", "/config", changes))
        else:
            new = self._on_loop(lambda: self._require_core().apply(changes))
        self._config = new
        return new

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0,
                 interval: float = 0.01) -> dict[str, Any]:
        """Poll :meth:`stats` until ``predicate(stats)`` holds; return those stats or raise ``TimeoutError``."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self.stats(keys=False)
            if predicate(snap):
                return snap
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not reached within {timeout}s; last stats: {snap}")
            time.sleep(interval)

    # -- thread mode -------------------------------------------------------------
    def _require_core(self) -> ServiceCore:
        if self._core is None:
            raise RuntimeError("FaultService is not started")
        return self._core

    def _start_thread(self) -> None:
        core = ServiceCore(self._config)
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(core.start())
            except BaseException as exc:  # reported to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                _cancel_all(loop)
                loop.close()

        thread = threading.Thread(target=run, name=f"FaultService-{id(self):x}", daemon=True)
        thread.start()
        if not ready.wait(_START_TIMEOUT):
            raise RuntimeError("FaultService thread did not start listening in time")
        if failure:
            raise failure[0]
        self._core, self._loop, self._thread = core, loop, thread
        self._url = f"http://{LOOPBACK_HOST}:{core.port}"
        self._control_url = f"http://{LOOPBACK_HOST}:{core.control_port}"

    def _on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the service loop (where counters change) and return its result."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive() or loop.is_closed():
            return fn()  # not running: nothing mutates concurrently
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def call() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        try:
            loop.call_soon_threadsafe(call)
        except RuntimeError:
            return fn()
        return fut.result(timeout=30.0)

    # -- process mode ------------------------------------------------------------
    def _start_process(self) -> None:
        # .../tests/support/service.py -> the repository root, so the child imports this same copy
        # of tests.support whatever the caller's working directory is
        repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-m", "tests.support.service",
               "--config-json", json.dumps(self._config.to_dict()), "--exit-on-stdin-eof"]
        errlog = tempfile.TemporaryFile()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
                                env=env, start_new_session=True)
        self._proc = proc
        self._finalizer = weakref.finalize(self, _kill_process, proc, errlog)
        try:
            lines = _read_lines(proc, 2, _START_TIMEOUT)
        except Exception as exc:
            self._finalizer()
            errlog_text = _read_tail(errlog)
            raise RuntimeError(f"FaultService child process failed to start: {exc}\n{errlog_text}") from None
        self._url = lines[0]
        self._control_url = lines[1].split()[-1]

    def _http(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.control_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with _NO_PROXY.open(req, timeout=30.0) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = exc.read()
            exc.close()
            try:
                message = json.loads(body)["error"]
            except Exception:
                message = body.decode(errors="replace")
            if exc.code == 400:
                raise ValueError(message) from None
            raise RuntimeError(f"{method} {path} -> {exc.code}: {message}") from None


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


def _read_lines(proc: subprocess.Popen, count: int, timeout: float) -> list[str]:
    """Read ``count`` stdout lines from ``proc`` within ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while buf.count(b"\n") < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no URL printed within {timeout}s")
            if sel.select(left):
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise RuntimeError(f"child exited with code {proc.wait()}")
                buf += chunk
    return buf.decode().splitlines()[:count]


def _read_tail(errlog: Any, limit: int = 4000) -> str:
    try:
        errlog.seek(0)
        return errlog.read().decode(errors="replace")[-limit:]
    except (OSError, ValueError):
        return ""


def _kill_process(proc: subprocess.Popen, errlog: Any) -> None:
    """SIGTERM the child's process group, SIGKILL it after 3 s; close pipes."""
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        pass
    errlog.close()


class LimitedService:
    """A service that serves at most ``limit`` requests at once, ``latency`` seconds each, in a
    child process on 127.0.0.1 -- and either answers ``status`` (429) at once beyond that
    (``mode="reject"``) or queues the extra requests first come, first served (``mode="queue"``).

    The two behaviours of a real saturated API, for measuring adaptive concurrency. ``GET
    /item/{key}`` answers ``{"key": key}``; :meth:`stats` gives ``requests``, ``ok``, ``rejected``,
    ``peak_serving``, ``peak_waiting``, ``p50``/``p90`` of the service's response time (arrival
    to answer, queueing included, seconds) and ``first_arrival``/``last_answer`` (its loop clock,
    seconds); :meth:`reset_stats` zeroes them.

    Example::

        with LimitedService(limit=40, latency=0.02, mode="queue") as svc:
            ...  # GET svc.url + "/item/1"
            print(svc.stats()["p50"])
    """

    MODES = ("reject", "queue")

    def __init__(self, limit: int = 40, latency: float = 0.02, mode: str = "reject", status: int = 429) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit={limit!r} must be an int >= 1 (requests served at once)")
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < 3600:
            raise ValueError(f"latency={latency!r} must be seconds >= 0")
        if mode not in self.MODES:
            raise ValueError(f"mode={mode!r} must be 'reject' (answer {status} beyond the limit) or 'queue'")
        if status not in (429, 503):
            raise ValueError(f"status={status!r} must be 429 or 503")
        self.limit, self.latency, self.mode, self.status = limit, float(latency), mode, status
        self._proc: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("LimitedService is not started; use `with LimitedService(...) as svc`")
        return self._url

    def start(self) -> LimitedService:
        if self._url is not None:
            return self
        repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
        spec = json.dumps({"limit": self.limit, "latency": self.latency, "mode": self.mode, "status": self.status})
        errlog = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-m", "tests.support.service", "--limited-json", spec],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, env=env,
                                start_new_session=True)
        self._proc = proc
        self._finalizer = weakref.finalize(self, _kill_process, proc, errlog)
        try:
            self._url = _read_lines(proc, 1, _START_TIMEOUT)[0]
        except Exception as exc:
            self._finalizer()
            raise RuntimeError(f"LimitedService child process failed to start: {exc}\n{_read_tail(errlog)}") from None
        return self

    def stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> LimitedService:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        with _NO_PROXY.open(self.url + "/stats", timeout=30.0) as resp:
            return json.loads(resp.read())

    def reset_stats(self) -> None:
        with _NO_PROXY.open(urllib.request.Request(self.url + "/reset", data=b"", method="POST"), timeout=30.0):
            pass


def _serve_limited(spec: dict[str, Any]) -> None:
    """The child process of :class:`LimitedService`: serve until stdin closes."""
    from aiohttp import web

    limit, latency, mode, status = spec["limit"], spec["latency"], spec["mode"], spec["status"]
    counts = {"requests": 0, "ok": 0, "rejected": 0, "peak_serving": 0, "peak_waiting": 0,
              "first_arrival": None, "last_answer": None}
    state = {"serving": 0, "waiting": 0}
    times: list[float] = []

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path.startswith("/item/"):
            loop = asyncio.get_running_loop()
            arrived = loop.time()
            counts["requests"] += 1
            if counts["first_arrival"] is None:
                counts["first_arrival"] = arrived
            if state["serving"] >= limit:
                if mode == "reject":
                    counts["rejected"] += 1
                    return web.Response(status=status, text="overloaded")
                state["waiting"] += 1
                counts["peak_waiting"] = max(counts["peak_waiting"], state["waiting"])
                try:
                    async with slots:  # first come, first served
                        return await serve(loop, arrived, path)
                finally:
                    state["waiting"] -= 1
            async with slots:
                return await serve(loop, arrived, path)
        if path == "/stats":
            ordered = sorted(times)
            def pick(q):
                return (ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None)
            return web.json_response(dict(counts, serving=state["serving"], p50=pick(0.5), p90=pick(0.9)))
        if path == "/reset":
            counts.update(requests=0, ok=0, rejected=0, peak_serving=state["serving"], peak_waiting=0,
                          first_arrival=None, last_answer=None)
            times.clear()
            return web.json_response({})
        return web.Response(status=404)

    async def serve(loop: asyncio.AbstractEventLoop, arrived: float, path: str) -> web.StreamResponse:
        state["serving"] += 1
        counts["peak_serving"] = max(counts["peak_serving"], state["serving"])
        try:
            await asyncio.sleep(latency)
        finally:
            state["serving"] -= 1
        counts["ok"] += 1
        counts["last_answer"] = now = loop.time()
        times.append(now - arrived)
        return web.json_response({"key": path[6:]})

    async def run() -> None:
        nonlocal slots
        slots = asyncio.Semaphore(limit)
        server = web.Server(handle)
        runner = web.ServerRunner(server, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, LOOPBACK_HOST, 0, backlog=4096)
        await site.start()
        port = runner.addresses[0][1]
        print(f"http://{LOOPBACK_HOST}:{port}", flush=True)
        eof = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(eof.set)), daemon=True).start()
        await eof.wait()
        await runner.cleanup()

    slots: Any = None
    asyncio.run(run())


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: ``python -m tests.support.service [--latency 0.02 ...]`` (see ``--help``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--limited-json":  # LimitedService's child process
        _serve_limited(json.loads(args[1]))
        return 0
    from .service_cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
