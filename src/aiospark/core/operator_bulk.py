"""How elements enter the operator in numbers: a slice at a time, into batches, or as recorded runs.

:class:`BulkInput` is a part of :class:`~aiospark.core.operator.AsyncWaitOperator` (a mixin: these
run once per element or per slice, as methods of the operator, on its state). The one-element
path, ``try_process``, stays in the operator; with ``batch_size`` it hands the element to
``_join_batch`` here. ``try_process_many`` takes a slice of values while there is room: a batch at a
time (``batch_size``), a run of recorded outcomes as one entry (a journal), else element by element.
A batch's results come back through ``_rows_over`` (a whole call's, in one report) and leave, as
every entry's, through the operator's one emit path.

Example (a driver holding its input in memory)::

    pos = 0
    while pos < len(values):
        pos += op.try_process_many(values, pos)
        if pos < len(values):
            await op.wait_for_space()
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .adaptive import AdaptiveConcurrency
from .batch_entry import Batch
from .batches import BatchCaller
from .calls import Caller
from .deadlines import Deadlines
from .durable import TaskJournal
from .errors import AsyncFunctionError
from .identities import Identities, RecordedRun
from .key_order import KeyTurns
from .queues import ElementQueue


class BulkInput:
    """The operator's input in numbers and into batches (see the module docstring); the
    operator's ``__init__`` and ``open()`` set the state declared here."""

    capacity: int
    adaptive: AdaptiveConcurrency | None
    batch_size: int | None
    inflight: int
    _held: int
    _queue: ElementQueue
    _caller: Caller
    _batches: BatchCaller | None
    _identities: Identities | None
    _turns: KeyTurns | None
    _journal: TaskJournal | None
    _deadlines: Deadlines | None
    _loop: asyncio.AbstractEventLoop | None
    _failure: AsyncFunctionError | None
    _closed: bool

    if TYPE_CHECKING:  # the operator's own
        def try_process(self, value: Any, timestamp: Any = None) -> bool: ...
        def _check(self) -> None: ...

    def try_process_many(self, values: Sequence[Any], start: int = 0) -> int:
        """Start the calls for ``values[start:]`` (no timestamps) while there is room; returns
        how many were taken (0 when there is no room).

        The same as calling :meth:`try_process` for each value until it returns ``False``; with
        ``batch_size`` (and no journal or adaptive capacity) the values join batches a slice at a
        time instead of one by one. For drivers holding input in memory::

            pos = 0
            while pos < len(values):
                pos += op.try_process_many(values, pos)
                if pos < len(values):
                    await op.wait_for_space()
        """
        end = len(values)
        batches = self._batches
        identities = self._identities
        if batches is None and identities is not None and self._turns is None and identities.looks_ahead:
            return self._take_journaled(values, start, identities)
        if batches is None or self._journal is not None or self.adaptive is not None:
            taken, try_process = start, self.try_process
            while taken < end and try_process(values[taken]):
                taken += 1
            return taken - start
        size, metrics, first = self.batch_size, self._caller.metrics, start
        while start < end:
            if self._failure is not None or self._closed or self._loop is None:
                self._check()  # raises (a batch started below may have failed the operator)
            room = self.capacity - self._held
            if room <= 0:
                break
            batch = batches.filling
            if batch is None:
                batch = self._open_batch()
            count = min(room, size - len(batch.values), end - start)  # type: ignore[operator]
            batch.extend(values[start:start + count])
            start += count
            self._held += count
            self.inflight += count
            if self.inflight > metrics.inflight_peak:
                metrics.inflight_peak = self.inflight
            if len(batch.values) >= size:  # type: ignore[operator]
                batches.flush()
        return start - first

    def _take_journaled(self, values: Sequence[Any], start: int, identities: Identities) -> int:
        """:meth:`try_process_many` with a journal: each run of consecutive elements whose
        outcomes are recorded enters the queue as one entry completed on the spot
        (:class:`~aiospark.core.identities.RecordedRun`: no call, no task, no deadline), emitted
        through the one emit path in its place; every other element goes through
        :meth:`try_process`. A rerun of a finished journal costs little more than reading it."""
        end, first, queue = len(values), start, self._queue
        while start < end:
            if self._failure is not None or self._closed or self._loop is None:
                self._check()
            room = self.capacity - self._held
            if room <= 0:
                break
            n, outputs = identities.recorded_run(values, start, min(end, start + room))
            if n:
                run = RecordedRun(values[start:start + n])
                queue.add(run)
                self._held += n
                start += n
                run.complete(outputs)  # -> the queue -> _emit_completed
                if n == room:
                    continue
            if start < end:
                if not self.try_process(values[start]):
                    break
                start += 1
        return start - first

    def _join_batch(self, value: Any, timestamp: Any) -> None:
        """The element joins the batch being filled (a new one enters the queue if there is none)."""
        batches = self._batches
        batch = batches.filling or self._open_batch()  # type: ignore[union-attr]
        index = batch.add(value, timestamp)
        # identities matter to a journal only: a batch call has no idempotency key of one element
        if self._identities is not None and self._identities.admit(batch.row(index)):
            batch.skip(index)  # recorded, or it shares the call of an equal element
        if len(batch.values) >= self.batch_size:  # type: ignore[operator]
            batches.flush()  # type: ignore[union-attr]

    def _open_batch(self) -> Batch:
        """A new batch to fill enters the queue (its deadline counts from now)."""
        batch = self._batches.open_batch(self._loop.time())  # type: ignore[union-attr]
        self._queue.add(batch)
        if self._deadlines is not None:
            self._deadlines.started(batch)
        return batch

    def _rows_over(self, batch: Batch, indices: list[int] | None, results: list[Any], single: bool) -> None:
        """The batch caller's report of a whole call's results (nothing per element to do)."""
        self.inflight -= len(results)
        if self._failure is None and not self._closed:
            batch.set_outputs(indices, results, single)  # -> the queue -> _emit_completed
