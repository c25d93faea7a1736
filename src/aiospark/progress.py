"""A one-line progress display for the CLI: rows done, rows/s, calls in flight, errors.

It reads an :class:`aiospark.Metrics` (which tasks update every half second) and rewrites one
terminal line in place. On a stream that is not a terminal it prints nothing while running and
one summary line at the end, so logs and CI output stay clean.

Example::

    m = aiospark.Metrics("enrich")
    with Progress(m):
        aiospark.unordered_wait(df, fn, schema, metrics=m).write.parquet(out)
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional, TextIO


class Progress:
    """Shows ``metrics.progress()`` on one line, every ``interval`` seconds, while the block runs."""

    def __init__(self, metrics: Any, stream: Optional[TextIO] = None, *, interval: float = 0.5,
                 live: Optional[bool] = None, label: str = ""):
        self.metrics = metrics
        self.stream = stream or sys.stderr
        self.interval = interval
        self.live = self.stream.isatty() if live is None else live
        self.label = label
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = 0.0
        self._width = 0

    def line(self) -> str:
        """The current progress line."""
        p = self.metrics.progress()
        elapsed = max(time.monotonic() - self._started, 1e-9)
        prefix = f"{self.label}: " if self.label else ""
        return (f"{prefix}{p['rows']:,} rows  {p['rows'] / elapsed:,.0f} rows/s  {p['inflight']:,} in flight  "
                f"{p['errors']:,} errors  {elapsed:,.1f} s")

    def _write(self, text: str, end: str = "") -> None:
        pad = max(self._width - len(text), 0)
        self.stream.write("\r" + text + " " * pad + end)
        self.stream.flush()
        self._width = len(text)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._write(self.line())

    def __enter__(self) -> "Progress":
        self._started = time.monotonic()
        if self.live:
            self._thread = threading.Thread(target=self._run, name="aiospark-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.live:
            self._write(self.line(), end="\n")
        else:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
