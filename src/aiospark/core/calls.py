"""One element held by the operator: its queue entry and the state of its call, in one object."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Iterator, Optional

from .result_future import ResultFuture

if TYPE_CHECKING:  # pragma: no cover
    from .attempts import Attempts
    from .retry import RetryStrategy


class Call(ResultFuture):
    """The queue entry of one element (a :class:`ResultFuture`) plus its attempts and back-off.
    One object per element: the queue holds it, the attempts run for it.

    ``task`` is the running attempt (``None`` while none runs); ``finished`` is set once the call
    is over for good (result, final failure, timeout or abandonment), after which late outcomes
    of cancelled attempts are ignored.
    """

    __slots__ = ("attempts", "started", "attempt_started", "retries", "task", "backoff",
                 "finished", "timing_out", "permit", "_delays")

    def __init__(self, attempts: "Attempts", element: Any, started: float):
        # ResultFuture's slots set here (no super().__init__ frame: one per element), except
        # _listener and _segment, which the queue's add() sets
        self.element = element
        self._results = self._exception = None
        self._done = self.finished = self.timing_out = self.permit = False
        self.attempts = attempts
        self.started = self.attempt_started = started
        self.retries = 0
        self.task: Optional[asyncio.Task] = None
        self.backoff: Optional[asyncio.TimerHandle] = None
        self._delays: Optional[Iterator[float]] = None

    @property
    def value(self) -> Any:
        """The input value of this element."""
        return self.element[0]

    def next_delay(self, retry: "RetryStrategy") -> Optional[float]:
        """The next back-off delay, or None when retries are exhausted."""
        if self._delays is None:
            self._delays = retry.delays()
        return next(self._delays, None)

    def attempt_done(self, task: asyncio.Task) -> None:
        self.attempts.attempt_done(self, task)

    def timeout_handler_done(self, task: asyncio.Task) -> None:
        timeouts = self.attempts.timeouts
        if self.finished or self.task is not task:
            return
        self.task = None
        if task.cancelled():
            timeouts.failed(self, asyncio.CancelledError("the timeout handler was cancelled"))
        elif task.exception() is not None:
            timeouts.failed(self, task.exception())  # type: ignore[arg-type]
        else:
            timeouts.handled(self, task.result())

    def __repr__(self) -> str:
        state = "finished" if self.finished else "running" if self.task is not None else "pending"
        return f"<Call {state} {self.element!r}>"
