"""Batched calls: many elements per call of a function that takes a list and returns a list.

Beyond Flink (FLINK-38825 "async batch operator" is still open there). A batch is one queue
entry (:class:`Batch`) holding up to ``batch_size`` elements: capacity still counts elements,
ordered output stays in input order, and a batch's elements leave through the operator's one
emit path, each with its own timestamp. The life of a batch, top-down:

1. The operator puts the first element that finds no batch being filled into a new
   :class:`~aiospark.core.batch_entry.Batch` (:meth:`BatchCaller.open_batch`; the entry and its
   outcomes: :mod:`aiospark.core.batch_entry`), which enters the queue at once -- its deadline
   counts from there. Later elements join it until it holds ``batch_size`` elements,
   ``batch_delay`` seconds have passed (one loop timer per batch), a watermark comes, or input ends
   (:meth:`BatchCaller.flush`).
2. The batch runs as one call (:meth:`~aiospark.core.calls.Caller._attempts`, in one real
   ``asyncio.Task``): rate-limit wait (charged the sum of the elements' costs), attempts, retries
   and back-offs apply to the batch as a whole.
3. When the call is over (:meth:`BatchCaller._run_over`):

   * results -- exactly one per element, in order -- go to the operator in one report for the
     whole batch (no object per element); a list of another length fails every element of the
     batch with an error naming both numbers;
   * an exception (after retries) that may belong to some of its rows splits the batch in halves,
     each run as a call of its own; while every part fails alike only one part (the probe) is
     split further, and once a part succeeds every failed part is, so a single bad element ends
     up failing alone and its neighbours succeed, while a dead service costs O(log n) calls
     (:mod:`aiospark.core.splits`: which errors, the probe rule, and the calls it may cost); any
     other exception is every element's error;
   * a timeout (the batch's deadline: its first element's) times out every element still waiting
     for an outcome: each gets ``function.timeout(value)``'s results (or ``AsyncTimeoutError``). A
     timeout says the service is slow, not that an element is bad, so it is not split.

Each attempt gets its own copy of the values (a list the function may consume or pad, and a copy
of each row dict in it: what the function changes never reaches a retry, a part of a split or an
error), and the function's returned list is copied when the call is over (it may reuse it for its next call): the
batch counts the elements it sent, so every path out of a call settles each of them exactly once.

Everything that concerns one element -- its error (``on_error``, or the failure naming it), its
timeout results, its journal record or recorded outcome -- goes through a per-element handle
(:class:`~aiospark.core.batch_entry.BatchRow`, a :class:`~aiospark.core.call_entry.Call`) and the operator's per-element report,
made only when it is needed.

Example (what the operator does for each element)::

    caller = BatchCaller(embed_many, report=operator_report, report_rows=operator_rows, timeout=30.0,
                         retry=None, batch_size=64, batch_delay=0.01)
    caller.bind(loop, inflight=lambda: 1)
    batch = caller.filling or caller.open_batch(loop.time())   # a new one enters the queue
    batch.add(value, timestamp)
    ...
    caller.flush()          # end of input: start the last, partial batch now
"""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from typing import Any

from .batch_entry import Batch
from .call_entry import CALL, PREDICATES, Call
from .calls import Caller, _NotAList
from .errors import BadInput
from .splits import SplitTree, may_be_rows

#: ``report_rows(batch, indices, results, single)``: a call of ``batch`` gave ``results`` for
#: its elements at ``indices`` (None: all of them); ``single``: one output per element, else a list.
ReportRows = Callable[["Batch", "list[int] | None", list[Any], bool], None]


class BatchError(ValueError):
    """A batch function broke its contract (e.g. returned the wrong number of results)."""


def own_inputs(values: list[Any]) -> list[Any]:
    """A batch call's own list of inputs: a new list and, for a list of rows (its first value a
    dict: what the Spark entry points pass), a copy of each row, so the function may consume, pad
    or change them and a retry, a part of a split or an error row still sees each input as it
    came. Lists and dicts nested inside a row are shared, not copied.

    Example::

        >>> rows = [{"id": 1}]
        >>> own_inputs(rows)[0] is rows[0]
        False
    """
    if values and type(values[0]) is dict:
        return [value.copy() if type(value) is dict else value for value in values]
    return list(values)  # in C: not rows


