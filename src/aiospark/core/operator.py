"""The async-wait operator: many calls in flight, a bounded number of them, emitted by policy.

Asyncio-native rewrite of Flink's ``AsyncWaitOperator`` (FLIP-12 + FLIP-232 retries). One event loop
does everything: a call that completes wakes the emitter directly (a queue callback, no polling).
This module holds the element side (queue, backpressure, emission, failure); how calls are made
(attempts, retries, timeouts, rate limits) is :mod:`aiospark.core.attempts`. Nothing here uses
threads or locks.

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
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Union

from .adaptive import AdaptiveConcurrency
from .attempts import CLOSE_GRACE_SECONDS, Attempts  # noqa: F401
from .calls import Call
from .elements import Record, StreamElement, Watermark
from .errors import AsyncFunctionError, function_error
from .function import AsyncFunction, check_async_function
from .metrics import OperatorMetrics
from .queues import OrderedQueue, UnorderedQueue
from .retry import RetryStrategy
from .settings import check_capacity, check_retry, check_timeout  # noqa: F401 (re-exported)
from .starts import DIRECT_TASK_RUN, SAMPLE_WINDOW  # noqa: F401 (re-exported)

OnError = Callable[[Any, BaseException], List[Any]]

_new_record = tuple.__new__  # Record(value, ts) without NamedTuple's Python-level __new__

class AsyncWaitOperator:
    """Runs ``function`` for every element with at most ``capacity`` elements held at once.

    See the module docstring for an example and ``SPEC.md`` section 1 for the full contract.
    ``on_error(value, exc) -> list``, when given, turns a final failure into that element's results
    instead of failing the operator. ``output_many(values, timestamp)``, when given, receives
    records emitted together (the results of a run of calls that completed at once, see
    :meth:`try_process_many`) in one call instead of one ``output(Record(value, timestamp))`` each.
    ``manage_lifecycle=False`` leaves ``function.open()`` and ``close()`` to the caller (the Spark
    runtime opens a function once per worker, not per task).
    """

    def __init__(self, function: Any, output: Callable[[StreamElement], Any], *, ordered: bool = True,
                 timeout: Optional[float] = 60.0, capacity: Union[int, str, AdaptiveConcurrency] = 100,
                 retry: Optional[RetryStrategy] = None, on_error: Optional[OnError] = None,
                 rate_limit: Any = None, manage_lifecycle: bool = True,
                 output_many: Optional[Callable[[List[Any], Any], Any]] = None):
        check_async_function(function)
        self.function = function
        if not callable(output):
            raise TypeError(f"output must be a callable receiving each emitted element, got {type(output).__name__}")
        if output_many is not None and not callable(output_many):
            raise TypeError("output_many must be a callable (values, timestamp) receiving records emitted "
                            f"together, or None; got {type(output_many).__name__}")
        self._output_many = output_many
        if on_error is not None and not callable(on_error):
            raise TypeError(f"on_error must be a callable (value, exception) -> list, got {type(on_error).__name__}")
        self._output = output
        self.ordered = bool(ordered)
        self.timeout = check_timeout(timeout)
        self.retry = check_retry(retry)
        self._on_error = on_error
        self._manage_lifecycle = manage_lifecycle
        self.capacity, self.adaptive = check_capacity(capacity)
        queue_type = OrderedQueue if self.ordered else UnorderedQueue
        self._queue = queue_type(self.capacity, on_complete=self._drain)
        self._attempts = Attempts(self, rate_limit, self.adaptive)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._failure: Optional[AsyncFunctionError] = None
        self._draining = False
        self._space_waiter: Optional[asyncio.Future] = None
        self._idle_waiter: Optional[asyncio.Future] = None
        self._room_listener: Optional[Callable[[], None]] = None
        #: elements whose call is not over yet (started, not completed nor failed)
        self.inflight = 0
        #: entries held by the queue (== len(self._queue), kept here: checked for every element)
        self._held = 0
        #: a new call may start while _held < _limit: capacity minus the slots of cancelled calls
        #: still unwinding; 0 while not open or after a failure (update_room)
        self._limit = 0
        self._closed = False

    @property
    def metrics(self) -> OperatorMetrics:
        """Counters and latency histogram of this operator's calls.

        Read from another thread while the loop runs (a progress report), the latency histogram
        may lack the last few hundred samples; counters are exact.
        """
        loop = self._loop
        if loop is None or not loop.is_running() or asyncio._get_running_loop() is loop:
            self._attempts.flush_latencies()
        return self._attempts.metrics

    @property
    def blocked_seconds(self) -> float:
        """Seconds that first steps of calls spent blocking the event loop."""
        return self._attempts.blocked_seconds

    # ------------------------------------------------------------------ lifecycle
    async def open(self, restored: Optional[Iterable[StreamElement]] = None) -> None:
        """Call ``function.open()``, then re-process ``restored`` elements (a snapshot) in order."""
        self._loop = asyncio.get_running_loop()
        self._attempts.bind(self._loop)
        self.update_room()
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
        self._drain()
        while not self._queue.is_empty():
            self._idle_waiter = self._loop.create_future()  # type: ignore[union-attr]
            await self._idle_waiter
            self._check()
        self._attempts.idle()

    async def close(self) -> None:
        """Cancel whatever still runs, wait briefly for it to unwind, then ``function.close()``."""
        if self._closed:
            return
        self._closed = True
        self._limit = 0
        await self._attempts.close()
        self._wake()
        if self._manage_lifecycle and isinstance(self.function, AsyncFunction):
            await self.function.close()

    # ------------------------------------------------------------------ input
    async def process_element(self, value: Any, timestamp: Any = None) -> None:
        """Start the call for ``value``; waits only while the queue is full (backpressure)."""
        if not self._limit:  # not open, failed or closed (or every slot held by unwinding calls)
            self._check()
        while not self._has_room():
            await self._wait_for_space()
        self._attempts.start(value, timestamp)

    def try_process(self, value: Any, timestamp: Any = None) -> bool:
        """Start the call for ``value`` now if the queue has space; ``False`` when it is full.

        The non-blocking half of :meth:`process_element`, for drivers feeding many elements
        (``while not op.try_process(v): await op.wait_for_space()``).
        """
        if self._held < self._limit and (self.adaptive is None or self.inflight < self.adaptive.limit):
            self._attempts.start(value, timestamp)
            return True
        if not self._limit:  # not open, failed or closed (or every slot held by unwinding calls)
            self._check()
        return False

    def try_process_many(self, values: Sequence[Any], start: int = 0, timestamp: Any = None) -> int:
        """Start calls for ``values[start:]`` (all with ``timestamp``) while there is room; returns
        the index of the first value not started (``len(values)`` when every one was).

        The same as calling :meth:`try_process` for each value until it returns ``False``, but
        calls that complete without suspending (no-ops, cache hits) are run a batch at a time,
        for a fraction of the per-call cost.

        Example::

            pos = 0
            while pos < len(values):
                pos = op.try_process_many(values, pos)
                if pos < len(values):
                    await op.wait_for_space()
        """
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"try_process_many: start must be an index >= 0 into values, got {start!r}")
        attempts = self._attempts
        end = len(values)
        pos = start
        while pos < end:
            room = self._free_slots()
            if room <= 0:
                if not self._limit:
                    self._check()
                break
            if attempts.direct_tasks_left and attempts.reserve is None:  # what fits, each in a Task
                pos = attempts.start_tasks(values, pos, min(end, pos + room, pos + attempts.direct_tasks_left),
                                           timestamp)
            elif attempts.batchable and not self._draining and self._queue.emits_immediately():
                # a run, while calls complete at once and may be emitted now
                pos = attempts.start_run(values, pos, end, timestamp)
            else:
                attempts.start(values[pos], timestamp)
                pos += 1
        return pos

    async def wait_for_space(self) -> None:
        """Wait until another call may start (raises if the operator failed meanwhile)."""
        self._check()
        while not self._has_room():
            await self._wait_for_space()

    def on_room(self, listener: Optional[Callable[[], None]]) -> None:
        """Call ``listener()`` on the loop whenever room may have appeared (a call ended, a
        cancelled call unwound) and when the operator fails or closes.

        A driver holding its input in memory can then start the next calls at once, within the
        step that ended the previous ones, instead of waking a coroutine in ``wait_for_space()``
        one loop iteration later (with 1,000 calls in flight that iteration is a few ms every
        slot stays empty). The listener may call ``try_process`` (re-entrant calls are its
        business) and must not raise.

        Example::

            def fill():
                while values and not op.failure and op.try_process(values[0]):
                    values.popleft()

            op.on_room(fill)
        """
        if listener is not None and not callable(listener):
            raise TypeError(f"on_room takes a callable (or None), got {type(listener).__name__}")
        self._room_listener = listener

    def _has_room(self) -> bool:
        """A free slot (cancelled calls still unwinding hold theirs), and below the adaptive limit."""
        return self._free_slots() > 0

    def _free_slots(self) -> int:
        """How many calls may start now: free slots, within the adaptive limit."""
        room = self._limit - self._held
        if self.adaptive is not None:
            room = min(room, self.adaptive.limit - self.inflight)
        return room

    def update_room(self) -> None:
        """Recompute how many entries may be held (after a cancelled call started or stopped
        unwinding, on open and on failure)."""
        if self._failure is not None or self._loop is None or self._closed:
            self._limit = 0
        else:
            self._limit = self.capacity - len(self._attempts.cancelled)

    def room_freed(self) -> None:
        """A cancelled call finished unwinding: a waiting ``process_element`` may go on."""
        self.update_room()
        self._wake_after_emit()

    def pending_calls(self) -> Iterator[Call]:
        """Held elements not completed yet, oldest first (do not start or end calls while iterating)."""
        return self._queue.pending()  # type: ignore[return-value]

    # ------------------------------------------------------------------ started calls (from Attempts)
    def enqueue(self, value: Any, timestamp: Any, started: float) -> Call:
        """Hold the element whose call starts now; returns its :class:`Call` (the queue entry)."""
        call = Call(self._attempts, _new_record(Record, (value, timestamp)), started)
        self._queue.add(call)
        self._held += 1
        self.inflight = inflight = self.inflight + 1
        metrics = self._attempts.metrics
        if inflight > metrics.inflight_peak:  # metrics.record_inflight, inlined: once per element
            metrics.inflight_peak = inflight
        return call

    def emit_now(self, results: List[Any], timestamp: Any) -> bool:
        """Emit the results of a call that completed while it was being started, without queueing
        it, if nothing held has to be emitted first; ``False`` (nothing done) otherwise."""
        if self._draining or not self._queue.emits_immediately():
            return False
        self._attempts.metrics.record_inflight(self.inflight + 1)  # it was in flight for a moment
        self._emit(results, timestamp)
        return True

    def emit_run(self, results: List[Any], timestamp: Any) -> bool:
        """Emit the outputs of calls that completed while they were being started a run at a time
        (:meth:`try_process_many` checked that nothing held goes first); ``False`` if the output
        callable failed."""
        self._attempts.metrics.record_inflight(self.inflight + 1)  # each was in flight for a moment
        if self._output_many is None:
            return self._emit(results, timestamp)
        try:
            self._output_many(results, timestamp)
        except BaseException as exc:
            self.fail("(the elements being emitted)", exc, "the output_many callable")
            return False
        return True

    def _emit(self, results: Iterable[Any], timestamp: Any) -> bool:
        """Pass ``results`` to the output as Records, bypassing the queue; ``False`` if the output
        callable failed (the operator has failed then)."""
        output = self._output
        try:
            for result in results:
                output(_new_record(Record, (result, timestamp)))
        except BaseException as exc:
            self.fail("(the element being emitted)", exc, "the output callable")
            return False
        return True

    # ------------------------------------------------------------------ element outcomes
    def element_results(self, entry: Call, results: Sequence[Any]) -> None:
        """An element's call is over with ``results`` (a list or tuple, checked by the caller):
        emitted at once when nothing held goes first (the hot path of calls that suspend), else
        completed in the queue."""
        self.inflight -= 1
        more = None if self._draining or self._failure is not None else self._queue.take_if_next(entry)
        if more is None:
            entry.complete(results)
            return
        self._held -= 1
        output, timestamp = self._output, entry.element[1]
        try:
            for result in results:
                output(_new_record(Record, (result, timestamp)))
        except BaseException as exc:
            self.fail("(the element being emitted)", exc, "the output callable")
            return
        if more:
            self._drain()
        else:
            self._wake_after_emit()

    def element_done(self, entry: Any, results: List[Any]) -> None:
        """An element's call is over with ``results`` (called by :class:`Attempts`)."""
        self.inflight -= 1
        entry.complete(results)

    def element_failed(self, entry: Any, exc: BaseException) -> None:
        """An element's call failed for good: ``on_error`` rows, or the operator fails."""
        self.inflight -= 1
        value = entry.element.value
        if self._on_error is None:
            self.fail(value, exc)
            return
        try:
            results = self._on_error(value, exc)
            if not isinstance(results, (list, tuple)):
                raise TypeError(f"on_error must return a list of outputs, got {type(results).__name__}")
        except BaseException as handler_exc:
            handler_exc.__context__ = exc
            self.fail(value, handler_exc, "on_error handler")
            return
        self._attempts.metrics.error_rows += 1
        entry.complete(results)

    def fail(self, value: Any, exc: BaseException, what: str = "async call") -> None:
        """Fail the operator: nothing more is emitted, calls still running are cancelled."""
        if self._failure is not None:
            return
        self._failure = function_error(value, exc, what)
        self._limit = 0
        self._attempts.abandon_all()
        self._attempts.flush_latencies()
        self._wake()

    async def process_watermark(self, timestamp: Any) -> None:
        """Queue a watermark (it takes a slot and is emitted according to the ordering policy)."""
        self._check()
        watermark = Watermark(timestamp)
        while self._held >= self.capacity:
            await self._wait_for_space()
        self._queue.try_put(watermark)
        self._held += 1
        self._drain()

    def snapshot_state(self) -> List[StreamElement]:
        """The input elements still held (in flight or completed-not-emitted), for a checkpoint."""
        return self._queue.values()

    def __len__(self) -> int:
        """Elements currently held by the queue."""
        return len(self._queue)

    @property
    def failure(self) -> Optional[AsyncFunctionError]:
        """The error that failed the operator, if any."""
        return self._failure

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._loop is None:
            raise RuntimeError("AsyncWaitOperator is not open: 'await op.open()' first")
        if self._closed:
            raise RuntimeError("AsyncWaitOperator is closed")

    async def _wait_for_space(self) -> None:
        self._space_waiter = waiter = self._loop.create_future()  # type: ignore[union-attr]
        try:
            await waiter
        finally:
            if self._space_waiter is waiter:
                self._space_waiter = None
        self._check()

    # ------------------------------------------------------------------ emission
    def _wake(self) -> None:
        for name in ("_space_waiter", "_idle_waiter"):
            waiter = getattr(self, name)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
                setattr(self, name, None)
        if self._room_listener is not None:
            self._room_listener()

    def _drain(self) -> None:
        """Emit everything emittable; called by the queue whenever an entry completes."""
        if self._draining or self._failure is not None:
            return
        self._draining = True
        queue = self._queue
        try:
            self._held -= queue.emit_completed(self._output)
        except BaseException as exc:
            self._held = len(queue)
            self.fail("(the element being emitted)", exc, "the output callable")
        finally:
            self._draining = False
        self._wake_after_emit()

    def _wake_waiters(self) -> None:
        waiter = self._space_waiter
        if waiter is not None and self._has_room() and not waiter.done():
            waiter.set_result(None)
        idle = self._idle_waiter
        if idle is not None and self._queue.is_empty() and not idle.done():
            idle.set_result(None)

    def _wake_after_emit(self) -> None:
        """Room may have appeared: wake waiters, call the room listener (once per element: the
        room test is _has_room's, inlined)."""
        if self._space_waiter is not None or self._idle_waiter is not None:
            self._wake_waiters()
        listener = self._room_listener
        if listener is not None and self._held < self._limit and (
                self.adaptive is None or self.inflight < self.adaptive.limit):
            listener()
