"""Ctrl-C during ``aiospark enrich``: cancel Spark's jobs and stop, without a py4j traceback.

PySpark's own SIGINT handler calls ``cancelAllJobs`` from inside the signal handler, on the main
thread's py4j connection, which is busy waiting for the running job: py4j fails with a re-entrant
call, logs two tracebacks, and the ``KeyboardInterrupt`` escapes with a third (~100 lines). Here
the handler only records the interrupt and starts a thread that cancels the jobs through its own
connection (PySpark pins one per thread), again every half second until the run has ended, so a
job that starts after the first cancel is cancelled too. The main thread's job then fails;
:func:`interruptible` turns whatever it raised into :class:`KeyboardInterrupt`. A second Ctrl-C
raises at once.

Example::

    with interruptible(spark):
        run_enrich(...)   # Ctrl-C -> KeyboardInterrupt once Spark's jobs are cancelled
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _Interrupts:
    def __init__(self, spark: Any):
        self.spark = spark
        self.hit = threading.Event()
        self.done = threading.Event()

    def handler(self, signum: int, frame: Any) -> None:
        if self.hit.is_set():  # a second Ctrl-C: stop waiting for the cancel
            raise KeyboardInterrupt
        self.hit.set()
        threading.Thread(target=self._cancel, name="aiospark-cancel", daemon=True).start()

    def _cancel(self) -> None:
        while not self.done.is_set():
            try:
                self.spark.sparkContext.cancelAllJobs()
            except Exception:  # Spark is stopping: nothing left to cancel
                return
            self.done.wait(0.5)


@contextmanager
def interruptible(spark: Any) -> Iterator[None]:
    """Within it, SIGINT cancels ``spark``'s jobs and the block ends with :class:`KeyboardInterrupt`
    (from the main thread only; elsewhere it changes nothing). A block that finished before the
    jobs were cancelled ends normally."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = _Interrupts(spark)
    previous = signal.signal(signal.SIGINT, state.handler)
    try:
        yield
    except BaseException as exc:
        if state.hit.is_set() and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise
    finally:
        state.done.set()
        signal.signal(signal.SIGINT, previous)
