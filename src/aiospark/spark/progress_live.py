"""``progress=True``: a display per action, started by the first task report, ended by the last.

:func:`attach` registers a listener on the job's ``Metrics`` (``Metrics.on_report``, called on the
driver's collector thread for every report tasks send about every half second). The first report
of an action opens a :class:`JobView` (its own table of this action's task reports, so a second
action on the same DataFrame starts from zero) and hands it to the :class:`Board`: one daemon
thread (``aiospark-progress``) that renders every open view and exits when none is left. A view
closes once every task it saw has sent its final report and no report arrived for ``quiet``
seconds; its last line stays. No thread runs between actions.

Totals come from what the driver already knows, never from an extra job: a report's task name
is ``stage.partition.attempt``, and Spark's status tracker (classic sessions) gives that stage's
number of tasks and how many completed. Budget left is ``Budget.left`` (read on the driver).

Example::

    attach(metrics, ProgressOptions(live=False, log_every=5), label="enrich")
"""
from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .progress import ProgressOptions, format_line

_COUNTERS = ("retries", "rate_limited", "failures", "error_rows")

log = logging.getLogger("aiospark.progress")


class JobView:
    """One action's task reports, summed into the fields :func:`format_line` shows."""

    def __init__(self, label: str, options: ProgressOptions, budget: Any, tracker: Any, sink: Sink | None):
        self.label = label
        self.options = options
        self.budget = budget
        self.tracker = tracker
        self.sink = sink
        self.started = time.monotonic()
        self.last_report = self.started
        self.tasks: dict[str, dict[str, Any]] = {}
        self.stages: set[int] = set()
        self._totals: dict[int, int] = {}
        self.lock = threading.Lock()
        self.closing = False  # set at interpreter exit: show the last line now
        self.next_log = self.started + options.log_every

    def add(self, report: dict[str, Any]) -> None:
        with self.lock:
            self.tasks[report["task"]] = report
            self.last_report = time.monotonic()
            stage = str(report["task"]).split(".", 1)[0]
            if stage.isdigit():
                self.stages.add(int(stage))

    def fields(self) -> dict[str, Any]:
        with self.lock:
            tasks = list(self.tasks.values())
        out: dict[str, Any] = {"rows": 0, "inflight": 0, "running": 0, "finished": 0, "final_rows": 0,
                               "final_tasks": 0, "usage": {}, **{c: 0 for c in _COUNTERS}}
        for t in tasks:
            m = t["metrics"]
            out["rows"] += t["rows"]
            for c in _COUNTERS:
                out[c] += int(m.get(c, 0))
            for name, amount in (m.get("usage") or {}).items():
                out["usage"][name] = out["usage"].get(name, 0) + amount
            if t["final"]:
                out["finished"] += 1
                out["final_tasks"] += 1
                out["final_rows"] += t["rows"]
            else:
                out["running"] += 1
                out["inflight"] += t["inflight"]
        out["errors"] = out["failures"]  # an error row (on_error) is also counted in error_rows: once here
        return out

    def done(self, now: float) -> bool:
        if self.closing:
            return True
        with self.lock:
            ended = bool(self.tasks) and all(t["final"] for t in self.tasks.values())
            return ended and now - self.last_report >= self.options.quiet

    def budget_left(self) -> float | None:
        if self.budget is None:
            return None
        try:
            return float(self.budget.left)
        except Exception:  # a Redis budget that cannot be read: shown without it
            return None

    def task_counts(self) -> tuple[int | None, int | None]:
        """``(tasks, completed)`` of the stages seen, from Spark's status tracker (None, None unknown)."""
        with self.lock:
            stages = sorted(self.stages)
        if self.tracker is None or not stages:
            return None, None
        total = done = 0
        try:
            for stage in stages:
                info = self.tracker.getStageInfo(stage)
                if info is None:  # forgotten by Spark: what we knew stays
                    total += self._totals.get(stage, 0)
                    continue
                self._totals[stage] = info.numTasks
                total += info.numTasks
                done += info.numCompletedTasks
        except Exception:
            return None, None
        return total or None, done

    def line(self, now: float, elapsed: float | None = None, rows: int | None = None,
             final: bool = False) -> str:
        fields = self.fields()
        if rows is not None:
            fields["rows"] = rows
        total, done = self.task_counts()
        return format_line(fields, now - self.started if elapsed is None else elapsed, self.label,
                           budget_left=self.budget_left(), tasks_total=total, tasks_done=done, final=final)


class Sink:
    """Where views are shown: ``"live"`` (a terminal: in place), ``"log"`` (plain lines) or
    ``"jupyter"`` (a display per view, updated in place)."""

    def __init__(self, kind: str, stream: Any):  # None for "jupyter"
        self.kind = kind
        self.stream = stream
        self.handles: dict[int, Any] = {}


def choose_sink(options: ProgressOptions) -> Sink:
    if options.stream is None and options.live is None and _in_kernel():
        return Sink("jupyter", None)
    stream = options.stream or sys.stderr
    live = options.live if options.live is not None else bool(getattr(stream, "isatty", lambda: False)())
    return Sink("live" if live else "log", stream)


