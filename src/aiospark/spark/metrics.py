"""Metrics users can see: per-task operator metrics, summed for the job, on the driver.

Every entry point takes ``metrics=aiospark.Metrics()`` (and makes one when not given, reachable as
``out_df.aiospark_metrics``). Each task reports its :class:`~aiospark.core.metrics.OperatorMetrics`
to a small HTTP collector in the driver process (started on first use, on 127.0.0.1 or
``AIOSPARK_METRICS_HOST``): progress every half second while it runs and a final report when it
ends. This works the same for classic and Spark Connect sessions, because the collector lives in
the process that defined the operator. Reporting never fails a task: if the collector cannot be
reached, the task logs its metrics (logger ``aiospark``) instead.

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
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional, Tuple

from ..core.metrics import OperatorMetrics

log = logging.getLogger("aiospark")

#: How often a running task reports progress.
PROGRESS_SECONDS = 0.5

_registry: Dict[str, "Metrics"] = {}
_registry_lock = threading.Lock()
_collector: Optional["_Collector"] = None


class Metrics:
    """Job-level metrics of the operators it was passed to; read them after (or during) the action."""

    def __init__(self, name: str = "aiospark"):
        if not isinstance(name, str) or not name:
            raise ValueError(f"Metrics name must be a non-empty string, got {name!r}")
        self.name = name
        self.id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._tasks: Dict[str, Dict[str, Any]] = {}
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

    def progress(self) -> Dict[str, Any]:
        """Rows emitted, calls in flight now and errors so far, over running and finished tasks."""
        with self._lock:
            tasks = list(self._tasks.values())
        total = OperatorMetrics.merged(OperatorMetrics.from_dict(t["metrics"]) for t in tasks)
        return {"rows": sum(t["rows"] for t in tasks),
                "inflight": sum(t["inflight"] for t in tasks if not t["final"]),
                "errors": total.failures + total.error_rows,
                "running": sum(1 for t in tasks if not t["final"]), "finished": sum(1 for t in tasks if t["final"])}

    def reset(self) -> None:
        with self._lock:
            self._tasks.clear()

    def __str__(self) -> str:
        return f"{self.name}: {self.tasks} tasks, {self.total}"

    def __repr__(self) -> str:
        return f"<aiospark.Metrics {self.name!r} tasks={self.tasks}>"

    def _receive(self, report: Dict[str, Any]) -> None:
        with self._lock:
            previous = self._tasks.get(report["task"])
            if previous is not None and previous["final"] and not report["final"]:
                return  # a late progress report must not undo the final one
            self._tasks[report["task"]] = report

    # ---------------------------------------------------------------- shipping (to workers)
    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (MetricsReporter, (self.id, self.name, collector().address))


class MetricsReporter:
    """What a :class:`Metrics` becomes on a worker: sends this task's metrics to the driver."""

    def __init__(self, metrics_id: str, name: str, address: str):
        self.metrics_id = metrics_id
        self.name = name
        self.address = address
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
            request = urllib.request.Request(self.address, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            _opener.open(request, timeout=2.0).read()
        except OSError as exc:
            self._failed = True
            log.warning("aiospark: could not report metrics of task %s to %s (%s): %s", task, self.address,
                        exc, metrics)


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def task_reporter(metrics: Any) -> Optional[Any]:
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


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        try:
            report = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with _registry_lock:
                target = _registry.get(report["id"])
            if target is not None:
                target._receive(report)
            self.send_response(204)
        except (ValueError, KeyError):
            self.send_response(400)
        self.end_headers()

    def log_message(self, *args: Any) -> None:  # keep the driver's console quiet
        pass


class _Collector:
    def __init__(self) -> None:
        host = os.environ.get("AIOSPARK_METRICS_HOST", "127.0.0.1")
        self.server = ThreadingHTTPServer((host, 0), _Handler)
        self.server.daemon_threads = True
        self.address = f"http://{host}:{self.server.server_address[1]}/report"
        thread = threading.Thread(target=self.server.serve_forever, name="aiospark-metrics", daemon=True)
        thread.start()


def collector() -> _Collector:
    """The driver process's metrics collector, started on first use."""
    global _collector
    with _registry_lock:
        if _collector is None:
            _collector = _Collector()
        return _collector
