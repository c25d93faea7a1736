"""Driver-side helpers of the Spark benchmarks: the local session, the load line, Markdown tables, and
the peak RSS of the Python workers sampled from outside them.

Outside, because a measure taken inside the user's function (``/proc/self/statm``,
``getrusage().ru_maxrss``, as ``memory_flat.py`` does) sees nothing when the function is not called:
a fully recorded journal rerun makes no call at all.

Example::

    spark = local_spark(2)
    with WorkerPeakRss() as rss:
        df.write.format("noop").mode("overwrite").save()
    print(rss.peak, rss.workers)
"""
from __future__ import annotations

import os
import shlex
import statistics
import sys
import threading
from collections.abc import Sequence
from typing import Any

MIB = 1024 * 1024


def local_spark(tasks: int, conf: dict[str, Any] | None = None, *, reuse_workers: bool = True) -> Any:
    """``aiospark.local_session("local[tasks]")`` with Arrow batches of 10,000 rows (as the other
    benchmarks). ``reuse_workers=False``: every task gets a Python worker of its own (forked by
    PySpark's daemon), so a worker's peak RSS is that task's, not the most an earlier job left in it."""
    import aiospark

    settings: dict[str, Any] = {"spark.sql.execution.arrow.maxRecordsPerBatch": 10000,
                                "spark.python.worker.reuse": str(reuse_workers).lower()}
    settings.update(conf or {})
    return aiospark.local_session(f"local[{tasks}]", conf=settings)


def command_line(argv: Sequence[str] | None = None) -> str:
    """How this benchmark was started, to paste next to its tables."""
    args = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", os.path.relpath(sys.argv[0]) if sys.argv[0] else "-m ?", *args])


def load_line(start: Sequence[float], end: Sequence[float]) -> str:
    """The load average at the start and end of a run: rates from a shared machine need it."""
    return (f"load average (1, 5, 15 min): start {', '.join(f'{x:.1f}' for x in start)}; "
            f"end {', '.join(f'{x:.1f}' for x in end)} on {os.cpu_count()} cores")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, the first column left-aligned and the others right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def _status(pid: int, field: str) -> int:
    """``field`` of ``/proc/PID/status`` (VmHWM: peak RSS, VmRSS: RSS now) in bytes, 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class WorkerPeakRss:
    """The peak RSS of each Python worker this driver's Spark runs while the block runs.

    A thread polls the driver's descendants every ``interval`` seconds and keeps, per process, the
    largest VmHWM (the kernel's own peak, so nothing between two polls is missed while the process
    lives; what a worker adds in its last ``interval`` before it exits is). Workers are Python
    processes whose parent is Python (PySpark's daemon forks them); the daemon itself is left out.
    A worker alive before the block has its peak reset to its current RSS on entry
    (``/proc/PID/clear_refs``), so with reused workers the figure is this block's, from what the
    worker still held at its start (``held``) up.
    """

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peaks: dict[int, int] = {}
        self.held = 0  # bytes: the largest RSS of a worker alive at the start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-peak-rss", daemon=True)
        self._kind: dict[int, bool] = {}

    def _workers(self) -> list[int]:
        import psutil

        pids = []
        for proc in psutil.Process().children(recursive=True):
            is_worker = self._kind.get(proc.pid)
            if is_worker is None:
                try:
                    parent = proc.parent()
                    is_worker = "python" in proc.name() and parent is not None and "python" in parent.name()
                except psutil.Error:
                    continue
                self._kind[proc.pid] = is_worker
            if is_worker:
                pids.append(proc.pid)
        return pids

    def _poll(self) -> None:
        for pid in self._workers():
            peak = _status(pid, "VmHWM")
            if peak > self.peaks.get(pid, 0):
                self.peaks[pid] = peak

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._poll()

    def __enter__(self) -> WorkerPeakRss:
        for pid in self._workers():
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass  # its peak then includes what it held before, as without worker reuse it could not
            self.held = max(self.held, _status(pid, "VmRSS"))
        self._poll()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    @property
    def peak(self) -> int:
        """The largest peak RSS of one worker, bytes (0 if no worker was seen)."""
        return max(self.peaks.values(), default=0)

    @property
    def workers(self) -> int:
        return len(self.peaks)
