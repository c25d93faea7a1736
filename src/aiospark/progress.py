"""A one-line progress display for the CLI: rows done, rows/s, calls in flight, errors.

It reads an :class:`aiospark.Metrics` (which tasks update every half second) and rewrites one
terminal line in place. On a stream that is not a terminal it prints nothing while running and
one summary line at the end, so logs and CI output stay clean.

rows/s has one definition everywhere (:func:`rate`): rows emitted so far divided by the seconds
since the block started (the Spark job, not the session start-up before it). ``aiospark enrich``
prints its summary from the same numbers (``summary=False`` and :meth:`Progress.finish`).

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


def rate(rows: int, seconds: float) -> float:
    """The one rows/s figure: ``rows`` over ``seconds`` (0 while no time has passed).

    Example::

        rate(1000, 2.0)   # 500.0
    """
    return rows / seconds if seconds > 0 else 0.0


def format_rate(rows_per_second: float) -> str:
    """How rows/s is printed (progress line and summaries): ``"1,234"``, ``"0.4"`` below 10.

    Example::

        format_rate(1234.4)   # '1,234'
    """
    return f"{rows_per_second:,.1f}" if rows_per_second < 10 else f"{rows_per_second:,.0f}"


class Progress:
    """Shows ``metrics.progress()`` on one line, every ``interval`` seconds, while the block runs.

    With ``summary=False`` the block's end prints nothing; call :meth:`finish` with the exact row
    count to print the last line (the caller's summary then uses :attr:`elapsed` and :func:`rate`).
    """

    def __init__(self, metrics: Any, stream: Optional[TextIO] = None, *, interval: float = 0.5,
                 live: Optional[bool] = None, label: str = "", summary: bool = True):
        self.metrics = metrics
        self.stream = stream or sys.stderr
        self.interval = interval
        self.live = self.stream.isatty() if live is None else live
        self.label = label
        self.summary = summary
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = 0.0
        self._ended: Optional[float] = None
        self._width = 0

    @property
    def elapsed(self) -> float:
        """Seconds since the block started (frozen when it ended)."""
        end = self._ended if self._ended is not None else time.monotonic()
        return max(end - self._started, 0.0)

    def line(self, rows: Optional[int] = None) -> str:
        """The progress line (``rows`` replaces the metrics' count, e.g. the rows actually written)."""
        p = self.metrics.progress()
        rows = p["rows"] if rows is None else rows
        elapsed = self.elapsed
        prefix = f"{self.label}: " if self.label else ""
        return (f"{prefix}{rows:,} rows  {format_rate(rate(rows, elapsed))} rows/s  {p['inflight']:,} in flight  "
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
        self._ended = time.monotonic()
        if self.summary:
            self.finish()

    def finish(self, rows: Optional[int] = None) -> None:
        """Print the last line (in place of the live one on a terminal)."""
        if self.live:
            self._write(self.line(rows), end="\n")
        else:
            self.stream.write(self.line(rows) + "\n")
            self.stream.flush()
