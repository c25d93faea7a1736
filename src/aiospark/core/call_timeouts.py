"""A call's timeout: its deadline cancels what runs, then ``function.timeout(value)`` gives its results.

:class:`CallTimeouts` is the part of :class:`~aiospark.core.calls.Caller` (a mixin) that the
operator's deadlines call: :meth:`CallTimeouts.time_out` cancels the call's Task -- the attempt or
the back-off under way, so the user's ``finally`` blocks and ``async with`` exits run -- and once
it has unwound, :meth:`CallTimeouts.on_timeout` asks ``function.timeout(value)`` (sync or async)
for the results (never retried; an ``async def`` function has none: ``AsyncTimeoutError``). A call
that ignores the cancel is waited for at most a grace period (:mod:`aiospark.core.unwinding`).

Example (what the operator's deadlines do)::

    deadlines = Deadlines(loop, timeout, running_calls, caller.time_out, caller.lost)
"""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from .adaptive import AdaptiveConcurrency
from .call_entry import CALL, TIMEOUT_HANDLER, TIMEOUT_RESULTS, Call, Report
from .errors import AsyncTimeoutError, describe_input
from .metrics import OperatorMetrics
from .unwinding import Unwinding


class CallTimeouts:
    """The timeout path of a :class:`~aiospark.core.calls.Caller` (see the module docstring);
    the caller's ``__init__`` and ``bind()`` set the state declared here."""

    function: Any
    returns_list: bool
    timeout: float | None
    adaptive: AdaptiveConcurrency | None
    metrics: OperatorMetrics
    stopped: bool
    unwinding: Unwinding
    _report: Report
    _create_task: Callable[[Any], asyncio.Task[Any]]

    def time_out(self, call: Call) -> None:
        """The call's deadline passed: cancel what runs (the attempt or the back-off); the timeout
        handler decides once the Task has unwound."""
        task = call.task
        if task is not None and task.done():
            self.lost(call)
            return
        call.timed_out = True
        self.metrics.timeouts += 1
        if self.adaptive is not None:
            self.adaptive.on_overload(self.timeout)
        if task is not None:  # None: it waits for its turn (key order); see on_timeout
            unwound = functools.partial(self._timed_out, call)
            task.add_done_callback(unwound)
            self.unwinding.cancel(task, unwound)

    def _timed_out(self, call: Call, task: asyncio.Task[Any]) -> None:
        """The timed-out call's Task has unwound (or was cancelled before its first step), or it
        ignored the cancel for the whole grace period and was left behind."""
        if not self.stopped:
            self.on_timeout(call)

    def lost(self, call: Call) -> None:
        """``call``'s Task ended without running a step: code other than aiospark's cancelled it
        before it started (aiospark's own cancels are a deadline's or the operator's). Its row
        gets that error, as a call cancelled later does, instead of being held for ever."""
        self._report(call, None, asyncio.CancelledError("the async call was cancelled before it started"), CALL)

    def on_timeout(self, call: Call) -> None:
        """Ask ``function.timeout(value)`` (sync or async) for the timed-out call's results."""
        value = call.element[0]
        try:
            if not self.returns_list:
                raise AsyncTimeoutError(f"async call timed out after {self.timeout} s "
                                        f"for input {describe_input(value)}")
            outcome = self.function.timeout(value)
            if asyncio.iscoroutine(outcome):
                task = self._create_task(outcome)
                call.task = task
                task.add_done_callback(functools.partial(self._timeout_handled, call))
                return
        except Exception as exc:
            self._report(call, None, exc, CALL)
            return
        self._timeout_result(call, outcome)

    def _timeout_handled(self, call: Call, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._report(call, None, asyncio.CancelledError("the timeout handler was cancelled"),
                         TIMEOUT_HANDLER)
        elif task.exception() is not None:
            self._report(call, None, task.exception(), CALL)
        else:
            self._timeout_result(call, task.result())

    def _timeout_result(self, call: Call, outcome: Any) -> None:
        if isinstance(outcome, (list, tuple)):
            self._report(call, list(outcome), None, TIMEOUT_RESULTS)
        else:
            self._report(call, None, TypeError(
                f"{type(self.function).__name__}.timeout must return a list of outputs or raise, "
                f"got {type(outcome).__name__}"), TIMEOUT_HANDLER)
