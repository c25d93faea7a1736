"""Batched calls: many elements per call of a function that takes a list and returns a list.

Beyond Flink (FLINK-38825 "async batch operator" is still open there). Each element is still its
own queue entry -- capacity counts elements, ordered output stays in input order, and every
element's outcome leaves through the operator's one report path. What changes is how calls start:

1. :meth:`BatchCaller.start` adds the element to the batch being filled; the batch starts when it
   holds ``batch_size`` elements, ``batch_delay`` seconds after its first element arrived (one
   loop timer per batch), or at the end of input (:meth:`BatchCaller.flush`).
2. The batch runs as one call (:meth:`~aiospark.core.calls.Caller._attempts`, in one real
   ``asyncio.Task``): rate-limit wait (charged the sum of the elements' costs), attempts, retries
   and back-offs apply to the batch as a whole.
3. When the batch's Task is over (:meth:`BatchCaller._batch_finished`):

   * results -- exactly one per element, in order -- are reported element by element; a list of
     another length fails every element of the batch with an error naming both numbers;
   * an exception (after retries) splits the batch in halves, each run as a batch of its own, so
     a single bad element ends up failing alone and its neighbours succeed;
   * a timeout (the deadline of the batch's oldest element) times out every element of the batch:
     each gets ``function.timeout(value)``'s results (or ``AsyncTimeoutError``). A timeout says the
     service is slow, not that an element is bad, so it is not split.

Example (what the operator does for each element)::

    caller = BatchCaller(embed_many, report=operator_report, timeout=30.0, retry=None,
                         batch_size=64, batch_delay=0.01)
    caller.bind(loop, inflight=lambda: 1)
    queue.add(call)
    caller.start(call)      # joins the batch being filled
    ...
    caller.flush()          # end of input: start the last, partial batch now
"""
from __future__ import annotations

import asyncio
import functools
import math
import numbers
from typing import Any

from .calls import CALL, Call, Caller, _NotAList, _PredicateError


def check_batching(batch_size: Any, batch_delay: Any, capacity: int) -> tuple[int | None, float]:
    """``(batch_size, batch_delay)`` validated: ``None`` batch size means no batching."""
    if batch_size is None:
        return None, 0.0
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or int(batch_size) < 1:
        raise ValueError(f"batch_size must be an int >= 1 (inputs per call) or None (one input per call), "
                         f"got {batch_size!r}")
    if isinstance(batch_delay, bool) or not isinstance(batch_delay, numbers.Real) \
            or not 0 <= float(batch_delay) < math.inf:
        raise ValueError(f"batch_delay must be seconds >= 0 to wait for a batch to fill (e.g. 0.01), "
                         f"got {batch_delay!r}")
    if int(batch_size) > capacity:
        raise ValueError(f"batch_size ({batch_size}) is larger than capacity ({capacity}): a batch could "
                         f"never fill; raise capacity to at least {batch_size} (it counts inputs in flight)")
    return int(batch_size), float(batch_delay)


class BatchError(ValueError):
    """A batch function broke its contract (e.g. returned the wrong number of results)."""


