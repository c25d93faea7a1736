"""Garbage-collector thresholds while partitions run on the worker loop.

Many calls in flight make the worst case for CPython's generational collector: every call's
objects (its Task, coroutine, timer, future, queue entry, input row) live for the call's latency,
so they survive young collections and are promoted, and with the default gen-0 threshold of 700
the older generations -- the whole worker heap, PySpark and PyArrow included -- are scanned again
and again. Measured here (``docs/benchmarks.md``, GC section): 1,000 calls of 20 ms in flight per
task spent more CPU in the collector than in aiospark, and a gen-0 threshold of 50,000 raised
throughput by about a quarter.

So, while at least one partition runs in this process, the gen-0 threshold is raised to
:data:`DEFAULT_THRESHOLD` (``AIOSPARK_GC_THRESHOLD`` overrides it; ``0`` leaves the collector
alone); the previous thresholds come back when the last partition ends, unless someone else
changed them meanwhile. A collector that is disabled, or already set higher, is left as it is.

Example::

    policy = GcPolicy(50_000)
    policy.enter()      # a partition starts
    ...
    policy.exit()       # it ends: thresholds restored
"""
from __future__ import annotations

import gc
import os

ENV = "AIOSPARK_GC_THRESHOLD"
DEFAULT_THRESHOLD = 50_000


def threshold_from_env() -> int:
    """The gen-0 threshold to use while partitions run (``AIOSPARK_GC_THRESHOLD``, default 50,000)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_THRESHOLD
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{ENV} must be an int >= 0 (0 leaves Python's garbage collector alone), got {raw!r}")
    return value


class GcPolicy:
    """Raises the gen-0 threshold while :meth:`enter` calls outnumber :meth:`exit` calls."""

    def __init__(self, threshold: int):
        self.threshold = threshold
        self.active = 0
        self._saved: tuple[int, ...] | None = None

    def enter(self) -> None:
        self.active += 1
        if self.active != 1 or not self.threshold or not gc.isenabled():
            return
        current = gc.get_threshold()
        if 0 < current[0] < self.threshold:
            self._saved = current
            gc.set_threshold(self.threshold, *current[1:])

    def exit(self) -> None:
        if self.active == 0:
            return
        self.active -= 1
        saved, self._saved = (self._saved, None) if self.active == 0 else (None, self._saved)
        if saved is not None and gc.get_threshold()[0] == self.threshold:
            gc.set_threshold(*saved)
