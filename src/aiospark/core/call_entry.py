"""An element's queue entry, :class:`Call`, and how its caller reports the call's outcome.

The operator puts a :class:`Call` in its queue when the element enters; the element's call (made
by :class:`~aiospark.core.calls.Caller`) reports its outcome through one callback,
:data:`Report`: ``report(call, results, error, what)``, where ``what`` names the part that raised
(:data:`CALL`, :data:`TIMEOUT_HANDLER` or a retry predicate) or, for results from
``function.timeout(value)``, :data:`TIMEOUT_RESULTS`. Deadlines, key order and the journal's
identities work on Calls too, without the caller.

Example::

    call = Call(value, None, loop.time())   # the element enters the queue now: its deadline counts from here
    queue.add(call)
    report(call, [output], None, CALL)      # what the caller does once the call is over
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .elements import Record, StreamElement
from .result_future import ResultFuture

#: ``report(call, results, error, what)``: the call is over with ``results`` (a list), or failed
#: with ``error``; ``what`` names the part that raised (CALL, TIMEOUT_HANDLER or a predicate).
Report = Callable[["Call", list[Any] | None, BaseException | None, str], None]

CALL = "async call"
TIMEOUT_HANDLER = "timeout handler"
#: the results came from ``function.timeout(value)``, not from the call (never recorded as its outcome)
TIMEOUT_RESULTS = "timeout results"
#: a predicate that raises fails the operator, whatever the error policy (SPEC section 1)
PREDICATES = ("retry result_predicate", "retry exception_predicate")


class Call(ResultFuture):
    """One element held by the operator: its queue entry (a :class:`ResultFuture`) and its call.

    ``element`` is the plain ``(value, timestamp)`` pair (a :class:`Record` is built only when a
    snapshot asks for the input: a Record per element costs more than the rest of the entry).
    ``task`` runs the call, ``started`` is when the element entered the queue (its deadline counts
    from there), ``timed_out`` is set once its deadline expired it, ``identity`` is the element's
    identity when the operator computed it (a journal's: :mod:`aiospark.core.durable`).
    """

    __slots__ = ("task", "started", "timed_out", "identity")

    def __init__(self, value: Any, timestamp: Any = None, started: float = 0.0):
        # ResultFuture's state set here, not through its __init__: one frame less per element
        self.element = (value, timestamp)
        self._results = self._exception = self._listener = self._segment = None
        self._done = False
        self.task: asyncio.Task[Any] | None = None
        self.started = started
        self.timed_out = False
        self.identity: str | None = None

    @property
    def value(self) -> Any:
        """The input value of this element."""
        return self.element[0]

    def inputs(self) -> list[StreamElement]:
        """The input element this entry holds, as a :class:`Record` (for snapshots)."""
        return [Record(*self.element)]

    def running_tasks(self) -> list[asyncio.Task[Any]]:
        """Its tasks not done yet (what closing the operator cancels)."""
        task = self.task
        return [] if task is None or task.done() else [task]

    def __repr__(self) -> str:
        state = "done" if self._done else "timed out" if self.timed_out else "running"
        return f"<Call {state} {Record(*self.element)!r}>"

