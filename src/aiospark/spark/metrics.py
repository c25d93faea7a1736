"""Metrics users can see: per-task operator metrics, summed for the job, on the driver.

Every entry point takes ``metrics=aiospark.Metrics()`` (and makes one when not given, reachable as
``out_df.aiospark_metrics``). Each task reports its :class:`~aiospark.core.metrics.OperatorMetrics`
to a small HTTP collector in the driver process: progress every half second while it runs and a
final report when it ends. This works the same for classic and Spark Connect sessions, because the
collector lives in the process that defined the operator. Reporting never fails a task: if the
collector cannot be reached, the task logs its metrics (logger ``aiospark``) instead.

Where the collector listens: ``AIOSPARK_METRICS_HOST`` (``host`` or ``host:port``: the address
executors are told) when set, bound on ``AIOSPARK_METRICS_BIND`` (``addr`` or ``addr:port``;
default: the advertised host and port, any free port without one) -- for a Spark Connect client
whose server runs elsewhere, an address of this machine the cluster reaches, or a tunnel's far
end; else, with a classic session, where Spark's own driver listens (``spark.driver.bindAddress``,
advertised to executors as ``spark.driver.host``), so executors on other hosts reach it with no
setting; else 127.0.0.1 (a Connect client whose server is on this machine;
:mod:`aiospark.spark.reach` refuses or warns at definition when it is not). It accepts only
reports signed with the secret of a live ``Metrics`` (shipped to the tasks inside the pickled
reporter; an HMAC with a timestamp and a nonce, :mod:`aiospark.budget.signing`), of at most
1 MiB, holding metrics it can read; anything else is refused (403, 413, 400).
The same server answers budget lease requests (``POST /budget``, :mod:`aiospark.spark.budget`),
signed with the secret of a live ``Budget``.

Example::

    m = aiospark.Metrics("geo")
    aiospark.unordered_wait(df, geo, "ip STRING, country STRING", metrics=m).write.parquet(path)
    print(m)            # geo: 2 tasks, calls=... ok=... retries=... p50=... p99=...
    m.total.timeouts    # exact counters, summed over tasks
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..budget.signing import Verifier, sign
from ..core.metrics import OperatorMetrics

log = logging.getLogger("aiospark")

#: How often a running task reports progress.
PROGRESS_SECONDS = 0.5

_registry: dict[str, Metrics] = {}
_registry_lock = threading.Lock()


class Metrics:
    """Job-level metrics of the operators it was passed to; read them after (or during) the action."""

    def __init__(self, name: str = "aiospark"):
        if not isinstance(name, str) or not name:
            raise ValueError(f"Metrics name must be a non-empty string, got {name!r}")
        self.name = name
        self.id = uuid.uuid4().hex
        self._secret = secrets.token_hex(16)  # reports must carry it (see the module doc)
        self._lock = threading.Lock()
        self._tasks: dict[str, dict[str, Any]] = {}
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        with _registry_lock:
            _registry[self.id] = self

    # ---------------------------------------------------------------- reading (driver)
    @property
    def total(self) -> OperatorMetrics:
        """The metrics of every task attempt reported so far, summed."""
        with self._lock:
            parts = [OperatorMetrics.from_dict(t["metrics"]) for t in self._tasks.values()]
        return OperatorMetrics.merged(parts)

    @property
    def tasks(self) -> int:
        """Task attempts that finished and reported."""
        with self._lock:
            return sum(1 for t in self._tasks.values() if t["final"])

    def progress(self) -> dict[str, Any]:
        """Rows emitted, calls in flight now and errors so far, over running and finished tasks."""
        with self._lock:
            tasks = list(self._tasks.values())
        total = OperatorMetrics.merged(OperatorMetrics.from_dict(t["metrics"]) for t in tasks)
        return {"rows": sum(t["rows"] for t in tasks),
                "inflight": sum(t["inflight"] for t in tasks if not t["final"]),
                "errors": total.failures,  # an error row is a failure turned into a row: counted once
                "running": sum(1 for t in tasks if not t["final"]), "finished": sum(1 for t in tasks if t["final"])}

    def on_report(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call ``listener(report)`` after each task report is stored (on the collector's thread:
        keep it quick; what it raises is ignored). ``report`` holds ``task`` (``stage.partition.attempt``),
        ``final``, ``rows``, ``inflight`` and ``metrics`` (``OperatorMetrics.to_dict()``). The progress
        display (``progress=True``) starts on the first report of an action this way."""
        with self._lock:
            self._listeners.append(listener)

    def reset(self) -> None:
        with self._lock:
            self._tasks.clear()

    def __str__(self) -> str:
        return f"{self.name}: {self.tasks} tasks, {self.total}"

    def __repr__(self) -> str:
        return f"<aiospark.Metrics {self.name!r} tasks={self.tasks}>"

    def _receive(self, report: dict[str, Any]) -> None:
        OperatorMetrics.from_dict(report["metrics"])  # ValueError: refused, never stored
        if not (isinstance(report["task"], str) and isinstance(report["final"], bool)
                and isinstance(report["rows"], int) and isinstance(report["inflight"], int)):
            raise ValueError("a report's task, final, rows and inflight have the wrong types")
        with self._lock:
            previous = self._tasks.get(report["task"])
            if previous is not None and previous["final"] and not report["final"]:
                return  # a late progress report must not undo the final one
            self._tasks[report["task"]] = report
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(report)
            except Exception:  # a display must never refuse a task's report
                log.debug("aiospark: a metrics listener failed", exc_info=True)

    # ---------------------------------------------------------------- shipping (to workers)
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (MetricsReporter, (self.id, self.name, collector(driver_host()).address, self._secret))


