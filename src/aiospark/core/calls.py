"""One element's call: its attempts, retries, rate-limit waits and timeout, in one asyncio Task.

The life of an element's call, top-down:

1. The operator puts a :class:`Call` (the element's queue entry, :mod:`aiospark.core.call_entry`) in
   its queue, then :meth:`Caller.start` runs :meth:`Caller._attempts` for it in a real
   ``asyncio.Task`` -- the task the user's code sees as ``asyncio.current_task()``.
2. ``_attempts`` waits for the rate limit (charging the call's ``cost``), awaits the user's
   function, and when the attempt raises (or its result is one the retry strategy rejects) sleeps
   the back-off and tries again. An error carrying ``retry_after`` (a 429's ``Retry-After``) also
   pauses the rate limit for that long, so no other call of the limit starts meanwhile
   (:mod:`aiospark.core.call_limits`: the rate limit, the cost and the budget of an attempt).
3. If the call's deadline passes first, :meth:`Caller.time_out` cancels its Task -- the attempt or
   the back-off under way, so the user's ``finally`` blocks and ``async with`` exits run -- and once
   it has unwound, ``function.timeout(value)`` gives the results (never retried). A call that
   ignores the cancel is waited for at most a grace period (:mod:`aiospark.core.call_timeouts`,
   :mod:`aiospark.core.unwinding`).
4. The Task's last step (the end of :meth:`Caller._attempts`) reports the outcome to the operator through one
   callback, ``report(call, results, error, what)``; the operator completes the entry (or fails) and
   emits through its one emit path. Reporting from the Task itself, not from a done callback, spares
   every call a callback handle and a loop iteration (Flink's call, too, completes its own
   ``ResultFuture``).

Only public asyncio APIs are used: ``loop.create_task`` and, on Python 3.12+, ``asyncio.Task(coro,
loop=loop, eager_start=True)`` -- what ``asyncio.eager_task_factory`` makes, without its Python
frame per call -- when the loop has no task factory of its own (a call that needs no I/O then
completes without a loop round trip).

Example (what the operator does for each element)::

    caller = Caller(fetch, report=operator_report, timeout=5.0, retry=None, rate_limit=None)
    caller.bind(loop, inflight=lambda: 1)
    call = Call(value, None, loop.time())
    queue.add(call)
    caller.start(call)
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from .adaptive import AdaptiveConcurrency
from .call_entry import CALL, Call, Report
from .call_limits import CallLimits, CostError
from .call_timeouts import CallTimeouts
from .context import CallContext, current_call
from .durable import BudgetExhausted, BudgetGate, Identify, not_an_answer
from .errors import BadInput, describe_input
from .function import AsyncFunction, describe_function
from .metrics import OperatorMetrics
from .ratelimit import make_limiter
from .retry import RetryStrategy
from .unwinding import Unwinding

# Call and CostError are defined in call_entry and call_limits, and named here too: where tests
# and users import them from
__all__ = ["FOLD_LATENCIES", "Call", "Caller", "CostError"]

#: what ``_retry_delay`` returns for an exception the strategy would retry once its retries ran out
_RETRIES_SPENT = -1.0

#: latencies are noted in a list and folded into the histogram this many at a time
FOLD_LATENCIES = 1024
#: attempt latencies are our own measurement: the monotonic clock, without the loop's method frame
_clock = time.monotonic


class _PredicateError(Exception):
    """A retry predicate raised: the operator fails with ``cause`` (never an error row)."""

    def __init__(self, cause: BaseException, what: str):
        super().__init__(what)
        self.cause = cause
        self.what = what


class _NotAList(TypeError):
    """An AsyncFunction returned something other than a list: a failure, never retried."""

    aiospark_not_an_answer = True  # the function's definition is wrong, not the row's answer


class Caller(CallLimits, CallTimeouts):
    """Makes the calls of one operator (see the module docstring).

    ``function`` is an :class:`AsyncFunction` (its ``async_invoke`` returns a list of outputs) or
    an ``async def`` returning one output. ``rate_limit`` is anything
    :func:`~aiospark.core.ratelimit.make_limiter` takes; ``adaptive`` is fed each attempt's outcome.
    ``identify(value) -> str`` gives a call's ``idempotency_key()`` when the call asks for it (the
    operator passes it when no journal needs every element's identity up front).
    """

    def __init__(self, function: Any, *, report: Report, timeout: float | None,
                 retry: RetryStrategy | None, rate_limit: Any = None,
                 adaptive: AdaptiveConcurrency | None = None,
                 metrics: OperatorMetrics | None = None, budget: BudgetGate | None = None,
                 identify: Identify | None = None):
        self.function = function
        self.returns_list = isinstance(function, AsyncFunction)
        #: whether an attempt's result is the list of results (an AsyncFunction's, or a batch's)
        self.takes_list = self.returns_list
        self.invoke = function.async_invoke if self.returns_list else function
        self.timeout = timeout
        self.retry = retry
        self.adaptive = adaptive
        self.metrics = metrics if metrics is not None else OperatorMetrics()
        self._report = report
        limiter = make_limiter(rate_limit)
        self._reserve = getattr(limiter, "reserve", None)  # a token bucket: how long to wait
        self._acquire = None if self._reserve is not None else getattr(limiter, "acquire", None)
        self._limited = self._reserve is not None or self._acquire is not None
        #: asked before every attempt, after the rate limit (see aiospark.core.durable)
        self.budget = budget
        self.identify = identify
        #: ``cost(value) -> float`` charged per attempt (None: every call costs 1)
        self._cost: Callable[[Any], float] | None = getattr(limiter, "cost", None)
        #: ``pause(seconds)``: a Retry-After stops every call of the limit for that long
        self._pause: Callable[[float], None] | None = getattr(limiter, "pause", None)
        self._paused_for: Callable[[], float] | None = getattr(limiter, "paused_for", None)
        self._inflight: Callable[[], int] = lambda: 0
        # set by bind(), before the first call: the loop calls run on, how their Tasks are made, and
        # the operator's context (bind()'s), in which calls report: never a call's own
        self._loop: asyncio.AbstractEventLoop
        self._create_task: Callable[[Any], asyncio.Task[Any]]
        self._outside: contextvars.Context
        #: set when the operator failed or closes: outcomes no longer matter
        self.stopped = False
        #: the cancels of timed-out calls, each waited for at most a grace period (set by bind())
        self.unwinding: Unwinding = None  # type: ignore[assignment]

    def bind(self, loop: asyncio.AbstractEventLoop, inflight: Callable[[], int]) -> None:
        """Make calls on ``loop``; ``inflight()`` tells the adaptive limit how many calls run. Calls
        report in a copy of the context of this call (the operator's, set up by then: what the
        emission and the calls started from it see)."""
        self._loop = loop
        self._inflight = inflight
        self._outside = contextvars.copy_context()
        self.unwinding = Unwinding(loop, describe_function(self.function), self.metrics)
        if sys.version_info >= (3, 12) and loop.get_task_factory() is None:  # eager tasks
            self._create_task = functools.partial(asyncio.Task, loop=loop, eager_start=True)
        else:
            self._create_task = loop.create_task

    # ------------------------------------------------------------------ the call
    def start(self, call: Call) -> None:
        """Start the call of ``call`` (already in the queue, ``call.started`` set)."""
        timeout, value = self.timeout, call.element[0]
        # what time_left() and idempotency_key() tell the call's code (see aiospark.core.context)
        context = (call.started + timeout if timeout else None, self._loop, call.identity, self.identify, value)
        try:
            task = self._create_task(self._attempts(value, context, call))
        except (KeyboardInterrupt, SystemExit) as exc:  # raised in an eager first step: asyncio re-raises them
            self._report(call, None, exc, CALL)
            raise
        call.task = task
        if task.done():  # an eager Task (3.12+) that needed no I/O: over already, its outcome to report here
            try:
                outcome = task.result()
            except asyncio.CancelledError:  # the call cancelled its own Task and returned
                self._report(call, None, asyncio.CancelledError("the async call was cancelled"), CALL)
                return
            if outcome is not None:
                self._report(call, outcome[0], outcome[1], outcome[2])

    def flush(self) -> None:
        """End of input: start whatever waits to be started (nothing here: calls start at once)."""

    async def _attempts(self, value: Any, context: CallContext,
                        entry: Call) -> tuple[list[Any] | None, BaseException | None, str, bool] | None:
        """The call's Task: every attempt for ``value``, with rate-limit waits and back-offs in
        between, then, as its last step, the outcome that stands -- the results, or the exception --
        reported for ``entry``. Not when the operator stopped or ``entry``'s deadline passed (the
        cancel was ours: :meth:`time_out` decides once the Task has unwound), and not when
        ``entry.task`` is unset: the outcome is then returned, for whoever started the Task to
        report (:meth:`start`, for a call over within its eager first step; a batch's done
        callback), with, last, whether the exception is one the retry strategy would have retried
        had retries been left (what a batch's split looks at). ``context`` is what
        :func:`~aiospark.core.context.time_left` and ``idempotency_key`` tell the code of the call."""
        current_call.set(context)  # this task's own context: no reset needed
        metrics, adaptive, retry = self.metrics, self.adaptive, self.retry
        delays: Iterator[float] | None = None
        results: list[Any] | None = None
        error: BaseException | None = None
        what = ""
        admitting = True  # an error raised now is aiospark's refusal, not a call's answer
        retried_out = False  # the exception that stands is retryable: the retries ran out
        try:
            cost = self.cost_of(value) if self._cost is not None else None
            while True:
                admitting = True
                if self._limited:
                    await self._wait_for_rate_limit(cost)
                    if self.stopped or entry.timed_out:  # decided while a limiter swallowed the cancel
                        break
                if self.budget is not None:
                    await self._spend(value)
                admitting = False
                metrics.calls += 1
                begun = _clock()
                try:
                    # a row (dict) is copied for each attempt: what the function changes in it
                    # is never seen by a retry, an error row or the journal (docs/design.md)
                    result = await self.invoke(value.copy() if type(value) is dict else value)
                except Exception as exc:
                    latency = _clock() - begun
                    if adaptive is not None:
                        adaptive.on_failure(exc, latency)
                    if self._pause is not None:
                        self._pause_for(exc)
                    if retry is None:
                        raise
                    delays = delays or self._delays(entry)
                    delay = self._retry_delay(retry, exc, delays)
                    if delay is None:
                        raise
                    if delay < 0.0:  # _RETRIES_SPENT
                        retried_out = True
                        raise
                else:
                    latency = _clock() - begun
                    metrics.successes += 1
                    latencies = metrics.pending_latencies
                    latencies.append(latency)
                    if len(latencies) >= FOLD_LATENCIES:
                        metrics.fold_latencies()
                    if adaptive is not None:
                        adaptive.on_success(latency, self._inflight())
                    results = self._results_of(result) if self.takes_list else [result]
                    if retry is None or retry.result_predicate is None:
                        break
                    try:
                        again = retry.should_retry_result(results)
                    except Exception as exc:
                        raise _PredicateError(exc, "retry result_predicate") from exc
                    delays = delays or self._delays(entry)
                    delay = next(delays, None) if again else None
                    if delay is None:
                        break  # accepted, or retries exhausted: the last result stands
                if self.stopped or entry.timed_out:  # decided while this attempt swallowed the cancel:
                    break  # no new attempt, no new spend, for an element that has its outcome
                metrics.retries += 1
                await asyncio.sleep(delay)
        except asyncio.CancelledError:
            if self.stopped or entry.timed_out:  # the cancel was ours: the Task ends cancelled, time_out decides
                raise
            error, what = asyncio.CancelledError("the async call was cancelled"), CALL  # by the user's code
        except _PredicateError as exc:
            error, what = exc.cause, exc.what
        except Exception as exc:
            error, what = (not_an_answer(exc) if admitting else exc), CALL
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: reported, and they stop the loop
            if not isinstance(exc, GeneratorExit):  # GeneratorExit: the Task was destroyed unfinished
                results, error, what = None, exc, CALL
                if not (self.stopped or entry.timed_out) and entry.task is not None:
                    self._outside.copy().run(self._report, entry, results, error, what)
            raise
        # the outcome that stands
        if self.stopped or entry.timed_out:  # it ended anyway: finished meanwhile, or swallowed our cancel
            return None
        if entry.task is None:  # whoever started the Task reports: start(), for a call over within its
            return results, error, what, retried_out  # eager first step; a batch's done callback
        # in the operator's context, not this call's: what the report schedules (the emission, the
        # next call of a key) must not inherit the context variables the call set
        self._outside.copy().run(self._report, entry, results, error, what)
        return None

    def _delays(self, entry: Call) -> Iterator[float]:
        """The back-off delays of ``entry``'s call, asked for at its first retry (each element
        starts from the strategy's first delay)."""
        return self.retry.delays() if self.retry is not None else iter(())

    @staticmethod
    def _retry_delay(retry: RetryStrategy, exc: Exception, delays: Iterator[float]) -> float | None:
        """The back-off before retrying after ``exc``; None when it stands because it is not to be
        retried, :data:`_RETRIES_SPENT` when it would be but the retries ran out. An exception with a
        ``retry_after`` (seconds, e.g. from a 429) is never retried sooner than that."""
        if isinstance(exc, (BudgetExhausted, BadInput)):
            return None  # no retry can start once the budget is spent; a bad input stays bad
        try:
            again = retry.should_retry_exception(exc)
        except Exception as pred_exc:
            raise _PredicateError(pred_exc, "retry exception_predicate") from pred_exc
        if not again:
            return None
        delay = next(delays, None)
        if delay is None:
            return _RETRIES_SPENT
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool) and retry_after > delay:
            return float(retry_after)
        return delay

    def _results_of(self, result: Any) -> list[Any]:
        """An AsyncFunction's outputs: a copy of its list (or tuple) -- the function may reuse its
        list for the next call while these wait for their turn to be emitted --, anything else is
        its failure."""
        if isinstance(result, (list, tuple)):
            return list(result)
        raise _NotAList(f"{self._list_contract()}, got {type(result).__name__}: {describe_input(result, 80)}")

    def _list_contract(self) -> str:
        return f"{type(self.function).__name__}.async_invoke must return a list of outputs (use [] to emit nothing)"
