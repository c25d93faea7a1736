"""The applications' progress block: ``with Progress(metrics): <action>`` shows the job's progress
while the block runs (the CLI's ``enrich`` and ``demo``). The entry points' ``progress=True`` is
:mod:`aiospark.spark.progress_live`; both print :func:`aiospark.spark.progress.format_line`.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from ..spark.progress import LOG_EVERY, ProgressOptions, format_line, format_rate, rate
from ..spark.progress_live import JobView, tracker_of

__all__ = ["Progress", "format_rate", "rate"]


class Progress:
    """Shows ``metrics.progress()`` while the block runs: in place every ``interval`` seconds on a
    terminal, one plain line every ``log_every`` seconds otherwise, and a last line at the end.

    With ``summary=False`` the block's end prints nothing; call :meth:`finish` with the exact row
    count to print the last line (the caller's summary then uses :attr:`elapsed` and :func:`rate`).

    Example::

        m = aiospark.Metrics("enrich")
        with Progress(m):
            aiospark.unordered_wait(df, fn, schema, metrics=m).write.parquet(out)
    """

    def __init__(self, metrics: Any, stream: TextIO | None = None, *, interval: float = 0.5,
                 live: bool | None = None, label: str = "", summary: bool = True, log_every: float = LOG_EVERY):
        self.metrics = metrics
        self.stream = stream or sys.stderr
        self.interval = interval
        self.log_every = log_every
        self.live = self.stream.isatty() if live is None else live
        self.label = label
        self.summary = summary
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._ended: float | None = None
        self._width = 0
        #: this block's task reports (tasks done of the stage's total, retries, tokens, ETA), when the
        #: metrics can tell them (``Metrics.on_report``); else ``metrics.progress()`` alone
        self._view: Any = None

    @property
    def elapsed(self) -> float:
        """Seconds since the block started (frozen when it ended)."""
        end = self._ended if self._ended is not None else time.monotonic()
        return max(end - self._started, 0.0)

    def line(self, rows: int | None = None, final: bool = False) -> str:
        """The progress line (``rows`` replaces the metrics' count, e.g. the rows actually written)."""
        view = self._view
        if view is not None and view.tasks:
            return view.line(time.monotonic(), elapsed=self.elapsed, rows=rows, final=final)
        p = dict(self.metrics.progress())
        if rows is not None:
            p["rows"] = rows
        return format_line(p, self.elapsed, self.label, final=final)

    def _feed(self, report: dict[str, Any]) -> None:
        if self._ended is None and self._view is not None:
            self._view.add(report)

    def _write(self, text: str, end: str = "") -> None:
        pad = max(self._width - len(text), 0)
        self.stream.write("\r" + text + " " * pad + end)
        self.stream.flush()
        self._width = len(text)

    def _run(self) -> None:
        every = self.interval if self.live else self.log_every
        while not self._stop.wait(every):
            if self.live:
                self._write(self.line())
            else:
                self.stream.write(self.line() + "\n")
                self.stream.flush()

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        if callable(getattr(self.metrics, "on_report", None)):
            self._view = JobView(self.label, ProgressOptions(), None, tracker_of(None), None)
            self.metrics.on_report(self._feed)
        self._thread = threading.Thread(target=self._run, name="aiospark-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._ended = time.monotonic()
        if self.summary:
            self.finish()

    def finish(self, rows: int | None = None) -> None:
        """Print the last line (in place of the live one on a terminal)."""
        if self.live:
            self._write(self.line(rows, final=True), end="\n")
        else:
            self.stream.write(self.line(rows, final=True) + "\n")
            self.stream.flush()
