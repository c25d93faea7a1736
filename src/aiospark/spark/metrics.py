"""Metrics users can see: per-task operator metrics, summed for the job, on the driver.

Every entry point takes ``metrics=aiospark.Metrics()`` (and makes one when not given, reachable as
``out_df.aiospark_metrics``). Each task reports its :class:`~aiospark.core.metrics.OperatorMetrics`
to a small HTTP collector in the driver process: progress every half second while it runs and a
final report when it ends. This works the same for classic and Spark Connect sessions, because the
collector lives in the process that defined the operator. Reporting never fails a task: if the
collector cannot be reached, the task logs its metrics (logger ``aiospark``) instead.

The collector is the driver's endpoint (:mod:`aiospark.spark.endpoint`, where it listens and how
it checks requests; budgets lease units through it too): ``POST /report`` accepts only reports
signed with the secret of a live ``Metrics`` (shipped to the tasks inside the pickled reporter),
of at most 1 MiB, holding metrics it can read; anything else is refused (403, 413, 400).

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
from typing import Any

from ..budget.signing import sign
from ..core.metrics import OperatorMetrics
from .endpoint import collector, driver_host, register_endpoint

log = logging.getLogger("aiospark")

#: How often a running task reports progress.
PROGRESS_SECONDS = 0.5
#: Where reports go on the driver's endpoint
PATH = "/report"

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
        return (MetricsReporter, (self.id, self.name, collector(driver_host()).base + PATH, self._secret))


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


def _report_secret(report: dict[str, Any]) -> str | None:
    with _registry_lock:
        target = _registry.get(str(report.get("id")))
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


register_endpoint(PATH, _receive_report, _report_secret)
