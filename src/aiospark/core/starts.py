"""How a new element's first attempt starts: inline, a run at a time, or straight in a Task.

:class:`Starts` is the hot path of :class:`~aiospark.core.attempts.Attempts` (its base class; the
state it uses is set up there). A call's first step runs inline (``core/eager.py``): a call that
completes without suspending -- a no-op, a cache hit -- never gets a Task and is emitted at once
when nothing held goes first, and a driver holding many inputs hands them over a run at a time
(``start_run``: one tight loop for calls that keep completing at once). Calls are sampled in
windows: when a whole window suspended, the next ``DIRECT_TASK_RUN`` calls go straight to a Task
around ``_drive``, which takes the outcome without a done-callback hop. First steps that block the
loop are timed and reported (:class:`~aiospark.core.errors.BlockedLoopWarning`).

Example (what the operator does for each new element)::

    attempts.start(value, timestamp)                    # one element
    pos = attempts.start_run(values, pos, end, None)    # a run of them, while they complete at once
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, List, Sequence

from . import eager
from .calls import Call
from .errors import warn_blocking
from .function import describe_function

_perf_counter = time.perf_counter

#: A first step (code before the first await) longer than this blocked the loop; after
#: BLOCKING_STREAK such steps in a row (so one descheduled thread is not blamed) warn once.
BLOCKING_STEP_SECONDS = 0.05
BLOCKING_STREAK = 3

#: Every call whose first step is sampled eagerly; if all of a window suspend, the next
#: DIRECT_TASK_RUN calls go straight to ``create_task`` (cheaper for calls that always do I/O).
SAMPLE_WINDOW = 32
DIRECT_TASK_RUN = 1024

#: Latencies are buffered and added to the histogram this many at a time.
LATENCY_BATCH = 256

_STARTING: Any = object()  # Call.task while its Task is being created


class Starts:
    """First attempts (see the module docstring); mixed into :class:`Attempts`."""

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
            # recent calls all suspended: an eager first step would only add cost (start_tasks
            # does the same for a batch; one call here costs ~8 % fewer instructions than through it)
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

    def start_run(self, values: Sequence[Any], pos: int, end: int, timestamp: Any) -> int:
        """Start the calls of ``values[pos:end]`` one after another while they complete during
        their first step, emitting their results at once; the first call that fails or suspends is
        queued as :meth:`start` would, and the run ends there. Returns the index of the first value
        not started.

        The operator has checked for room, that ``batchable`` is set and no direct-task run is
        under way, and that results completed now are emitted at once (nothing held goes first);
        all stay true while calls complete without suspending.
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
                if kind == eager.PENDING:
                    payload.cancel()  # the operator failed: the call that suspended is not kept
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

    def start_tasks(self, values: Sequence[Any], pos: int, end: int, timestamp: Any) -> int:
        """Start the calls of ``values[pos:end]`` straight in Tasks (a direct-task run is under
        way, with at least ``end - pos`` calls left in it); returns the index of the first value
        not started (``end``, or earlier when the operator failed meanwhile).

        What :meth:`start` does for each of them, with the per-call lookups done once. The
        operator has checked for room for all of them and that no rate limiter reserves per call.
        """
        op = self.op
        started = self.clock()
        timeouts = self.timeouts
        if timeouts is not None and timeouts.timer is None:
            timeouts.arm(started)
        self.metrics.calls += end - pos
        self.direct_tasks_left -= end - pos
        invoke, enqueue, drive = self.invoke, op.enqueue, self._drive
        loop = self.loop
        create_task = loop.create_task  # type: ignore[union-attr]
        # a task factory may run a call to its end inside create_task (3.12's eager tasks)
        factory = loop.get_task_factory() is not None  # type: ignore[union-attr]
        for i in range(pos, end):
            value = values[i]
            try:
                coro = invoke(value)
            except Exception as exc:  # the call could not even be created (e.g. wrong arity)
                self._on_exception(enqueue(value, timestamp, started), exc, 0.0)
            else:
                call = enqueue(value, timestamp, started)
                call.task = _STARTING  # not None: a Task started eagerly (a task factory) may end at once
                call.task = create_task(drive(call, coro))
                if not factory:
                    continue
            if op.failure is not None:  # nothing more starts on a failed operator
                self.direct_tasks_left += end - i - 1
                self.metrics.calls -= end - i - 1
                return i + 1
        return end

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

    def _blocking_step(self, seconds: float) -> None:
        self.blocked_seconds += seconds
        self.slow_streak += 1
        if self.slow_streak >= BLOCKING_STREAK and not self.warned_blocking:
            self.warned_blocking = True
            name = describe_function(self.function)
            warn_blocking(name, f"a call of {name!r} ran {seconds * 1000:.0f} ms without yielding to the event loop.")
