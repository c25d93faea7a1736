"""The async-wait operator: many calls in flight, a bounded number of them, emitted by policy.

Asyncio-native rewrite of Flink's ``AsyncWaitOperator`` (FLIP-12 + FLIP-232 retries). One event loop
does everything: a call that completes wakes the emitter directly (a queue callback, no polling); a
timeout is one ``loop.call_at`` handle per suspended element; a back-off is another. Nothing here
uses threads or locks.

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
import math
import time
from collections import deque
from typing import Any, Callable, Deque, Iterable, List, Optional, Set

from . import eager
from .calls import Call
from .elements import Record, StreamElement, Watermark
from .errors import AsyncFunctionError, AsyncTimeoutError, describe_input, function_error, warn_blocking
from .function import AsyncFunction, check_async_function, describe_function
from .queues import OrderedQueue, UnorderedQueue
from .retry import RetryStrategy

OnError = Callable[[Any, BaseException], List[Any]]

_perf_counter = time.perf_counter

#: A first step (code before the first await) longer than this blocked the loop: warn once.
BLOCKING_STEP_SECONDS = 0.05

_new_record = tuple.__new__  # Record(value, ts) without NamedTuple's Python-level __new__

#: Every call whose first step is sampled eagerly; if all of a window suspend, the next
#: DIRECT_TASK_RUN calls go straight to ``create_task`` (cheaper for calls that always do I/O).
SAMPLE_WINDOW = 32
DIRECT_TASK_RUN = 1024

#: How long ``close()`` waits for cancelled calls to unwind before giving up on them.
CLOSE_GRACE_SECONDS = 5.0


def check_timeout(timeout: Any) -> Optional[float]:
    """``None`` or ``<= 0`` means no timeout; anything else must be a number of seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout):
        raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
    return float(timeout) if timeout > 0 else None


def check_retry(retry: Any) -> Optional[RetryStrategy]:
    if retry is not None and not isinstance(retry, RetryStrategy):
        raise TypeError("retry must be an aiospark.RetryStrategy (e.g. RetryStrategy.fixed_delay(3, 0.1)) "
                        f"or None, got {type(retry).__name__}")
    return retry