def _in_kernel() -> bool:
    """A Jupyter kernel runs here (IPython is imported by then: never imported just to ask)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


class Board:
    """The one thread that renders every open view (so jobs running at once share a terminal)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.views: list[JobView] = []
        self.thread: threading.Thread | None = None
        self.block: dict[int, int] = {}  # id(stream) -> live lines currently shown there
        #: CPU seconds the rendering thread used, over its runs (for the cost measurement)
        self.cpu_seconds = 0.0
        self.wall_seconds = 0.0

    def open(self, view: JobView) -> None:
        with self.lock:
            self.views.append(view)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="aiospark-progress", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        cpu, wall = time.thread_time(), time.monotonic()
        try:
            while True:
                with self.lock:
                    views = list(self.views)
                    if not views:
                        self.thread = None
                        return
                    tick = min(v.options.interval for v in views)
                time.sleep(tick)
                self.render(time.monotonic())
        finally:
            self.cpu_seconds += time.thread_time() - cpu
            self.wall_seconds += time.monotonic() - wall

    def render(self, now: float) -> None:
        with self.lock:
            views = list(self.views)
        ending = [v for v in views if v.done(now)]
        gone = list(ending)
        groups: dict[int, list[JobView]] = {}
        for view in views:
            sink = view.sink
            if sink is None:  # a view without a sink (the CLI's own) is never on the board
                continue
            if sink.kind == "live":
                groups.setdefault(id(sink.stream), []).append(view)
            elif sink.kind == "log":
                if view in ending or now >= view.next_log:
                    view.next_log = now + view.options.log_every
                    gone += _shown([view], _log, view, now)
            else:
                gone += _shown([view], _jupyter, view, sink, now)
        for key, group in groups.items():
            gone += _shown(group, self._live, key, group, ending, now)
        if gone:
            with self.lock:
                self.views = [v for v in self.views if v not in gone]

    def _live(self, key: int, group: list[JobView], ending: list[JobView], now: float) -> None:
        """Rewrite this terminal's block: views that end are printed first and stay; the running
        ones follow, one line each, rewritten in place next time."""
        sink = group[0].sink
        assert sink is not None  # render() groups only views with a sink
        stream = sink.stream
        final = [v for v in group if v in ending]
        running = [v for v in group if v not in ending]
        shown = self.block.get(key, 0)
        up = f"\x1b[{shown - 1}F" if shown > 1 else ("\r" if shown else "")
        lines = [v.line(now) + "\x1b[K" for v in final + running]
        stream.write(up + "\n".join(lines) + ("" if running else "\n"))
        stream.flush()
        self.block[key] = len(running)

    def flush(self) -> None:
        """Show the last line of every open view now (at interpreter exit: a short script's job
        ends before the quiet period does, and its last line must not be lost)."""
        with self.lock:
            views = list(self.views)
        for view in views:
            view.closing = True
        if views:
            try:
                self.render(time.monotonic())
            except Exception:  # streams may be closed at exit
                pass


def _shown(views: list[JobView], show: Callable[..., None], *args: Any) -> list[JobView]:
    """``show(*args)``; if it raised, ``views`` (they stop showing: a closed or broken stream stays
    so), else none. A display that cannot be written never touches the job, nor the other views."""
    try:
        show(*args)
    except Exception as exc:
        log.warning("aiospark: progress of %s stopped showing (%s: %s); the job goes on",
                    ", ".join(repr(v.label) for v in views), type(exc).__name__, exc)
        return views
    return []


def _log(view: JobView, now: float) -> None:
    stream = view.sink.stream  # type: ignore[union-attr]  # a "log" view has a sink
    stream.write(view.line(now) + "\n")
    stream.flush()


def _jupyter(view: JobView, sink: Sink, now: float) -> None:
    from IPython.display import display

    bundle = {"text/plain": view.line(now)}
    handle = sink.handles.get(id(view))
    if handle is None:
        sink.handles[id(view)] = display(bundle, raw=True, display_id=True)
    else:
        handle.update(bundle, raw=True)


BOARD = Board()
atexit.register(BOARD.flush)


def tracker_of(session: Any) -> Any:
    """Spark's status tracker of a classic session (None for Connect, or no session)."""
    try:
        if session is None:
            from pyspark.sql import SparkSession

            session = SparkSession.getActiveSession()
        if session is None or type(session).__module__.startswith("pyspark.sql.connect"):
            return None
        return session.sparkContext.statusTracker()
    except Exception:
        return None


def attach(metrics: Any, options: ProgressOptions, *, label: str = "", budget: Any = None,
           session: Any = None) -> None:
    """Show every action of ``metrics`` from its first report to its last (see the module doc)."""
    tracker = tracker_of(session)
    state: dict[str, JobView | None] = {"view": None}
    lock = threading.Lock()

    def on_report(report: dict[str, Any]) -> None:
        with lock:
            view = state["view"]
            if view is None or view not in BOARD.views:
                if report["final"] and view is not None and report["task"] in view.tasks:
                    return  # a late duplicate of a task the ended view already counted
                view = state["view"] = JobView(label or metrics.name, options, budget, tracker,
                                               choose_sink(options))
                view.add(report)
                BOARD.open(view)
                return
        view.add(report)

    metrics.on_report(on_report)


def watch(metrics: Any, options: ProgressOptions | None, *, label: str = "", budget: Any = None,
          session: Any = None) -> None:
    """Show the progress of every action ``metrics`` sees (``progress=`` of the entry points)."""
    if options is None:
        return
    attach(metrics, options, label=label, budget=budget, session=session)