class MetricsReporter:
    """What a :class:`Metrics` becomes on a worker: sends this task's metrics to the driver."""

    def __init__(self, metrics_id: str, name: str, address: str, secret: str = ""):
        self.metrics_id = metrics_id
        self.name = name
        self.address = address
        self._secret = secret
        self._last = 0.0
        self._failed = False

    def report(self, task: str, metrics: OperatorMetrics, rows: int, inflight: int, final: bool) -> None:
        now = time.monotonic()
        if not final and (now - self._last < PROGRESS_SECONDS or self._failed):
            return
        self._last = now
        body = json.dumps({"id": self.metrics_id, "task": task, "final": final, "rows": rows,
                           "inflight": inflight, "metrics": metrics.to_dict()}).encode()
        if final:
            log.info("aiospark %s task %s: %s", self.name, task, metrics)
        try:
            path = urllib.parse.urlsplit(self.address).path or "/"
            request = urllib.request.Request(self.address, data=body, method="POST",
                                             headers={"Content-Type": "application/json",
                                                      **sign(self._secret, "POST", path, body)})
            _opener.open(request, timeout=2.0).read()
        except OSError as exc:
            self._failed = True
            log.warning("aiospark: could not report metrics of task %s to %s (%s): %s", task, self.address,
                        exc, metrics)


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def task_reporter(metrics: Any) -> Any | None:
    """The ``report(operator, rows, final)`` callback of this task for ``run_partition``."""
    if not isinstance(metrics, MetricsReporter):
        return None
    task = task_name()

    def report(operator: Any, rows: int, final: bool) -> None:
        metrics.report(task, operator.metrics, rows, operator.inflight, final)

    return report