class BatchCaller(Caller):
    """Makes the calls of one operator in batches (see the module docstring).

    ``function`` is an ``async def f(values: list) -> list`` (one result per value: the output of
    that value) or an :class:`~aiospark.core.AsyncFunction` whose ``async_invoke(values)`` returns
    one list of outputs per value. The other arguments are :class:`~aiospark.core.calls.Caller`'s.
    """

    def __init__(self, function: Any, *, batch_size: int, batch_delay: float, **kwargs: Any):
        super().__init__(function, **kwargs)
        self.takes_list = True  # a batch's result is a list, whatever the kind of function
        self.batch_size = batch_size
        self.batch_delay = batch_delay
        self.batches = 0
        self._filling: list[Call] = []
        self._timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ the batch being filled
    def start(self, call: Call) -> None:
        """``call`` joins the batch being filled, which starts once it is full."""
        filling = self._filling
        filling.append(call)
        if len(filling) >= self.batch_size:
            self.flush()
        elif self._timer is None:
            self._timer = self._loop.call_later(self.batch_delay, self.flush)  # type: ignore[union-attr]

    def flush(self) -> None:
        """Start the batch being filled now (its delay passed, it is full, or input ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._filling = self._filling, []
        if batch and not self.stopped:
            self._run(batch)

    def time_out(self, call: Call) -> None:
        """``call``'s deadline passed: if its batch runs, the batch is cancelled (every element of
        it times out once it has unwound); if it still waits in the batch being filled, it leaves
        that batch and times out alone."""
        if call.task is None and call in self._filling:
            self._filling.remove(call)
            call.timed_out = True
            self.metrics.timeouts += 1
            self.on_timeout(call)
            return
        super().time_out(call)

    # ------------------------------------------------------------------ one batch's call
    def _run(self, batch: list[Call]) -> None:
        self.batches += 1
        # the batch's deadline is its oldest row's: the one its timeout acts on
        deadline = min(call.started for call in batch) + self.timeout if self.timeout else None
        task = self._create_task(self._attempts([call.element[0] for call in batch], deadline))
        for call in batch:
            call.task = task
        if task.done():
            self._batch_finished(batch, task)
        else:
            task.add_done_callback(functools.partial(self._batch_finished, batch))

    def cost_of(self, values: list[Any]) -> float:
        """A batch is charged the sum of its elements' costs."""
        return sum(Caller.cost_of(self, value) for value in values)

    def _list_contract(self) -> str:
        return f"batch function {_describe(self.function)} must return a list with one result per input"

    # ------------------------------------------------------------------ the outcome
    def _batch_finished(self, batch: list[Call], task: asyncio.Task[Any]) -> None:
        if self.stopped:
            if not task.cancelled():
                task.exception()
            return
        if any(call.timed_out for call in batch):
            if not task.cancelled():
                task.exception()  # it ended anyway: the deadline decides
            for call in batch:
                if not call.timed_out:  # its own deadline is near: the batch's oldest decides
                    call.timed_out = True
                    self.metrics.timeouts += 1
                self.on_timeout(call)
            return
        if task.cancelled():
            self._report_all(batch, asyncio.CancelledError("the batch call was cancelled"), CALL)
            return
        exc = task.exception()
        if exc is None:
            self._distribute(batch, task.result())
        elif type(exc) is _PredicateError:
            self._report_all(batch, exc.cause, exc.what)
        elif isinstance(exc, (_NotAList, BatchError)) or len(batch) == 1:
            self._report_all(batch, exc, CALL)
        else:  # split: a bad element ends alone, its neighbours get their results
            half = len(batch) // 2
            self._run(batch[:half])
            self._run(batch[half:])

    def _distribute(self, batch: list[Call], results: list[Any]) -> None:
        if len(results) != len(batch):
            error = BatchError(f"batch function {_describe(self.function)} returned {len(results)} results "
                               f"for a batch of {len(batch)} inputs: return exactly one per input, in order")
            self._report_all(batch, error, CALL)
            return
        report = self._report
        if not self.returns_list:
            for call, result in zip(batch, results):
                report(call, [result], None, "")
            return
        for call, outputs in zip(batch, results):  # an AsyncFunction: a list of outputs per input
            if isinstance(outputs, (list, tuple)):
                report(call, list(outputs), None, "")
            else:
                report(call, None, BatchError(
                    f"{type(self.function).__name__}.async_invoke must return one list of outputs per "
                    f"input, got {type(outputs).__name__} for this input"), CALL)

    def _report_all(self, batch: list[Call], error: BaseException, what: str) -> None:
        for call in batch:
            self._report(call, None, error, what)


def _describe(function: Any) -> str:
    return repr(getattr(function, "__qualname__", None) or type(function).__name__)
