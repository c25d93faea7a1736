"""A cancelled call gets a grace period to unwind; one that ignores its cancellation is left behind.

When a call's deadline passes, its Task is cancelled and its element waits for it to unwind (its
``finally`` blocks run, its connection closes) before ``function.timeout(value)`` decides, so that
there are never more than ``capacity`` calls alive. A call that catches ``CancelledError`` and
carries on (a bare ``except:`` in a loop, ``except BaseException``) would hold its element, and the
Spark task with it, for ever. So the wait is bounded: if the Task has not ended
:data:`GRACE_SECONDS` after the cancel, its element is decided as if it had (its timeout outcome),
the Task is left to run on its own (it no longer holds a slot; closing the operator cancels it once
more), and a :class:`~aiospark.core.errors.CancellationIgnoredWarning` names the function. The same
grace bounds how long ``close()`` waits for the calls it cancels.

Example (what the caller does when a deadline passes)::

    unwinding = Unwinding(loop, "fetch", metrics)
    done = functools.partial(on_unwound, call)     # done(task): the Task ended, or was left behind
    task.add_done_callback(done)
    unwinding.cancel(task, done)
"""
from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

from .errors import CancellationIgnoredWarning
from .metrics import OperatorMetrics

#: How long a cancelled call may take to unwind before its element is decided without it.
GRACE_SECONDS = 5.0

#: ``ended(task)``: a done callback of ``task``; called with the Task still running if it is left behind
Ended = Callable[["asyncio.Task[Any]"], object]


class Unwinding:
    """The cancels of one operator's calls (see the module docstring). ``name`` is the user
    function's, for the warning; ``metrics`` counts the calls left behind (``left_behind``). The
    grace is :data:`GRACE_SECONDS` as it is when the operator opens."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str, metrics: OperatorMetrics):
        self._loop = loop
        self._name = name
        self._metrics = metrics
        self.grace = GRACE_SECONDS
        #: Tasks that ignored their cancellation for longer than the grace and still run
        self.left_behind: set[asyncio.Task[Any]] = set()

    def cancel(self, task: asyncio.Task[Any], ended: Ended) -> None:
        """Cancel ``task``, whose done callbacks include ``ended``, and make sure ``ended(task)``
        runs within the grace: if the Task still runs then, ``ended`` is taken off its callbacks
        and called at once (``task.done()`` is False), and the Task is left behind."""
        task.cancel()
        timer = self._loop.call_later(self.grace, self._overdue, task, ended)
        task.add_done_callback(lambda _task: timer.cancel())

    def _overdue(self, task: asyncio.Task[Any], ended: Ended) -> None:
        if task.done():  # it ended in this very loop iteration: its callbacks are scheduled
            return
        task.remove_done_callback(ended)
        self.left_behind.add(task)
        self._metrics.left_behind += 1
        task.add_done_callback(self._forget)
        ended(task)  # first: a warning turned into an error (-W error) must not hold the element
        warnings.warn(
            f"aiospark: a call of {self._name} went on {self.grace:g} s after its timeout cancelled it "
            f"(it caught CancelledError and did not re-raise it); its row got its timeout outcome and the "
            f"call was left running, outside the operator's capacity. Let CancelledError propagate: "
            f"re-raise it in 'except asyncio.CancelledError' and 'except BaseException' blocks, and do "
            f"not use a bare 'except:'.",
            CancellationIgnoredWarning, stacklevel=1)  # run by the loop: no user frame to point at

    def _forget(self, task: asyncio.Task[Any]) -> None:
        """A Task left behind ended after all: its outcome no longer matters (retrieved, so that
        asyncio does not log it as never retrieved)."""
        self.left_behind.discard(task)
        if not task.cancelled():
            task.exception()