def task_name() -> str:
    """``stage.partition.attempt`` of the running Spark task (or the pid outside Spark)."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:  # pragma: no cover
        ctx = None
    if ctx is None:
        return f"pid{os.getpid()}"
    return f"{ctx.stageId()}.{ctx.partitionId()}.{ctx.attemptNumber()}"


#: The largest report (or request) the collector reads
MAX_REPORT_BYTES = 1 << 20
#: signatures, clock window and nonces of every request to this process's collectors
_verifier = Verifier()


#: Other JSON endpoints of the collector, by path: ``handle(request) -> (status, reply)`` (``reply`` a
#: dict sent back as JSON, or None), reached only by requests signed with ``secret_of(request)`` (None:
#: no such live object, 403). Budgets lease units here (aiospark.spark.budget).
Endpoint = Callable[[dict[str, Any]], tuple[int, dict[str, Any] | None]]
SecretOf = Callable[[dict[str, Any]], str | None]
_endpoints: dict[str, tuple[Endpoint, SecretOf]] = {}


def register_endpoint(path: str, handle: Endpoint, secret_of: SecretOf) -> None:
    """Serve ``POST <path>`` with ``handle``, for requests signed with ``secret_of(request)``."""
    _endpoints[path] = (handle, secret_of)


def _report_secret(report: dict[str, Any]) -> str | None:
    with _registry_lock:
        target = _registry.get(report.get("id"))  # type: ignore[arg-type]
    return target._secret if target is not None else None


def _receive_report(report: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    with _registry_lock:
        target = _registry.get(report["id"])
    if target is None:
        return 403, None
    try:
        target._receive(report)
    except (ValueError, KeyError, TypeError):
        return 400, None
    return 204, None


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # http.server's naming
        path = urllib.parse.urlsplit(self.path).path
        handle, secret_of = _endpoints.get(path) or (_receive_report, _report_secret)
        status, reply = self._answer(path, handle, secret_of)
        body = json.dumps(reply).encode() if reply is not None else b""
        self.send_response(status)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, path: str, handle: Endpoint, secret_of: SecretOf) -> tuple[int, dict[str, Any] | None]:
        try:
            size = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return 411, None
        if not 0 <= size <= MAX_REPORT_BYTES:
            return 413, None
        raw = self.rfile.read(size)
        try:
            request = json.loads(raw)
        except ValueError:
            return 400, None
        if not isinstance(request, dict) or not isinstance(request.get("id"), str):
            return 400, None
        secret = secret_of(request)
        if secret is None:
            return 403, {"error": "not a live Budget or Metrics of this driver"}
        why = _verifier.check(secret, "POST", path, raw, self.headers)
        if why is not None:
            return 403, {"error": why}
        return handle(request)

    def log_message(self, *args: Any) -> None:  # keep the driver's console quiet
        pass


class _CollectorServer(ThreadingHTTPServer):
    # every task of a stage may report at once: socketserver's backlog of 5 would make the kernel
    # drop the connects past it, and those reports wait for SYN retransmits (1 s, 3 s, ...)
    request_queue_size = 128
    daemon_threads = True


class _Collector:
    """One HTTP server in the driver process, bound on ``bind`` and advertised as ``host`` (each
    ``host`` or ``host:port``; see the module doc)."""

    def __init__(self, host: str, bind: str) -> None:
        bind_host, bind_port = split_host_port(bind, "AIOSPARK_METRICS_BIND")
        host, port = split_host_port(host, "AIOSPARK_METRICS_HOST")
        if bind_port is None:  # a port forwarded as is (NAT, a tunnel)
            bind_port = port
        self.server = _CollectorServer((bind_host, bind_port or 0), _Handler)
        shown = f"[{host}]" if ":" in host else host
        self.base = f"http://{shown}:{port or self.server.server_address[1]}"
        self.address = f"{self.base}/report"
        thread = threading.Thread(target=self.server.serve_forever, name="aiospark-metrics", daemon=True)
        thread.start()


_collectors: dict[tuple[str, str], _Collector] = {}


def split_host_port(text: str, what: str) -> tuple[str, int | None]:
    """``"host"``, ``"host:port"``, ``"[v6]"`` or ``"[v6]:port"`` -> ``(host, port or None)``; a bare
    IPv6 address (several colons) is a host."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if not sep or (rest and port_text is None):
            raise ValueError(f"{what}={text!r}: write an IPv6 address as [addr] or [addr]:port")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    if not host:
        raise ValueError(f"{what}={text!r} has no host: set it to a host or host:port")
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ValueError(f"{what}={text!r}: the port must be a number from 1 to 65535 (0: any free port)")
    return host, int(port_text)


def configured_host() -> tuple[str, str] | None:
    """``(advertised, bind)`` from ``AIOSPARK_METRICS_HOST`` / ``AIOSPARK_METRICS_BIND``, or None."""
    host = os.environ.get("AIOSPARK_METRICS_HOST", "").strip()
    if not host:
        return None
    bind = os.environ.get("AIOSPARK_METRICS_BIND", "").strip() or host
    # a typo fails on the driver, naming the variable
    if split_host_port(host, "AIOSPARK_METRICS_HOST")[1] == 0:
        raise ValueError("AIOSPARK_METRICS_HOST: the advertised port must be from 1 to 65535 (a bind port "
                         "of 0, any free port, goes in AIOSPARK_METRICS_BIND)")
    split_host_port(bind, "AIOSPARK_METRICS_BIND")
    return host, bind


def driver_host() -> tuple[str, str]:
    """``(advertised host, bind address)`` of the metrics collector (see the module doc)."""
    configured = configured_host()
    if configured is not None:
        return configured
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    # a Connect client's executors belong to the server: its driver's address is not this process's
    if session is None or type(session).__module__.startswith("pyspark.sql.connect"):
        return "127.0.0.1", "127.0.0.1"
    conf = session.sparkContext.getConf()
    host = conf.get("spark.driver.host", None) or "127.0.0.1"
    return host, conf.get("spark.driver.bindAddress", None) or host


def collector(where: tuple[str, str] | None = None) -> _Collector:
    """The driver process's metrics collector for ``where`` = ``(host, bind)`` (default: 127.0.0.1),
    started on first use."""
    host, bind = where or ("127.0.0.1", "127.0.0.1")
    with _registry_lock:
        made = _collectors.get((host, bind))
        if made is None:
            made = _collectors[(host, bind)] = _Collector(host, bind)
        return made
