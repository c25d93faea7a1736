"""How calls are made for queued elements: attempts, retries, timeouts, rate limits, feedback.

:class:`Attempts` is the call-making half of :class:`~aiospark.core.operator.AsyncWaitOperator`
(the operator keeps the queue, the emission and the failure state). For every element it starts
the first attempt (eagerly: a call that completes without suspending never gets a Task; once
calls keep suspending, straight in a Task), works on the queued
:class:`~aiospark.core.calls.Call` (the element's queue entry and call state in one object),
schedules back-offs and rate-limited starts with ``loop.call_at``, arms the operator's
:class:`~aiospark.core.timeouts.Timeouts`, feeds an optional adaptive concurrency limit, and counts everything in
:class:`~aiospark.core.metrics.OperatorMetrics`. It reports each element's end to the operator:
``element_results(call, results)``, ``element_done(call, results)`` or ``element_failed(call, exc)``.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from . import eager
from .adaptive import AdaptiveConcurrency
from .calls import Call
from .errors import describe_input, warn_blocking
from .function import AsyncFunction, describe_function
from .metrics import OperatorMetrics
from .ratelimit import make_limiter
from .timeouts import Timeouts

if TYPE_CHECKING:  # pragma: no cover
    from .operator import AsyncWaitOperator

_perf_counter = time.perf_counter

#: A first step (code before the first await) longer than this blocked the loop; after
#: BLOCKING_STREAK such steps in a row (so one descheduled thread is not blamed) warn once.
BLOCKING_STEP_SECONDS = 0.05
BLOCKING_STREAK = 3

#: Every call whose first step is sampled eagerly; if all of a window suspend, the next
#: DIRECT_TASK_RUN calls go straight to ``create_task`` (cheaper for calls that always do I/O).
SAMPLE_WINDOW = 32
DIRECT_TASK_RUN = 1024

#: How long ``close()`` waits for cancelled calls to unwind before giving up on them.
CLOSE_GRACE_SECONDS = 5.0

#: Latencies are buffered and added to the histogram this many at a time.
LATENCY_BATCH = 256

_STARTING: Any = object()  # Call.task while its Task is being created


class Attempts:
    """Makes the calls of one operator (see the module docstring)."""

    def __init__(self, op: "AsyncWaitOperator", rate_limit: Any, adaptive: Optional[AdaptiveConcurrency]):
        self.op = op
        self.function = op.function
        self.timeout = op.timeout
        self.retry = op.retry
        self.returns_list = isinstance(op.function, AsyncFunction)
        self.invoke = op.function.async_invoke if self.returns_list else op.function
        self.metrics = OperatorMetrics()
        limiter = make_limiter(rate_limit)
        self.reserve = getattr(limiter, "reserve", None)  # a synchronous limiter: O(1) reservations
        self.acquire = None if self.reserve is not None else getattr(limiter, "acquire", None)
        if self.acquire is not None:
            self.invoke = self._limited(self.invoke, self.acquire)
        self.adaptive = adaptive
        # a completed call needs no further checks: one output per call, no result predicate, no
        # adaptive limit to feed
        self.plain = adaptive is None and not self.returns_list and (
            self.retry is None or self.retry.result_predicate is None)
        # a call that completes while it is started may be emitted without ever being queued
        self.emit_direct = adaptive is None and (self.retry is None or self.retry.result_predicate is None)
        # calls may be started a run at a time (start_run): no limit or check needs them one by one
        self.batchable = self.emit_direct and self.reserve is None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.clock: Any = None  # loop.time, or time.monotonic itself for asyncio's own loops
        #: cancelled attempts still unwinding -> the timer that stops waiting for them
        self.cancelled: Dict[asyncio.Task, asyncio.TimerHandle] = {}
        #: per-call timeouts (None without a timeout)
        self.timeouts = Timeouts(self, self.timeout) if self.timeout is not None else None
        #: latencies not yet in the histogram (flush_latencies)
        self.latencies: List[float] = []
        self.sampled = self.sampled_suspended = self.direct_tasks_left = 0
        #: seconds first steps spent blocking the loop (see BlockedLoopWarning)
        self.blocked_seconds = 0.0
        self.slow_streak = 0
        self.warned_blocking = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make calls on ``loop`` (the operator's ``open()``)."""
        self.loop = loop
        # asyncio's BaseEventLoop.time() is a Python-level wrapper of time.monotonic()
        plain = getattr(type(loop), "time", None) is asyncio.BaseEventLoop.time
        self.clock = time.monotonic if plain else loop.time

    def _limited(self, invoke: Any, acquire: Any) -> Any:
        metrics = self.metrics

        async def limited(value: Any) -> Any:
            waited = await acquire()
            if waited:
                metrics.rate_limited += 1
            return await invoke(value)

        limited.__qualname__ = describe_function(self.function)
        return limited

    # ------------------------------------------------------------------ first attempts
    def start(self, value: Any, timestamp: Any) -> None:
        """Start the first attempt for a new element (the operator has checked for room).

        The element is queued (``op.enqueue``) unless its call completes during its first step
        and the operator can emit it at once (``op.emit_now``): the common no-op/cache-hit case.
        """
        op = self.op
        started = self.clock()
        timeouts = self.timeouts
        if timeouts is not None and timeouts.timer is None:
            timeouts.arm(started)
        if self.reserve is not None:
            delay = self.reserve()
            if delay > 0.0:
                self.metrics.rate_limited += 1
                call = op.enqueue(value, timestamp, started)
                call.permit = True
                call.backoff = self.loop.call_at(started + delay, self.attempt, call)  # type: ignore[union-attr]
                return
        self.metrics.calls += 1
        try:
            coro = self.invoke(value)
        except Exception as exc:  # the call could not even be created (e.g. wrong arity)
            self._on_exception(op.enqueue(value, timestamp, started), exc, 0.0)
            return
        if self.direct_tasks_left:
            # recent calls all suspended: an eager first step would only add cost
            self.direct_tasks_left -= 1
            call = op.enqueue(value, timestamp, started)
            call.task = _STARTING  # not None: a Task started eagerly (a task factory) may end at once
            call.task = self.loop.create_task(self._drive(call, coro))  # type: ignore[union-attr]
            return
        begun = _perf_counter()
        kind, payload = eager.start(coro, self.loop)
        took = _perf_counter() - begun
        if took > BLOCKING_STEP_SECONDS:
            self._blocking_step(took)
        elif self.slow_streak:
            self.slow_streak = 0
        self.sampled += 1
        if kind == eager.PENDING:
            self.sampled_suspended += 1
        if self.sampled == SAMPLE_WINDOW:
            if self.sampled_suspended == SAMPLE_WINDOW:
                self.direct_tasks_left = DIRECT_TASK_RUN
            self.sampled = self.sampled_suspended = 0
        if kind == eager.DONE:
            self.metrics.successes += 1
            latencies = self.latencies
            latencies.append(took)
            if len(latencies) >= LATENCY_BATCH:
                self.flush_latencies()
            # emitted without queueing when possible (an AsyncFunction's non-list result goes the
            # long way, which reports it)
            if self.emit_direct and (not self.returns_list or type(payload) is list) \
                    and op.emit_now(payload if self.returns_list else (payload,), timestamp):
                return
            call = op.enqueue(value, timestamp, started)
            if self.plain:
                call.finished = True
                op.element_done(call, [payload])
            else:
                self._on_result(call, payload, took)
        elif kind == eager.FAILED:
            self._on_exception(op.enqueue(value, timestamp, started), payload, took)
        else:
            self._attach(op.enqueue(value, timestamp, started), payload)

    def runs_eagerly(self) -> bool:
        """Whether :meth:`start_run` may take the next calls: recent calls did not all suspend,
        and nothing (a rate limit, an adaptive limit, a result predicate) needs each call alone."""
        return self.batchable and not self.direct_tasks_left

    def start_run(self, values: Sequence[Any], pos: int, end: int, timestamp: Any) -> int:
        """Start the calls of ``values[pos:end]`` one after another while they complete during
        their first step, emitting their results at once; the first call that fails or suspends is
        queued as :meth:`start` would, and the run ends there. Returns the index of the first value
        not started.

        The operator has checked for room and that results completed now are emitted at once
        (nothing held goes first); both stay true while calls complete without suspending.
        """
        op = self.op
        results: List[Any] = []
        latencies = self.latencies
        nxt, kind, payload, took = eager.first_steps(self.invoke, values, pos, end, self.loop, results,
                                                     latencies, BLOCKING_STEP_SECONDS)
        done = len(results)
        metrics = self.metrics
        metrics.calls += done
        if done:
            metrics.successes += done
            self.sampled = self.sampled_suspended = 0  # a completed call breaks the suspension window
            if done > 1 or kind != eager.DONE or took <= BLOCKING_STEP_SECONDS:
                self.slow_streak = 0  # at least one of them did not block
            if len(latencies) >= LATENCY_BATCH:
                self.flush_latencies()
            if not self._emit_run(values, pos, results, timestamp):
                return nxt
        if took > BLOCKING_STEP_SECONDS:
            self._blocking_step(took)
        elif kind != eager.DONE and self.slow_streak:
            self.slow_streak = 0
        if kind == eager.DONE:
            return nxt
        value = values[nxt]
        metrics.calls += 1
        started = self.clock() - took
        timeouts = self.timeouts
        if timeouts is not None and timeouts.timer is None:
            timeouts.arm(started)
        if kind == eager.FAILED:
            self._on_exception(op.enqueue(value, timestamp, started), payload, took)
        else:
            self.sampled += 1
            self.sampled_suspended += 1
            if self.sampled == SAMPLE_WINDOW:
                self.direct_tasks_left = DIRECT_TASK_RUN
                self.sampled = self.sampled_suspended = 0
            self._attach(op.enqueue(value, timestamp, started), payload)
        return nxt + 1

    def _emit_run(self, values: Sequence[Any], pos: int, results: List[Any], timestamp: Any) -> bool:
        """Emit the results of calls started at ``values[pos]`` that completed in their first step;
        ``False`` if the operator failed meanwhile."""
        op = self.op
        if not self.returns_list:
            return op.emit_run(results, timestamp)
        outputs: List[Any] = []
        for i, result in enumerate(results):
            if type(result) is list:
                outputs += result
                continue
            # an AsyncFunction's non-list result fails its element (or makes its error rows) the
            # long way, after what completed before it
            if not op.emit_run(outputs, timestamp):
                return False
            outputs = []
            self._on_result(op.enqueue(values[pos + i], timestamp, self.clock()), result, 0.0)
            if op.failure is not None:
                return False
        return op.emit_run(outputs, timestamp)

    async def _drive(self, call: Call, coro: Any) -> None:
        """Run a first attempt in its own Task and take its outcome (no done-callback hop).

        ``call.task`` is None once the attempt was abandoned (timeout, failure, close), and
        ``timing_out`` is set while the timeout handler decides: then the outcome is ignored.
        """
        try:
            result = await coro
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            if call.task is not None and not call.timing_out:
                call.task = None
                if isinstance(exc, asyncio.CancelledError):
                    exc = asyncio.CancelledError("the async call was cancelled")
                self._on_exception(call, exc, self.clock() - call.started)
            return
        if call.task is None or call.timing_out:
            return
        call.task = None
        latency = self.clock() - call.started
        self.metrics.successes += 1
        latencies = self.latencies
        latencies.append(latency)
        if len(latencies) >= LATENCY_BATCH:
            self.flush_latencies()
        if self.plain:
            call.finished = True
            self.op.element_results(call, (result,))
        elif self.emit_direct and type(result) is list:  # an AsyncFunction's results, nothing to check
            call.finished = True
            self.op.element_results(call, result)
        else:
            self._on_result(call, result, latency)

    def idle(self) -> None:
        """Nothing is held any more (the operator's ``finish()``): no timer is left armed and the
        histogram is complete."""
        if self.timeouts is not None:
            self.timeouts.idle()
        self.flush_latencies()

    def flush_latencies(self) -> None:
        """Move the buffered latencies into the histogram (the hot path buffers them; O(1) each)."""
        if self.latencies:
            latencies, self.latencies = self.latencies, []
            self.metrics.record_latencies(latencies)

    def _attach(self, call: Call, task: asyncio.Task) -> None:
        call.task = task
        task.add_done_callback(call.attempt_done)

    # ------------------------------------------------------------------ later attempts
    def attempt(self, call: Call) -> None:
        """Start another attempt for ``call`` (after a back-off or a rate-limit wait)."""
        call.backoff = None
        if call.finished or call.timing_out:
            return
        loop = self.loop
        if self.reserve is not None:
            if call.permit:
                call.permit = False
            else:
                delay = self.reserve()
                if delay > 0.0:
                    self.metrics.rate_limited += 1
                    call.permit = True
                    call.backoff = loop.call_at(loop.time() + delay, self.attempt, call)  # type: ignore
                    return
        self.metrics.calls += 1
        call.attempt_started = loop.time()  # type: ignore[union-attr]
        try:
            kind, payload = eager.start(self.invoke(call.value), loop)
        except Exception as exc:
            kind, payload = eager.FAILED, exc
        if kind == eager.DONE:
            self.metrics.successes += 1
            self.metrics.record_latency(loop.time() - call.attempt_started)  # type: ignore[union-attr]
            self._on_result(call, payload, 0.0)
        elif kind == eager.FAILED:
            self._on_exception(call, payload, 0.0)
        else:
            self._attach(call, payload)

    def attempt_done(self, call: Call, task: asyncio.Task) -> None:
        if call.finished or call.task is not task:
            if not task.cancelled():
                task.exception()  # abandoned (timeout, failure, close): its outcome no longer matters
            return
        call.task = None
        latency = self.loop.time() - call.attempt_started  # type: ignore[union-attr]
        if task.cancelled():
            self._on_exception(call, asyncio.CancelledError("the async call was cancelled"), latency)
            return
        exc = task.exception()
        if exc is not None:
            self._on_exception(call, exc, latency)
        else:
            self.metrics.successes += 1
            self.metrics.record_latency(latency)
            self._on_result(call, task.result(), latency)

    # ------------------------------------------------------------------ outcomes
    def _on_result(self, call: Call, result: Any, latency: float) -> None:
        if self.adaptive is not None:
            self.adaptive.on_success(latency, self.op.inflight)
        if self.returns_list:
            if type(result) is list:
                results = result
            elif isinstance(result, (list, tuple)):
                results = list(result)
            else:
                self.final_failure(call, TypeError(
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
                self.op.fail(call.value, exc, "retry result_predicate")
                return
            if again and self._schedule_retry(call, None):
                return
        self._retire(call)
        self.op.element_done(call, results)

    def _on_exception(self, call: Call, exc: BaseException, latency: float) -> None:
        if self.adaptive is not None:
            self.adaptive.on_failure(exc, latency)
        retry = self.retry
        if retry is not None and retry.exception_predicate is not None and isinstance(exc, Exception):
            try:
                again = retry.should_retry_exception(exc)
            except BaseException as pred_exc:
                self.op.fail(call.value, pred_exc, "retry exception_predicate")
                return
            if again and self._schedule_retry(call, exc):
                return
        self.final_failure(call, exc)

    def _schedule_retry(self, call: Call, exc: Optional[BaseException]) -> bool:
        delay = call.next_delay(self.retry)  # type: ignore[arg-type]
        if delay is None:
            return False
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool) and retry_after > delay:
            delay = float(retry_after)
        call.retries += 1
        self.metrics.retries += 1
        loop = self.loop
        call.backoff = loop.call_at(loop.time() + delay, self.attempt, call)  # type: ignore[union-attr]
        return True

    def final_failure(self, call: Call, exc: BaseException) -> None:
        """The element failed for good (no retry left): on_error rows or the operator's failure."""
        self._retire(call)
        self.metrics.failures += 1
        self.op.element_failed(call, exc)

    def _blocking_step(self, seconds: float) -> None:
        self.blocked_seconds += seconds
        self.slow_streak += 1
        if self.slow_streak >= BLOCKING_STREAK and not self.warned_blocking:
            self.warned_blocking = True
            name = describe_function(self.function)
            warn_blocking(name, f"a call of {name!r} ran {seconds * 1000:.0f} ms without yielding to the event loop.")

    # ------------------------------------------------------------------ bookkeeping
    def _retire(self, call: Call) -> None:
        """The call is over: later outcomes of its attempts are ignored."""
        call.finished = True

    def stop_attempt(self, call: Call) -> None:
        """Cancel the running attempt or pending back-off of ``call``."""
        if call.backoff is not None:
            call.backoff.cancel()
            call.backoff = None
        task = call.task
        if task is not None:
            call.task = None
            if not task.done():
                task.cancel()
                # until it has unwound it still holds its resources (a connection): it counts
                # against capacity, and close() waits for it -- for CLOSE_GRACE_SECONDS at most
                self.cancelled[task] = self.loop.call_later(  # type: ignore[union-attr]
                    CLOSE_GRACE_SECONDS, self._unwound, task)
                task.add_done_callback(self._unwound)
                self.op.update_room()

    def _unwound(self, task: asyncio.Task) -> None:
        give_up = self.cancelled.pop(task, None)
        if give_up is not None:
            give_up.cancel()
            self.op.room_freed()

    def abandon_all(self) -> None:
        """Stop everything still running (failure or close)."""
        for call in list(self.op.pending_calls()):
            self.stop_attempt(call)
            self._retire(call)

    async def close(self) -> None:
        self.abandon_all()
        if self.timeouts is not None:
            self.timeouts.idle()
        tasks = [t for t in self.cancelled if not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_GRACE_SECONDS)
        for handle in self.cancelled.values():
            handle.cancel()
        self.cancelled.clear()
        self.op.update_room()
        self.flush_latencies()
