"""How calls are made for queued elements: attempts, retries, timeouts, rate limits, feedback.

:class:`Attempts` is the call-making half of :class:`~aiospark.core.operator.AsyncWaitOperator`
(the operator keeps the queue, the emission and the failure state). How an element's first
attempt starts is its base class :class:`~aiospark.core.starts.Starts`; this module works on the
queued
:class:`~aiospark.core.calls.Call` (the element's queue entry and call state in one object),
schedules back-offs and rate-limited starts with ``loop.call_at``, arms the operator's
:class:`~aiospark.core.timeouts.Timeouts`, feeds an optional adaptive concurrency limit, and counts everything in
:class:`~aiospark.core.metrics.OperatorMetrics`. It reports each element's end to the operator:
``element_results(call, results)``, ``element_done(call, results)`` or ``element_failed(call, exc)``.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from . import eager
from .adaptive import AdaptiveConcurrency
from .calls import Call
from .errors import describe_input
from .function import AsyncFunction, describe_function
from .metrics import OperatorMetrics
from .ratelimit import make_limiter
from .starts import LATENCY_BATCH, Starts  # noqa: F401 (LATENCY_BATCH re-exported)
from .timeouts import Timeouts

if TYPE_CHECKING:  # pragma: no cover
    from .operator import AsyncWaitOperator

#: How long ``close()`` waits for cancelled calls to unwind before giving up on them.
CLOSE_GRACE_SECONDS = 5.0


class Attempts(Starts):
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
