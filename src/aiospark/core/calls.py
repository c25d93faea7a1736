"""State of one element whose call suspended or needs retries (the fast path has none)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Iterator, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .attempts import Attempts
    from .retry import RetryStrategy


class Call:
    """Attempts, back-off and deadline of one queued element."""

    __slots__ = ("op", "entry", "value", "started", "attempt_started", "retries", "task", "backoff",
                 "finished", "timing_out", "deadline", "permit", "_delays")

    def __init__(self, op: "Attempts", entry: Any, started: float):
        self.op = op
        self.entry = entry
        self.value = entry.element.value
        self.started = started
        self.attempt_started = started
        self.permit = False  # holds a rate-limit reservation for its next attempt
        self.retries = 0
        self.task: Optional[asyncio.Task] = None
        self.backoff: Optional[asyncio.TimerHandle] = None
        self.finished = False
        self.timing_out = False
        self.deadline = 0.0
        self._delays: Optional[Iterator[float]] = None

    def next_delay(self, retry: "RetryStrategy") -> Optional[float]:
        """The next back-off delay, or None when retries are exhausted."""
        if self._delays is None:
            self._delays = retry.delays()
        return next(self._delays, None)

    def attempt_done(self, task: asyncio.Task) -> None:
        self.op.attempt_done(self, task)

    def timeout_handler_done(self, task: asyncio.Task) -> None:
        op = self.op
        if self.finished or self.task is not task:
            return
        self.task = None
        if task.cancelled():
            op.timeout_failed(self, asyncio.CancelledError("the timeout handler was cancelled"))
        elif task.exception() is not None:
            op.timeout_failed(self, task.exception())  # type: ignore[arg-type]
        else:
            op.timeout_handled(self, task.result())
