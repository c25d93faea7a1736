"""A batch's queue entry: :class:`Batch`, holding several elements, and :class:`BatchRow`, one of them.

A batch is one queue entry holding up to ``batch_size`` elements, values and timestamps side by
side: capacity still counts elements (``size``), ordered output stays in input order, and its
elements leave through the operator's one emit path, each with its own timestamp. It completes
once it is closed (no element joins any more) and every element has an outcome -- the outcomes of
a whole call at once (``set_outputs``), or of one element (``row_done``, through its
:class:`BatchRow`, made only when an element needs a path of its own: its error, its timeout, its
identity). The calls that give the outcomes: :mod:`aiospark.core.batches`.

Example::

    batch = Batch(loop.time())        # enters the queue now: its deadline counts from here
    queue.add(batch)
    batch.add("a", None); batch.add("b", None)
    batch.close()                     # full: no element joins any more
    batch.set_outputs(None, ["A", "B"], True)   # one output per element: the entry completes
"""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, repeat
from typing import Any

from .call_entry import Call
from .elements import Record, StreamElement
from .result_future import ResultFuture
from .splits import SplitTree

_new = tuple.__new__  # a Record without NamedTuple's Python-level __new__ (once per element)


def _drain(iterator: Iterable[Any]) -> None:
    """Run ``iterator`` to its end in C, keeping nothing."""
    deque(iterator, maxlen=0)


class Batch(Call):
    """One batch: a queue entry holding several elements (values and timestamps side by side).

    ``outputs`` holds each element's outcome once known: one output per element when ``single``
    (the whole batch answered by one call), else a list of outputs per element (None: pending).
    The entry completes once it is closed (no element joins any more) and every element has an
    outcome.
    """

    __slots__ = ("values", "stamps", "left", "outputs", "single", "closed", "tasks", "rows", "skipped", "delays",
                 "splits")

    def __init__(self, started: float):
        super().__init__(None, None, started)
        self.values: list[Any] = []
        self.stamps: list[Any] = []
        self.left = 0  # elements without an outcome
        self.outputs: list[Any] | None = None
        self.single = False
        self.closed = False
        #: its calls running (more than one after a split), each with its done callback
        self.tasks: dict[asyncio.Task[Any], Callable[[asyncio.Task[Any]], None]] = {}
        self.rows: dict[int, BatchRow] | None = None  # per-element handles, made when needed
        self.skipped: set[int] | None = None  # elements not called: recorded, or sharing a call
        #: the back-off delays left to every call of the batch (its halves do not start over)
        self.delays: Iterator[float] | None = None
        #: its failed call's splits, once it failed with an error a split may fix
        self.splits: SplitTree | None = None

    # ------------------------------------------------------------------ filling
    def add(self, value: Any, timestamp: Any) -> int:
        """Add an element; returns its index in the batch."""
        self.values.append(value)
        self.stamps.append(timestamp)
        self.left += 1
        return len(self.values) - 1

    def extend(self, values: Sequence[Any]) -> None:
        """Add elements without timestamps."""
        self.values.extend(values)
        self.stamps += [None] * len(values)
        self.left += len(values)

    def row(self, index: int) -> BatchRow:
        """The handle of element ``index`` (made on first use)."""
        rows = self.rows
        if rows is None:
            rows = self.rows = {}
        handle = rows.get(index)
        if handle is None:
            handle = rows[index] = BatchRow(self, index)
        return handle

    def skip(self, index: int) -> None:
        """Element ``index`` gets its outcome without this batch's call."""
        if self.skipped is None:
            self.skipped = set()
        self.skipped.add(index)

    def to_call(self) -> list[int] | None:
        """Indices of the elements the batch's call is for (None: all of them)."""
        if self.skipped is None:
            return None
        return [i for i in range(len(self.values)) if i not in self.skipped]

    def close(self) -> None:
        self.closed = True
        self._complete_if_settled()

    # ------------------------------------------------------------------ outcomes
    def set_outputs(self, indices: list[int] | None, results: list[Any], single: bool) -> None:
        """Outcomes of the elements at ``indices`` (None: all): one output each when ``single``,
        else a list of outputs each."""
        if indices is None and self.outputs is None:
            self.outputs, self.single = results, single
            self.left -= len(results)
        else:
            outputs = self._per_element()
            if indices is None:
                indices = list(range(len(self.values)))
            for i, result in zip(indices, results):
                outputs[i] = [result] if single else result
            self.left -= len(results)
        self._complete_if_settled()

    def row_done(self, index: int, results: list[Any]) -> None:
        self._per_element()[index] = results
        self.left -= 1
        self._complete_if_settled()

    def _per_element(self) -> list[Any]:
        outputs = self.outputs
        if outputs is None:
            outputs = self.outputs = []
        if len(outputs) < len(self.values):  # elements joined since (it is still being filled)
            outputs.extend([None] * (len(self.values) - len(outputs)))
        return outputs

    def _complete_if_settled(self) -> None:
        if self.closed and self.left == 0 and not self._done:
            ResultFuture.complete(self, [])

    # ------------------------------------------------------------------ the queue's view
    @property
    def size(self) -> int:  # type: ignore[override]
        """Elements held: what the batch counts against capacity."""
        return len(self.values)

    def inputs(self) -> list[StreamElement]:
        return [_new(Record, (v, ts)) for v, ts in zip(self.values, self.stamps)]

    def emitted(self) -> list[StreamElement]:
        out: list[StreamElement] = []
        self.emit_to(out.append)
        return out

    def emit_to(self, output: Callable[[StreamElement], object]) -> None:
        """Every element's outputs, in element order, each with its element's timestamp."""
        if self.single:
            pairs: Iterable[tuple[Any, Any]] = zip(self.outputs or (), self.stamps)
        else:  # (output, its element's timestamp) for every output of every element
            pairs = chain.from_iterable(map(zip, self.outputs or (), map(repeat, self.stamps)))
        # the loop over the batch runs in C (map, drained by a zero-length deque): per element it
        # is only the Record and the output call, which a Python loop costs twice over
        _drain(map(output, map(_new, repeat(Record), pairs)))

    def emit_values_to(self, output: Callable[[list[Any]], object]) -> None:
        """Every element's outputs as plain values, in element order, in one list."""
        outputs = self.outputs or []
        output(outputs if self.single else list(chain.from_iterable(outputs)))

    def running_tasks(self) -> list[asyncio.Task[Any]]:
        tasks = list(self.tasks)
        for row in (self.rows or {}).values():
            tasks += row.running_tasks()
        return tasks

    def __repr__(self) -> str:
        state = "done" if self._done else "filling" if not self.closed else "running"
        return f"<Batch {state} of {len(self.values)}>"


class BatchRow(Call):
    """One element of a :class:`Batch`, as a call of its own for the per-element paths (its
    error, its timeout, its identity). Completing it settles that element in the batch."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: Batch, index: int):
        super().__init__(batch.values[index], batch.stamps[index], batch.started)
        self.batch = batch
        self.index = index

    def complete(self, results: Any) -> None:
        if self._done:
            return
        self._done = True
        self.batch.row_done(self.index, results if type(results) is list else list(results))
