"""The async-wait operator: many calls in flight, a bounded number of them, emitted by policy.

Asyncio-native rewrite of Flink's ``AsyncWaitOperator`` (FLIP-12, FLIP-232 retries). An element's
life, top-down:

1. ``process_element`` waits while the queue is full (backpressure, :mod:`aiospark.core.operator_room`),
   then (``try_process``) the element enters the queue as a :class:`~aiospark.core.call_entry.Call`
   and its call starts (:mod:`aiospark.core.calls`: attempts, retries, rate limit, timeout -- all
   parts of the call). With ``batch_size`` it joins the batch being filled, one queue entry whose
   call starts once it is full (:mod:`aiospark.core.operator_bulk`, which also takes many elements
   at once, and :mod:`aiospark.core.batches`); with ``key`` it waits until the element before it
   with an equal key is over (:mod:`aiospark.core.key_order`).
2. When the call is over, the caller reports it (:meth:`AsyncWaitOperator._call_over`): its
   results complete the queue entry, or its error fails the operator (or becomes error rows with
   ``on_error``).
   With a journal (:mod:`aiospark.core.identities`), an element whose outcome is recorded completes
   from the record instead, and one whose identity equals an element's in flight shares its call.
3. A completed entry makes the queue call :meth:`AsyncWaitOperator._emit_completed`, the one emit
   path: everything the ordering policy allows is passed to ``output``, and the room this frees
   wakes whoever waits to put the next element in (:mod:`aiospark.core.operator_room`).

One event loop does everything; nothing here uses threads or locks.

Example::

    async def main():
        out = []
        async def double(x):
            await asyncio.sleep(0.01)
            return 2 * x
        op = AsyncWaitOperator(double, out.append, ordered=True, capacity=10, timeout=1.0)
        await op.open()
        for i in range(100):
            await op.process_element(i)
        await op.finish()
        await op.close()
        assert [r.value for r in out] == [2 * i for i in range(100)]
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from .adaptive import AdaptiveConcurrency
from .batches import BatchCaller
from .call_entry import PREDICATES, Call
from .calls import Caller
from .deadlines import Deadlines
from .durable import BudgetGate, Identify, TaskJournal
from .elements import Record, StreamElement, Watermark
from .errors import AsyncFunctionError, function_error
from .function import AsyncFunction, check_async_function
from .identities import Identities, own_answer
from .key_order import KeyTurns
from .metrics import OperatorMetrics
from .operator_bulk import BulkInput
from .operator_room import Room
from .queues import ElementQueue, OrderedQueue, UnorderedQueue
from .retry import RetryStrategy
from .settings import check_batching, check_capacity, check_retry, check_timeout
from .usage import bind_usage

#: ``on_error(value, exception) -> list``: the results of an element whose call failed for good.
OnError = Callable[[Any, BaseException], list[Any]]

#: what ``on_error`` may turn into an element's results: its call's failure, or its cancellation
_ROW_ERRORS = (Exception, asyncio.CancelledError)


class AsyncWaitOperator(BulkInput, Room):
    """Runs ``function`` for every element with at most ``capacity`` elements held at once.

    See the module docstring for an example and ``SPEC.md`` section 1 for the full contract.
    ``timeout`` is in seconds from the moment the element enters the queue, retries included;
    ``None`` or ``<= 0`` means no timeout. ``on_error(value, exc) -> list``, when given, turns a
    call's final failure into that element's results instead of failing the operator.
    ``rate_limit`` is a :class:`~aiospark.core.ratelimit.RateLimit`, a number of calls per second,
    or a shared limiter (``async acquire()``). ``batch_size`` (an int >= 1) calls ``function``
    with lists of up to that many values (``batch_delay`` seconds to wait for a batch to fill),
    and it returns one result per value (see :mod:`aiospark.core.batches`). ``key(value)`` makes
    the calls of values with equal keys run one at a time, in input order (their outputs keep
    that order; see :mod:`aiospark.core.key_order`). ``manage_lifecycle=False`` leaves
    ``function.open()`` and ``close()`` to the caller (the Spark runtime opens a function once per
    worker, not per task). ``identify(value) -> str`` gives each element an identity (what
    ``aiospark.idempotency_key()`` returns inside its call, computed only when the call asks for
    it unless a journal needs it first); with ``journal`` (a
    :class:`~aiospark.core.durable.TaskJournal`) an element whose outcome is recorded is not called,
    elements of equal identity share one call, and every call's outcome is recorded (an element
    whose identity is None is called and not recorded). ``idempotency(value) -> str``, when given,
    is what ``idempotency_key()`` returns instead of the identity (the Spark layer namespaces it by
    the function's fingerprint). ``budget``
    (a :class:`~aiospark.core.durable.BudgetGate`) is charged before every attempt.
    ``values=True`` is for drivers without event time (the Spark runtime): ``output`` then gets
    each entry's results as one list of plain values (``output(results)``, e.g. a ``list.extend``)
    instead of a Record per result; timestamps are not emitted and watermarks are refused.
    """

    def __init__(self, function: Any, output: Callable[[Any], Any], *, ordered: bool = True,
                 timeout: float | None = 60.0, capacity: int | str | AdaptiveConcurrency = 100,
                 retry: RetryStrategy | None = None, on_error: OnError | None = None,
                 rate_limit: Any = None, batch_size: int | None = None, batch_delay: float = 0.01,
                 key: Callable[[Any], Any] | None = None, manage_lifecycle: bool = True,
                 identify: Identify | None = None, journal: TaskJournal | None = None,
                 budget: BudgetGate | None = None, values: bool = False,
                 idempotency: Callable[[Any], str] | None = None):
        check_async_function(function)
        if not callable(output):
            raise TypeError(f"output must be a callable receiving each emitted element, got {type(output).__name__}")
        if on_error is not None and not callable(on_error):
            raise TypeError(f"on_error must be a callable (value, exception) -> list, got {type(on_error).__name__}")
        self.function = function
        self.ordered = bool(ordered)
        self.timeout = check_timeout(timeout)
        self.retry = check_retry(retry)
        self.capacity, self.adaptive = check_capacity(capacity)
        self.batch_size, self.batch_delay = check_batching(batch_size, batch_delay, self.capacity, self.timeout)
        if key is not None and self.batch_size is not None:
            raise ValueError("key= and batch_size= do not go together: a batch would hold elements of one key "
                             "that must run one after another; use one or the other")
        self._turns = KeyTurns(key) if key is not None else None
        if identify is not None and not callable(identify):
            raise TypeError(f"identify must be a callable value -> str, got {type(identify).__name__}")
        if journal is not None and identify is None:
            raise ValueError("a journal needs identify=: the identity its outcomes are recorded under")
        self._journal = journal
        #: a journal that only records (``records_only``, see TaskJournal): its ``settled``
        self._settled: Callable[[Any, list[Any], bool], list[Any]] | None = None
        if journal is not None and getattr(journal, "records_only", False):
            if on_error is not None:  # its elements stand for rows that would each need their own
                raise ValueError("a journal that only records (records_only) gives a failed call's outputs "
                                 "to no other row: use it without on_error")
            self._settled = journal.settled  # type: ignore[attr-defined]
        # without a journal an identity is what idempotency_key() returns, computed only if a call asks
        self._identities = None if journal is None or self._settled is not None else Identities(
            identify, journal, self._call_over, self.fail)  # type: ignore[arg-type]
        self._output = output
        #: output gets lists of plain values, not Records (see the class docstring)
        self.values = bool(values)
        self._on_error = on_error
        self._manage_lifecycle = manage_lifecycle
        queue_type = OrderedQueue if self.ordered else UnorderedQueue
        self._queue: ElementQueue = queue_type(self.capacity, on_complete=self._entry_completed)
        if idempotency is not None and not callable(idempotency):
            raise TypeError(f"idempotency must be a callable value -> str, got {type(idempotency).__name__}")
        # what idempotency_key() returns, computed only when a call asks: idempotency(value), else
        # the element's identity (identify(value); a journal computed it already)
        keys = idempotency if idempotency is not None else identify if self._identities is None else None
        calls: Any = {"report": self._call_over, "timeout": self.timeout, "retry": self.retry,
                      "rate_limit": rate_limit, "adaptive": self.adaptive, "budget": budget,
                      "identify": keys}
        #: the batch caller, with batch_size (it also keeps the batch being filled)
        self._batches: BatchCaller | None = None
        if self.batch_size is not None:
            self._caller: Caller = BatchCaller(function, batch_size=self.batch_size, batch_delay=self.batch_delay,
                                               report_rows=self._rows_over, **calls)
            self._batches = self._caller
        else:
            self._caller = Caller(function, **calls)
        self._deadlines: Deadlines | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: AsyncFunctionError | None = None
        self._closed = False
        self._emitting = False
        self._emit_due = False
        self._space_waiter: asyncio.Future[None] | None = None
        self._idle_waiter: asyncio.Future[None] | None = None
        self._room_listener: Callable[[], None] | None = None
        #: elements whose call is not over yet
        self.inflight = 0
        #: elements (and watermarks) held: in flight, or completed and not emitted yet
        self._held = 0

    @property
    def metrics(self) -> OperatorMetrics:
        """Counters and latency histogram of this operator's calls."""
        return self._caller.metrics

    @property
    def failure(self) -> AsyncFunctionError | None:
        """The error that failed the operator, if any."""
        return self._failure

    # ------------------------------------------------------------------ lifecycle
    async def open(self, restored: Iterable[StreamElement] | None = None) -> None:
        """Call ``function.open()``, then re-process ``restored`` elements (a snapshot) in order."""
        loop = self._loop = asyncio.get_running_loop()
        bind_usage(self._caller.metrics)  # record_usage() inside this operator's calls counts here
        self._caller.bind(loop, lambda: self.inflight)  # after: calls report in this context (with the usage)
        # with a timeout the deadlines; without one, the watch for calls whose Task never ran
        expired = self._caller.time_out if self._identities is None else self._expired
        self._deadlines = Deadlines(loop, self.timeout, self._running_calls, expired, self._caller.lost)
        if self._manage_lifecycle and isinstance(self.function, AsyncFunction):
            await self.function.open()
        for element in restored or ():
            if type(element) is Record:
                await self.process_element(element.value, element.timestamp)
            elif type(element) is Watermark:
                await self.process_watermark(element.timestamp)
            else:
                raise TypeError(f"restored state holds Record/Watermark elements, got {type(element).__name__}")

    async def finish(self) -> None:
        """End of input: wait until every held element has been emitted (retries keep their delays)."""
        self._check()
        self._caller.flush()
        while not self._queue.is_empty():
            self._idle_waiter = self._loop.create_future()  # type: ignore[union-attr]
            await self._idle_waiter
            self._check()
        if self._deadlines is not None:
            self._deadlines.stop()

    async def close(self) -> None:
        """Cancel whatever still runs, wait briefly for it to unwind, then ``function.close()``."""
        if self._closed:
            return
        self._closed = True
        running = self._abandon()
        if running:  # as long as a timed-out call gets to unwind (calls that ignore it are left behind)
            await asyncio.wait(running, timeout=self._caller.unwinding.grace)
        self._wake_all()
        if self._manage_lifecycle and isinstance(self.function, AsyncFunction):
            await self.function.close()

    # ------------------------------------------------------------------ input
    async def process_element(self, value: Any, timestamp: Any = None) -> None:
        """Start the call for ``value``; waits only while the queue is full (backpressure)."""
        self._check()
        while not self.try_process(value, timestamp):
            await self._wait_for_space()

    def try_process(self, value: Any, timestamp: Any = None) -> bool:
        """Start the call for ``value`` now if there is room; ``False`` when there is none.

        The non-blocking half of :meth:`process_element`, for drivers feeding many elements::

            while not op.try_process(value):
                await op.wait_for_space()
        """
        if self._failure is not None or self._closed or self._loop is None:
            self._check()
        if self._held >= self.capacity or (self.adaptive is not None and self.inflight >= self.adaptive.limit):
            return False  # the room test of _has_room, inlined: once per element
        self._held += 1
        self.inflight = inflight = self.inflight + 1
        metrics = self._caller.metrics
        if inflight > metrics.inflight_peak:
            metrics.inflight_peak = inflight
        if self._batches is not None:  # it joins the batch being filled (operator_bulk)
            self._join_batch(value, timestamp)
            return True
        # the element enters the queue, then its call starts
        call = Call(value, timestamp, self._loop.time())  # type: ignore[union-attr]
        self._queue.add(call)
        if self._deadlines is not None:
            self._deadlines.started(call)
        # key order first: a recorded element, too, leaves only after the earlier ones of its key
        if self._turns is not None and not self._take_turn(call):
            return True  # it waits behind the call under way for its key
        if self._identities is not None and self._identities.admit(call):
            return True  # its outcome is recorded, or an equal element's call will be its own
        self._caller.start(call)
        return True

    async def process_watermark(self, timestamp: Any) -> None:
        """Queue a watermark (it takes a slot and is emitted according to the ordering policy)."""
        self._check()
        if self.values:
            raise ValueError("an operator made with values=True emits plain values and takes no watermarks: "
                             "make it with values=False to use event time")
        while self._held >= self.capacity:
            await self._wait_for_space()
        if self._batches is not None:
            self._batches.flush()  # the elements before the watermark are not batched with those after it
        self._queue.try_put(Watermark(timestamp))
        self._held += 1
        self._emit_completed()

    def snapshot_state(self) -> list[StreamElement]:
        """The input elements still held (in flight or completed-not-emitted), for a checkpoint."""
        return self._queue.values()

    def __len__(self) -> int:
        """Elements currently held by the queue."""
        return self._held

    # ------------------------------------------------------------------ an element's call
    def _expired(self, call: Call) -> None:
        """A deadline passed (journal mode): an element sharing another's call gets that call's
        outcome, which has a deadline no later than its own (it entered the queue first)."""
        if self._identities.waits(call):  # type: ignore[union-attr]
            call.timed_out = True  # not expired again; completed with the call it shares
            return
        self._caller.time_out(call)

    def _take_turn(self, call: Call) -> bool:
        try:
            return self._turns.admit(call)  # type: ignore[union-attr]
        except Exception as exc:
            self._call_over(call, None, exc, "key function")
            return False

    def _turn_comes(self, call: Call) -> None:
        """The element's turn came (its key's previous call is over, :meth:`KeyTurns.hand_on`):
        it completes from the journal's record, or shares an equal element's call, or starts (or,
        if its deadline passed while it waited, gets its timeout results)."""
        if self._identities is not None and self._identities.admit(call):
            return  # recorded (it completed: its turn is handed on), or it shares a call
        if call.timed_out:
            self._caller.on_timeout(call)
        else:
            self._caller.start(call)

    def _call_over(self, call: Call, results: list[Any] | None, error: BaseException | None,
                   what: str) -> None:
        """The caller's report: the call is over with ``results`` or failed with ``error``."""
        self.inflight -= 1
        if self._failure is not None or self._closed:
            return
        identities = self._identities
        if identities is not None and identities.settles(call, what):
            identities.settle(call, results, error, what)
        elif self._settled is not None and error is None:  # a journal that only records
            try:
                results = self._settled(call.element[0], results, own_answer(call, what))  # type: ignore[arg-type]
            except Exception as exc:
                self.fail(call.value, exc, "journal")
                return
        if error is not None:
            self._caller.metrics.failures += 1
            # SystemExit, KeyboardInterrupt: a stop, not this element's error (never an error row)
            if self._on_error is None or what in PREDICATES or not isinstance(error, _ROW_ERRORS):
                self.fail(call.value, error, what)
                return
            try:
                results = self._on_error(call.value, error)
                if not isinstance(results, (list, tuple)):
                    raise TypeError(f"on_error must return a list of outputs, got {type(results).__name__}")
                results = list(results)  # its own: a handler may return one shared list for every error
            except BaseException as handler_exc:
                handler_exc.__context__ = error
                self.fail(call.value, handler_exc, "on_error handler")
                return
            self._caller.metrics.error_rows += 1
        call.complete(results)  # type: ignore[arg-type]  # -> the queue -> _emit_completed
        if self._turns is not None:  # after complete(): equal keys complete in input order
            self._turns.hand_on(call, self._turn_comes)

    def fail(self, value: Any, exc: BaseException, what: str = "async call") -> None:
        """Fail the operator: nothing more is emitted, calls still running are cancelled."""
        if self._failure is not None:
            return
        self._failure = function_error(value, exc, what)
        self._abandon()
        self._wake_all()

    def _running_calls(self) -> Iterator[Call]:
        """The queue's pending entries: all Calls (this operator adds only Calls; a watermark's
        entry is born done), which the queue, holding any ResultFuture, cannot say."""
        return cast("Iterator[Call]", self._queue.pending())

    def _abandon(self) -> list[asyncio.Task[Any]]:
        """Stop every running call (failure or close); returns their tasks."""
        self._caller.stopped = True
        if self._deadlines is not None:
            self._deadlines.stop()
        running = [task for call in self._running_calls() for task in call.running_tasks()]
        if self._caller.unwinding is not None:  # bound: calls left behind by their deadline, cancelled again
            running += self._caller.unwinding.left_behind
        for task in running:
            task.cancel()
        return running

    # ------------------------------------------------------------------ emission
    def _entry_completed(self, entry: Any = None) -> None:
        """The queue's listener: an entry completed. Emission runs once per loop iteration, after
        every completion of the iteration (one emit and one refill for all of them)."""
        if not self._emit_due:
            self._emit_due = True
            self._loop.call_soon(self._emit_completed)  # type: ignore[union-attr]

    def _emit_completed(self) -> None:
        """The one emit path: pass everything the ordering policy allows to the output, then wake
        whoever waits for room."""
        self._emit_due = False
        if self._emitting or self._failure is not None:
            return
        self._emitting = True
        try:
            self._held -= self._queue.emit_completed(self._output, self.values)
        except BaseException as exc:
            self.fail("(the element being emitted)", exc, "the output callable")
        finally:
            self._emitting = False
        self._room_may_have_appeared()
