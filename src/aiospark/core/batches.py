"""Batched calls: many elements per call of a function that takes a list and returns a list.

Beyond Flink (FLINK-38825 "async batch operator" is still open there). A batch is one queue
entry (:class:`Batch`) holding up to ``batch_size`` elements: capacity still counts elements,
ordered output stays in input order, and a batch's elements leave through the operator's one
emit path, each with its own timestamp. The life of a batch, top-down:

1. The operator puts the first element that finds no batch being filled into a new
   :class:`Batch` (:meth:`BatchCaller.open_batch`), which enters the queue at once -- its deadline
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
(:class:`BatchRow`, a :class:`~aiospark.core.call_entry.Call`) and the operator's per-element report,
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
import math
import numbers
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, repeat
from typing import Any

from .call_entry import CALL, PREDICATES, Call
from .calls import Caller, _NotAList
from .elements import Record, StreamElement
from .errors import BadInput
from .result_future import ResultFuture
from .splits import SplitTree, may_be_rows

_new = tuple.__new__  # a Record without NamedTuple's Python-level __new__ (once per element)


def _drain(iterator: Iterable[Any]) -> None:
    """Run ``iterator`` to its end in C, keeping nothing."""
    deque(iterator, maxlen=0)


#: ``report_rows(batch, indices, results, single)``: a call of ``batch`` gave ``results`` for
#: its elements at ``indices`` (None: all of them); ``single``: one output per element, else a list.
ReportRows = Callable[["Batch", "list[int] | None", list[Any], bool], None]


def check_batching(batch_size: Any, batch_delay: Any, capacity: int,
                   timeout: float | None = None) -> tuple[int | None, float]:
    """``(batch_size, batch_delay)`` validated: ``None`` batch size means no batching.
    ``timeout`` (checked already; None: no timeout) must leave a batch time for its call."""
    if batch_size is None:
        return None, 0.0
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or int(batch_size) < 1:
        raise ValueError(f"batch_size must be an int >= 1 (inputs per call) or None (one input per call), "
                         f"got {batch_size!r}")
    if isinstance(batch_delay, bool) or not isinstance(batch_delay, numbers.Real) \
            or not 0 <= float(batch_delay) < math.inf:
        raise ValueError(f"batch_delay must be seconds >= 0 to wait for a batch to fill (e.g. 0.01), "
                         f"got {batch_delay!r}")
    if timeout is not None and float(batch_delay) >= timeout:
        raise ValueError(f"batch_delay ({batch_delay} s) must be shorter than timeout ({timeout} s): a batch's "
                         f"deadline counts from its first row, so its rows would time out while it waits to "
                         f"fill, before any call; lower batch_delay (e.g. 0.01) or raise timeout")
    if int(batch_size) > capacity:
        raise ValueError(f"batch_size ({batch_size}) is larger than capacity ({capacity}): a batch could "
                         f"never fill; raise capacity to at least {batch_size} (it counts inputs in flight)")
    return int(batch_size), float(batch_delay)


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



class BatchError(ValueError):
    """A batch function broke its contract (e.g. returned the wrong number of results)."""


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


__all__ = ["Batch", "BatchCaller", "BatchError", "BatchRow", "ReportRows", "check_batching", "own_inputs"]