class AsyncWaitOperator:
    """Runs ``function`` for every element with at most ``capacity`` elements held at once.

    See the module docstring for an example and ``SPEC.md`` section 1 for the full contract.
    ``on_error(value, exc) -> list``, when given, turns a final failure into that element's results
    instead of failing the operator. ``manage_lifecycle=False`` leaves ``function.open()`` and
    ``close()`` to the caller (the Spark runtime opens a function once per worker, not per task).
    """

    def __init__(self, function: Any, output: Callable[[StreamElement], Any], *, ordered: bool = True,
                 timeout: Optional[float] = 60.0, capacity: int = 100,
                 retry: Optional[RetryStrategy] = None, on_error: Optional[OnError] = None,
                 manage_lifecycle: bool = True):
        self._invoke = check_async_function(function)
        self.function = function
        self._returns_list = isinstance(function, AsyncFunction)
        if not callable(output):
            raise TypeError(f"output must be a callable receiving each emitted element, got {type(output).__name__}")
        if on_error is not None and not callable(on_error):
            raise TypeError(f"on_error must be a callable (value, exception) -> list, got {type(on_error).__name__}")
        self._output = output
        self.ordered = bool(ordered)
        self.timeout = check_timeout(timeout)
        self.retry = check_retry(retry)
        self._on_error = on_error
        self._manage_lifecycle = manage_lifecycle
        # one output per call and no result predicate: a completed call needs no further checks
        self._plain_results = not self._returns_list and (self.retry is None or self.retry.result_predicate is None)
        queue_type = OrderedQueue if self.ordered else UnorderedQueue
        self._queue = queue_type(capacity, on_complete=self._drain)
        self.capacity = capacity
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._failure: Optional[AsyncFunctionError] = None
        self._draining = False
        self._space_waiter: Optional[asyncio.Future] = None
        self._idle_waiter: Optional[asyncio.Future] = None
        self._calls: Set[Call] = set()
        self._cancelled: Set[asyncio.Task] = set()
        self._deadlines: Deque[Call] = deque()
        self._deadline_timer: Optional[asyncio.TimerHandle] = None
        self._sampled = self._sampled_suspended = self._direct_tasks_left = 0
        #: seconds first steps spent blocking the loop (see BlockedLoopWarning)
        self.blocked_seconds = 0.0
        self._warned_blocking = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    async def open(self, restored: Optional[Iterable[StreamElement]] = None) -> None:
        """Call ``function.open()``, then re-process ``restored`` elements (a snapshot) in order."""
        self._loop = asyncio.get_running_loop()
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

    async def close(self) -> None:
        """Cancel whatever still runs, wait briefly for it to unwind, then ``function.close()``."""
        if self._closed:
            return
        self._closed = True
        for call in list(self._calls):
            self._abandon(call)
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._deadlines.clear()
        tasks = [t for t in self._cancelled if not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_GRACE_SECONDS)
        self._wake(AsyncFunctionError("the operator was closed"))
        if self._manage_lifecycle and isinstance(self.function, AsyncFunction):
            await self.function.close()

    # ------------------------------------------------------------------ input
    async def process_element(self, value: Any, timestamp: Any = None) -> None:
        """Start the call for ``value``; waits only while the queue is full (backpressure)."""
        if self._failure is not None or self._loop is None:
            self._check()
        record = Record(value, timestamp)
        entry = self._queue.try_put(record)
        while entry is None:
            await self._wait_for_space()
            entry = self._queue.try_put(record)
        self._start(entry, value)

    def try_process(self, value: Any, timestamp: Any = None) -> bool:
        """Start the call for ``value`` now if the queue has space; ``False`` when it is full.

        The non-blocking half of :meth:`process_element`, for drivers feeding many elements
        (``while not op.try_process(v): await op.wait_for_space()``).
        """
        if self._failure is not None or self._loop is None:
            self._check()
        entry = self._queue.try_put(_new_record(Record, (value, timestamp)))
        if entry is None:
            return False
        self._start(entry, value)
        return True

    async def wait_for_space(self) -> None:
        """Wait until the queue has a free slot (raises if the operator failed meanwhile)."""
        if len(self._queue) >= self._queue.capacity:
            await self._wait_for_space()
        else:
            self._check()

    async def process_watermark(self, timestamp: Any) -> None:
        """Queue a watermark (it takes a slot and is emitted according to the ordering policy)."""
        self._check()
        watermark = Watermark(timestamp)
        while self._queue.try_put(watermark) is None:
            await self._wait_for_space()
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

    async def _wait_for_space(self) -> None:
        self._space_waiter = waiter = self._loop.create_future()  # type: ignore[union-attr]
        try:
            await waiter
        finally:
            if self._space_waiter is waiter:
                self._space_waiter = None
        self._check()

    # ------------------------------------------------------------------ calls
    def _start(self, entry: Any, value: Any) -> None:
        loop = self._loop
        started = loop.time()  # type: ignore[union-attr]
        try:
            coro = self._invoke(value)
            if self._direct_tasks_left:
                # recent calls all suspended: an eager first step would only add cost
                self._direct_tasks_left -= 1
                call = self._new_call(entry, started)
                call.task = loop.create_task(self._drive(call, coro))  # type: ignore[union-attr]
                return
            begun = _perf_counter()
            kind, payload = eager.start(coro, loop)
            took = _perf_counter() - begun
            if took > BLOCKING_STEP_SECONDS:
                self._blocking_step(took)
            self._sampled += 1
            if kind == eager.PENDING:
                self._sampled_suspended += 1
            if self._sampled == SAMPLE_WINDOW:
                if self._sampled_suspended == SAMPLE_WINDOW:
                    self._direct_tasks_left = DIRECT_TASK_RUN
                self._sampled = self._sampled_suspended = 0
        except Exception as exc:  # the call could not even be created (e.g. wrong arity)
            kind, payload = eager.FAILED, exc
        if kind == eager.DONE:
            if self._plain_results:
                entry.complete([payload])
            else:
                self._on_result(entry, None, started, payload)
        elif kind == eager.FAILED:
            self._on_exception(entry, None, started, payload)
        else:
            self._attach(self._new_call(entry, started), payload)

    async def _drive(self, call: Call, coro: Any) -> None:
        """Run a first attempt in its own Task and take its outcome (no done-callback hop)."""
        try:
            result = await coro
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            if not (call.finished or call.timing_out or call.task is None or call.retries):
                call.task = None
                if isinstance(exc, asyncio.CancelledError):
                    exc = asyncio.CancelledError("the async call was cancelled")
                self._on_exception(call.entry, call, call.started, exc)
            return
        if not (call.finished or call.timing_out or call.task is None or call.retries):
            call.task = None
            if self._plain_results:
                self._retire(call)
                call.entry.complete([result])
            else:
                self._on_result(call.entry, call, call.started, result)

    def _new_call(self, entry: Any, started: float) -> Call:
        call = Call(self, entry, started)
        self._calls.add(call)
        if self.timeout is not None:
            # Deadlines are first-attempt time + a constant, so they arrive in order: a FIFO and
            # one loop timer for its head replace a heap push/cancel per element.
            call.deadline = started + self.timeout
            self._deadlines.append(call)
            if self._deadline_timer is None:
                self._deadline_timer = self._loop.call_at(call.deadline, self._on_deadline)  # type: ignore
        return call

    def _attach(self, call: Call, task: asyncio.Task) -> None:
        call.task = task
        task.add_done_callback(call.attempt_done)

    def attempt(self, call: Call) -> None:
        """Start another attempt for ``call`` (after a back-off)."""
        call.backoff = None
        if call.finished:
            return
        try:
            kind, payload = eager.start(self._invoke(call.value), self._loop)
        except Exception as exc:
            kind, payload = eager.FAILED, exc
        if kind == eager.DONE:
            self._on_result(call.entry, call, call.started, payload)
        elif kind == eager.FAILED:
            self._on_exception(call.entry, call, call.started, payload)
        else:
            self._attach(call, payload)

    def attempt_done(self, call: Call, task: asyncio.Task) -> None:
        if call.finished or call.task is not task:
            return  # abandoned (timeout, failure, close): its outcome no longer matters
        call.task = None
        if task.cancelled():
            self._on_exception(call.entry, call, call.started,
                               asyncio.CancelledError("the async call was cancelled"))
            return
        exc = task.exception()
        if exc is not None:
            self._on_exception(call.entry, call, call.started, exc)
        else:
            self._on_result(call.entry, call, call.started, task.result())

    def _on_result(self, entry: Any, call: Optional[Call], started: float, result: Any) -> None:
        if self._returns_list:
            if type(result) is list:
                results = result
            elif isinstance(result, (list, tuple)):
                results = list(result)
            else:
                self._final_failure(entry, call, TypeError(
                    f"{type(self.function).__name__}.async_invoke must return a list of outputs "
                    f"(use [] to emit nothing), got {type(result).__name__}: {describe_input(result, 80)}"))
                return
        else:
            results = [result]
        retry = self.retry
        if retry is not None and retry.result_predicate is not None:
            try:
                again = retry.should_retry_result(results)
            except BaseException as exc:
                self._fail(entry.element.value, exc, "retry result_predicate")
                return
            if again and self._schedule_retry(entry, call, started, None):
                return
        self._complete(entry, call, results)

    def _on_exception(self, entry: Any, call: Optional[Call], started: float, exc: BaseException) -> None:
        retry = self.retry
        if retry is not None and retry.exception_predicate is not None and isinstance(exc, Exception):
            try:
                again = retry.should_retry_exception(exc)
            except BaseException as pred_exc:
                self._fail(entry.element.value, pred_exc, "retry exception_predicate")
                return
            if again and self._schedule_retry(entry, call, started, exc):
                return
        self._final_failure(entry, call, exc)

    def _schedule_retry(self, entry: Any, call: Optional[Call], started: float,
                        exc: Optional[BaseException]) -> bool:
        if call is None:
            call = self._new_call(entry, started)
        delay = call.next_delay(self.retry)  # type: ignore[arg-type]
        if delay is None:
            return False
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool) and retry_after > delay:
            delay = float(retry_after)
        call.retries += 1
        loop = self._loop
        call.backoff = loop.call_at(loop.time() + delay, self.attempt, call)  # type: ignore[union-attr]
        return True

    def _complete(self, entry: Any, call: Optional[Call], results: List[Any]) -> None:
        if call is not None:
            self._retire(call)
        entry.complete(results)

    def _final_failure(self, entry: Any, call: Optional[Call], exc: BaseException) -> None:
        if call is not None:
            self._retire(call)
        value = entry.element.value
        if self._on_error is None:
            self._fail(value, exc)
            return
        try:
            results = self._on_error(value, exc)
            if not isinstance(results, (list, tuple)):
                raise TypeError(f"on_error must return a list of outputs, got {type(results).__name__}")
        except BaseException as handler_exc:
            handler_exc.__context__ = exc
            self._fail(value, handler_exc, "on_error handler")
            return
        entry.complete(results)

    def _blocking_step(self, seconds: float) -> None:
        self.blocked_seconds += seconds
        if not self._warned_blocking:
            self._warned_blocking = True
            name = describe_function(self.function)
            warn_blocking(name, f"a call of {name!r} ran {seconds * 1000:.0f} ms without yielding to the event loop.")

    # ------------------------------------------------------------------ timeouts
    def _on_deadline(self) -> None:
        self._deadline_timer = None
        deadlines = self._deadlines
        now = self._loop.time()  # type: ignore[union-attr]
        while deadlines:
            call = deadlines[0]
            if call.finished:
                deadlines.popleft()
            elif call.deadline <= now:
                deadlines.popleft()
                self._on_timeout(call)
            else:
                self._deadline_timer = self._loop.call_at(call.deadline, self._on_deadline)  # type: ignore
                return

    def _on_timeout(self, call: Call) -> None:
        if call.finished or call.timing_out:
            return
        self._stop_attempt(call)
        call.timing_out = True
        value = call.value
        function = self.function
        try:
            if isinstance(function, AsyncFunction):
                outcome = function.timeout(value)
            else:
                raise AsyncTimeoutError(f"async call timed out after {self.timeout} s "
                                        f"for input {describe_input(value)}")
            if asyncio.iscoroutine(outcome):
                kind, payload = eager.start(outcome, self._loop)
                if kind == eager.PENDING:
                    call.task = payload
                    payload.add_done_callback(call.timeout_handler_done)
                    return
                if kind == eager.FAILED:
                    raise payload
                outcome = payload
        except BaseException as exc:
            self._final_failure(call.entry, call, exc)
            return
        self.timeout_handled(call, outcome)

    def timeout_handled(self, call: Call, outcome: Any) -> None:
        """The (never retried) result of ``function.timeout(value)``."""
        if not isinstance(outcome, (list, tuple)):
            self._final_failure(call.entry, call, TypeError(
                f"{type(self.function).__name__}.timeout must return a list of outputs or raise, "
                f"got {type(outcome).__name__}"))
            return
        self._complete(call.entry, call, list(outcome))

    def timeout_failed(self, call: Call, exc: BaseException) -> None:
        self._final_failure(call.entry, call, exc)

    # ------------------------------------------------------------------ bookkeeping
    def _retire(self, call: Call) -> None:
        """The call is over: forget it (its deadline entry is dropped when it reaches the head)."""
        call.finished = True
        self._calls.discard(call)
        deadlines = self._deadlines
        while deadlines and deadlines[0].finished:
            deadlines.popleft()
        if not deadlines and self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None

    def _stop_attempt(self, call: Call) -> None:
        """Cancel the running attempt or pending back-off of ``call``."""
        if call.backoff is not None:
            call.backoff.cancel()
            call.backoff = None
        task = call.task
        if task is not None:
            call.task = None
            if not task.done():
                task.cancel()
                self._cancelled.add(task)  # close() waits for it to unwind
                task.add_done_callback(self._cancelled.discard)

    def _abandon(self, call: Call) -> None:
        """Stop everything a call still has running and forget it."""
        self._stop_attempt(call)
        self._retire(call)

    def _fail(self, value: Any, exc: BaseException, what: str = "async call") -> None:
        if self._failure is not None:
            return
        self._failure = function_error(value, exc, what)
        for call in list(self._calls):
            self._abandon(call)
        self._wake(self._failure)

    def _wake(self, error: Optional[BaseException] = None) -> None:
        for name in ("_space_waiter", "_idle_waiter"):
            waiter = getattr(self, name)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
                setattr(self, name, None)

    def _drain(self) -> None:
        """Emit everything emittable; called by the queue whenever an entry completes."""
        if self._draining or self._failure is not None:
            return
        self._draining = True
        queue = self._queue
        try:
            queue.emit_completed(self._output)
        except BaseException as exc:
            self._fail("(the element being emitted)", exc, "the output callable")
        finally:
            self._draining = False
        if self._space_waiter is not None and len(queue) < queue.capacity and not self._space_waiter.done():
            self._space_waiter.set_result(None)
        if self._idle_waiter is not None and queue.is_empty() and not self._idle_waiter.done():
            self._idle_waiter.set_result(None)