class BatchCaller(Caller):
    """Makes the calls of one operator in batches (see the module docstring).

    ``function`` is an ``async def f(values: list) -> list`` (one result per value: the output of
    that value) or an :class:`~aiospark.core.AsyncFunction` whose ``async_invoke(values)`` returns
    one list of outputs per value. ``report_rows`` takes the results of a whole call; the other
    arguments are :class:`~aiospark.core.calls.Caller`'s.
    """

    def __init__(self, function: Any, *, batch_size: int, batch_delay: float, report_rows: ReportRows,
                 **kwargs: Any):
        super().__init__(function, **kwargs)
        self.takes_list = True  # a batch's result is a list, whatever the kind of function
        invoke = self.invoke

        def own_copy(values: list[Any]) -> Any:
            return invoke(own_inputs(values))  # the function's own list and rows: it may consume or change them

        self.invoke = own_copy
        self.batch_size = batch_size
        self.batch_delay = batch_delay
        self._report_rows = report_rows
        self.batches = 0
        #: the batch elements join (already in the queue), None until the next element comes
        self.filling: Batch | None = None
        self._timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ the batch being filled
    def open_batch(self, now: float) -> Batch:
        """A new batch to fill, entering the queue at ``now``; it starts at the latest
        ``batch_delay`` seconds from now."""
        batch = self.filling = Batch(now)
        self._timer = self._loop.call_later(self.batch_delay, self.flush)
        return batch

    def flush(self) -> None:
        """Start the batch being filled now (it is full, its delay passed, a watermark came or
        input ended)."""
        batch = self._take_filling()
        if batch is None or self.stopped:
            return
        indices = batch.to_call()
        if indices is None or indices:
            self._run(batch, indices)

    def _take_filling(self) -> Batch | None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self.filling = self.filling, None
        if batch is not None:
            batch.close()
        return batch

    def time_out(self, call: Call) -> None:
        """The batch's deadline passed: cancel its calls (every element still waiting times out
        once they have unwound); a batch still being filled is closed and its elements time out
        without a call."""
        batch = call
        assert isinstance(batch, Batch)  # a batching operator's entries are batches
        if batch.timed_out:
            return
        batch.timed_out = True
        if self.adaptive is not None:
            self.adaptive.on_overload(self.timeout)
        if batch is self.filling:
            self._take_filling()
            self._time_out_rows(batch, batch.to_call())
            return
        if batch.splits is not None:  # parts waiting for the probe run no call: they time out now
            for indices, _ in batch.splits.held():
                self._time_out_rows(batch, indices)
        for task, unwound in list(batch.tasks.items()):
            self.unwinding.cancel(task, unwound)

    def _time_out_rows(self, batch: Batch, indices: list[int] | None) -> None:
        for i in _each(batch, indices):
            row = batch.row(i)
            row.timed_out = True
            self.metrics.timeouts += 1
            self.on_timeout(row)

    # ------------------------------------------------------------------ one call of a batch
    def _run(self, batch: Batch, indices: list[int] | None, part: bool = False) -> None:
        """Start a call of the elements at ``indices`` (None: all); ``part``: a part of the
        batch's failed call (see :mod:`aiospark.core.splits`)."""
        self.batches += 1
        values = batch.values if indices is None else [batch.values[i] for i in indices]
        deadline = batch.started + self.timeout if self.timeout else None
        # no identity: a batch call has no idempotency key of one element
        try:
            task = self._create_task(self._attempts(values, (deadline, self._loop, None, None, None), batch))
        except (KeyboardInterrupt, SystemExit) as exc:  # raised in an eager first step: asyncio re-raises them
            self._report_each(batch, indices, exc, CALL)
            raise
        over = batch.tasks[task] = functools.partial(self._run_over, batch, indices, part)
        if task.done():
            over(task)
        else:
            task.add_done_callback(over)

    def _delays(self, entry: Call) -> Iterator[float]:
        """One back-off sequence per batch: a half continues its batch's retries."""
        batch = entry
        assert isinstance(batch, Batch)  # a batch call's entry is its batch
        if batch.delays is None:
            batch.delays = Caller._delays(self, batch)
        return batch.delays

    def cost_of(self, values: list[Any]) -> float:
        """A batch is charged the sum of its elements' costs."""
        return sum(Caller.cost_of(self, value) for value in values)

    def _results_of(self, result: Any) -> list[Any]:
        """A copy of the batch's list of results; an AsyncFunction's lists of outputs per element
        copied too (the function may reuse its lists for its next call before these are emitted)."""
        if self.returns_list and isinstance(result, (list, tuple)):
            return [outputs.copy() if type(outputs) is list else outputs for outputs in result]
        return Caller._results_of(self, result)

    def _list_contract(self) -> str:
        return f"batch function {_describe(self.function)} must return a list with one result per input"

    # ------------------------------------------------------------------ the outcome
    def _run_over(self, batch: Batch, indices: list[int] | None, part: bool, task: asyncio.Task[Any]) -> None:
        """The call's Task ended (or, timed out, ignored its cancel for the whole grace period)."""
        del batch.tasks[task]
        if self.stopped or batch.timed_out:
            if task.done() and not task.cancelled():
                task.exception()  # abandoned, or it ended anyway: the deadline decides
            if not self.stopped:
                self._time_out_rows(batch, indices)
            return
        error: BaseException | None = None  # this call's error, when a split may fix it
        answered = False
        if task.cancelled():  # by other code, before its first step
            self._report_each(batch, indices, asyncio.CancelledError("the batch call was cancelled"), CALL)
        elif (failure := task.exception()) is not None:  # KeyboardInterrupt, SystemExit: never split and retried
            self._report_each(batch, indices, failure, CALL)
        else:
            results, exc, what, retried_out = task.result()
            if exc is None:
                answered = self._distribute(batch, indices, results)
            elif isinstance(exc, asyncio.CancelledError):  # by the batch function's own code
                self._report_each(batch, indices, asyncio.CancelledError("the batch call was cancelled"), CALL)
            elif what in PREDICATES:
                self._report_each(batch, indices, exc, what)
            elif isinstance(exc, (_NotAList, BatchError)) or not may_be_rows(exc, retried_out) \
                    or (not part and len(_each(batch, indices)) == 1):
                self._report_each(batch, indices, exc, CALL)
            else:
                error = exc
        if not part:
            if error is not None:  # the batch's own call: split it
                batch.splits = SplitTree(isolating=isinstance(error, BadInput))
                self._split(batch, indices)
        else:
            assert indices is not None  # a part's indices are a list
            self._part_over(batch, indices, answered, error)

    def _part_over(self, batch: Batch, indices: list[int], answered: bool, error: BaseException | None) -> None:
        """A part of the batch's failed call is over: it ``answered``, failed with ``error`` (one a
        split may fix), or its rows got their outcome already. The probe rule
        (:meth:`SplitTree.part_over`) says which parts to split and which rows get their error."""
        tree = batch.splits
        assert tree is not None  # set when the batch was split
        to_split, to_report = tree.part_over(indices, answered, error)
        for rows, failure in to_report:
            self._report_each(batch, rows, failure, CALL)
        for rows, failure in to_split:
            if len(rows) == 1:
                self._report_each(batch, rows, failure, CALL)
            else:
                self._split(batch, rows)

    def _split(self, batch: Batch, indices: list[int] | None) -> None:
        """Run the two halves of the elements at ``indices`` as calls of their own, at once."""
        every = list(_each(batch, indices))
        half = len(every) // 2
        tree = batch.splits
        assert tree is not None  # set when the batch was split
        if not tree.isolating:
            tree.pending = 2
        self._run(batch, every[:half], True)
        self._run(batch, every[half:], True)

    def _distribute(self, batch: Batch, indices: list[int] | None, results: list[Any]) -> bool:
        """Give each element its result; False when the call broke the contract (wrong length)."""
        count = len(batch.values) if indices is None else len(indices)
        if len(results) != count:
            self._report_each(batch, indices, BatchError(
                f"batch function {_describe(self.function)} returned {len(results)} results for a batch of "
                f"{count} inputs: return exactly one per input, in order"), CALL)
            return False
        lists = self.returns_list
        if lists and not all(type(outputs) is list for outputs in results):
            self._distribute_lists(batch, indices, results)
        elif batch.rows is None:  # nothing per element: the whole call in one report
            self._report_rows(batch, indices, results, not lists)
        else:
            report = self._report
            for i, result in zip(_each(batch, indices), results):
                report(batch.row(i), result if lists else [result], None, "")
        return True

    def _distribute_lists(self, batch: Batch, indices: list[int] | None, results: list[Any]) -> None:
        """An AsyncFunction's per-element lists, one of which (at least) is not a list."""
        for i, outputs in zip(_each(batch, indices), results):
            if isinstance(outputs, (list, tuple)):
                self._report(batch.row(i), list(outputs), None, "")
            else:
                self._report(batch.row(i), None, BatchError(
                    f"{type(self.function).__name__}.async_invoke must return one list of outputs per "
                    f"input, got {type(outputs).__name__} for this input"), CALL)

    def _report_each(self, batch: Batch, indices: list[int] | None, error: BaseException, what: str) -> None:
        for i in _each(batch, indices):
            self._report(batch.row(i), None, error, what)


def _each(batch: Batch, indices: list[int] | None) -> range | list[int]:
    return range(len(batch.values)) if indices is None else indices


def _describe(function: Any) -> str:
    return repr(getattr(function, "__qualname__", None) or type(function).__name__)


__all__ = ["BatchCaller", "BatchError", "ReportRows", "own_inputs"]
