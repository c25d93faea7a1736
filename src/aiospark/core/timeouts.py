"""Per-call timeouts of one operator, from a single loop timer.

A call's deadline is its first attempt's start plus the operator's timeout, and the queue holds
calls in start order, so the expired calls are always the oldest pending ones. :class:`Timeouts`
keeps one ``loop.call_at`` armed for the oldest running call's deadline; when it fires it times
out every pending call past its deadline and re-arms for the next one. No per-call timer, no heap,
no work per completed call.

A timed-out call's attempt is cancelled (Flink cannot do that), then ``function.timeout(value)``
decides: its list of outputs is emitted (never retried), or what it raises is the element's
failure (an :class:`~aiospark.core.errors.AsyncTimeoutError` for a plain coroutine function).

Example (what the operator does)::

    timeouts = Timeouts(attempts, 2.0)
    timeouts.arm(started)          # when a call starts and no timer is armed
    timeouts.idle()                # nothing held any more: drop the timer
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional

from . import eager
from .calls import Call
from .errors import AsyncTimeoutError, describe_input
from .function import AsyncFunction

if TYPE_CHECKING:  # pragma: no cover
    from .attempts import Attempts


class Timeouts:
    """Times out the calls of one operator's :class:`~aiospark.core.attempts.Attempts`."""

    def __init__(self, attempts: "Attempts", timeout: float):
        self.attempts = attempts
        self.timeout = timeout
        #: fires at the oldest running call's deadline (armed whenever a call starts without one)
        self.timer: Optional[asyncio.TimerHandle] = None

    def arm(self, started: float) -> None:
        """A call started at ``started`` while no timer is armed: its deadline is the next one."""
        self.timer = self.attempts.loop.call_at(started + self.timeout, self._on_deadline)  # type: ignore

    def idle(self) -> None:
        """Nothing is held any more (or the operator closes): no timer is left armed."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _on_deadline(self) -> None:
        """Time out every call past its deadline, then wait for the oldest one left."""
        self.timer = None
        loop = self.attempts.loop
        now = loop.time()  # type: ignore[union-attr]
        timeout = self.timeout
        expired = []
        for call in self.attempts.op.pending_calls():
            if call.finished or call.timing_out:
                continue
            deadline = call.started + timeout
            if deadline > now:
                self.timer = loop.call_at(deadline, self._on_deadline)  # type: ignore[union-attr]
                break
            expired.append(call)
        for call in expired:
            self._on_timeout(call)

    def _on_timeout(self, call: Call) -> None:
        if call.finished or call.timing_out:
            return
        attempts = self.attempts
        running = call.task is not None
        attempts.stop_attempt(call)
        call.timing_out = True
        attempts.metrics.timeouts += 1
        if attempts.adaptive is not None and running:
            attempts.adaptive.on_overload(attempts.loop.time() - call.attempt_started)  # type: ignore[union-attr]
        value = call.value
        function = attempts.function
        try:
            if isinstance(function, AsyncFunction):
                outcome = function.timeout(value)
            else:
                raise AsyncTimeoutError(f"async call timed out after {self.timeout} s "
                                        f"for input {describe_input(value)}")
            if asyncio.iscoroutine(outcome):
                kind, payload = eager.start(outcome, attempts.loop)
                if kind == eager.PENDING:
                    call.task = payload
                    payload.add_done_callback(call.timeout_handler_done)
                    return
                if kind == eager.FAILED:
                    raise payload
                outcome = payload
        except BaseException as exc:
            attempts.final_failure(call, exc)
            return
        self.handled(call, outcome)

    def handled(self, call: Call, outcome: Any) -> None:
        """The (never retried) result of ``function.timeout(value)``."""
        attempts = self.attempts
        if not isinstance(outcome, (list, tuple)):
            attempts.final_failure(call, TypeError(
                f"{type(attempts.function).__name__}.timeout must return a list of outputs or raise, "
                f"got {type(outcome).__name__}"))
            return
        call.finished = True
        attempts.op.element_done(call, list(outcome))

    def failed(self, call: Call, exc: BaseException) -> None:
        """``function.timeout(value)`` raised (or its coroutine did): the element's failure."""
        self.attempts.final_failure(call, exc)
