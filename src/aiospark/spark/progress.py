"""Progress while a job runs: rows, rows/s, in flight, errors, retries, tokens, budget left, ETA.

Two ways in, one line format (:func:`format_line`):

* ``progress=True`` on ``ordered_wait``, ``unordered_wait``, ``async_udf`` and ``lookup_join``: the
  entry points return lazy DataFrames, so the display attaches to the *action*: it starts when the
  first task report of an action reaches the driver and ends after every task it saw has sent its
  final report and nothing more arrived for ``quiet`` seconds (:mod:`aiospark.spark.progress_live`).
* :class:`aiospark.app.progress.Progress`, a context manager around the action (what the CLI uses):
  it starts at once and says ``starting workers...`` until the first report arrives.

Where it goes: a terminal gets a line per running job, rewritten in place every ``interval``
seconds; Jupyter (IPython importable and a kernel running) a display updated in place; anything
else (a scheduler's log) one plain line every ``log_every`` seconds (default 30) and a last one.

rows/s has one definition everywhere (:func:`rate`): rows emitted so far divided by the seconds
since the display started. ``aiospark enrich`` prints its summary from the same numbers
(``summary=False`` and ``Progress.finish``).

Example::

    out = aiospark.unordered_wait(df, fetch, "id LONG, body STRING", progress=True)
    out.write.parquet(path)     # enrich: 12,000 rows  2,410 rows/s  200 in flight ... tasks 1/4 ETA 14 s
"""
from __future__ import annotations

import math
from typing import Any, TextIO

#: seconds between plain log lines when the output is not a terminal
LOG_EVERY = 30.0


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


class ProgressOptions:
    """How ``progress=`` shows a job (``progress=True`` means ``ProgressOptions()``).

    ``log_every``: seconds between plain lines when the output is not a terminal; ``interval``:
    seconds between in-place updates (terminal, Jupyter); ``quiet``: seconds without a report,
    after every task ended, before the display ends; ``stream``: where to write (default
    ``sys.stderr``; Jupyter's display when a kernel runs); ``live``: force in-place (True) or plain
    log lines (False) instead of asking ``stream.isatty()``.

    Example::

        aiospark.ordered_wait(df, fn, schema, progress=aiospark.ProgressOptions(log_every=60))
    """

    def __init__(self, *, log_every: float = LOG_EVERY, interval: float = 0.5, quiet: float = 2.0,
                 stream: TextIO | None = None, live: bool | None = None):
        for name, value in (("log_every", log_every), ("interval", interval), ("quiet", quiet)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"ProgressOptions({name}=...) takes a number of seconds > 0, got {value!r}")
        if stream is not None and not callable(getattr(stream, "write", None)):
            raise TypeError(f"ProgressOptions(stream=...) takes a writable text stream, got {type(stream).__name__}")
        if live is not None and not isinstance(live, bool):
            raise TypeError(f"ProgressOptions(live=...) takes True, False or None, got {live!r}")
        self.log_every = float(log_every)
        self.interval = float(interval)
        self.quiet = float(quiet)
        self.stream = stream
        self.live = live

    def __repr__(self) -> str:
        return (f"ProgressOptions(log_every={self.log_every:g}, interval={self.interval:g}, quiet={self.quiet:g}"
                + (f", live={self.live}" if self.live is not None else "") + ")")


def check_progress(progress: Any, what: str) -> ProgressOptions | None:
    """``progress=`` of an entry point, checked: None when off."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return ProgressOptions()
    if isinstance(progress, ProgressOptions):
        return progress
    raise TypeError(f"{what}(progress=...) takes True, False or an aiospark.ProgressOptions, "
                    f"got {progress!r}")


def _tokens(usage: dict[str, float]) -> float | None:
    if "total_tokens" in usage:
        return usage["total_tokens"]
    parts = [usage[k] for k in ("prompt_tokens", "completion_tokens") if k in usage]
    return sum(parts) if parts else None


def format_eta(seconds: float) -> str:
    """``"42 s"``, ``"3 min 5 s"``, ``"2 h 10 min"``."""
    seconds = max(int(round(seconds)), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def format_line(p: dict[str, Any], elapsed: float, label: str = "", *, budget_left: float | None = None,
                tasks_total: int | None = None, tasks_done: int | None = None, final: bool = False) -> str:
    """One progress line from ``p`` (the keys of ``Metrics.progress()``, plus optional ``retries``,
    ``rate_limited``, ``usage`` and ``final_rows``/``final_tasks``: rows of the tasks that ended).

    ETA needs the number of tasks (Spark's, from the stage) and one finished task: the rows still
    to come are estimated as the finished tasks' average times the tasks left, at the rate so far.

    Example::

        format_line({"rows": 500, "inflight": 7, "errors": 0, "running": 2, "finished": 0}, 2.0)
        # '500 rows  250 rows/s  7 in flight  0 errors  2.0 s'
    """
    prefix = f"{label}: " if label else ""
    if not final and not p.get("running") and not p.get("finished") and not p.get("rows"):
        return f"{prefix}starting workers...  {elapsed:,.1f} s"
    rows = p["rows"]
    speed = rate(rows, elapsed)
    parts = [f"{rows:,} rows", f"{format_rate(speed)} rows/s", f"{p['inflight']:,} in flight",
             f"{p['errors']:,} errors"]
    if p.get("retries"):
        parts.append(f"{p['retries']:,} retries")
    if p.get("rate_limited"):
        parts.append(f"{p['rate_limited']:,} rate-limited")
    tokens = _tokens(p.get("usage") or {})
    if tokens is not None:
        parts.append(f"{tokens:,.0f} tokens")
    cost = (p.get("usage") or {}).get("cost")
    if cost is not None:  # a connector's price= (in the price's currency)
        parts.append(f"cost {cost:,.4f}")
    if budget_left is not None:
        parts.append(f"budget left {budget_left:,.6g}")
    if tasks_total:
        done = tasks_done if tasks_done is not None else p.get("finished", 0)
        parts.append(f"tasks {done:,}/{tasks_total:,}")
        finished_tasks, finished_rows = p.get("final_tasks", 0), p.get("final_rows", 0)
        if finished_tasks and speed > 0 and done < tasks_total:
            expected = finished_rows / finished_tasks * tasks_total
            parts.append(f"ETA {format_eta(max(expected - rows, 0) / speed)}")
    parts.append(f"{elapsed:,.1f} s")
    return prefix + "  ".join(parts)
