"""Per-call timeouts of one operator, from a single loop timer (and the watch for lost calls).

A call's deadline is the moment it entered the queue plus the operator's timeout, and the queue
hands out its running calls in the order they entered, so the calls past their deadline are
always the oldest running ones. :class:`Deadlines` keeps one ``loop.call_at`` armed for the
oldest running call's deadline; when it fires it expires every running call past its deadline
and re-arms for the next one. No timer per call and no work when a call completes: with calls
that finish well inside the timeout the timer fires about once per ``timeout`` seconds.

Without a timeout the timer watches instead, every ``WATCH_SECONDS`` while calls are held, for a
call whose Task ended without running a single step: other code cancelled it before it started (a
call reports its own outcome as its Task's last step, so such a call would otherwise be held for
ever); ``on_lost(call)`` reports it. With a timeout, the call's deadline finds it.

Example (what the operator does)::

    deadlines = Deadlines(loop, 2.0, queue.pending, on_expired=caller.time_out, on_lost=caller.lost)
    deadlines.started(call)        # after a call entered the queue, with call.started set
    deadlines.stop()               # nothing held any more, or the operator closes
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from .call_entry import Call

__all__ = ["Deadlines", "WATCH_SECONDS"]

#: Without a timeout, how often the held calls are looked at for one whose Task never ran.
WATCH_SECONDS = 10.0


class Deadlines:
    """Times out the running calls of one operator (see the module docstring).

    ``running()`` returns the calls still running, oldest first (the queue's ``pending``);
    ``on_expired(call)`` is called once for each call whose deadline passed. ``timeout=None``: no
    deadlines; ``on_lost(call)`` is called for each call whose Task ended without running.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float | None,
                 running: Callable[[], Iterable[Call]], on_expired: Callable[[Call], None],
                 on_lost: Callable[[Call], None]):
        self._loop = loop
        self._timeout = timeout
        self._period = timeout if timeout is not None else WATCH_SECONDS
        self._running = running
        self._on_expired = on_expired
        self._on_lost = on_lost
        self._timer: asyncio.TimerHandle | None = None

    def started(self, call: Call) -> None:
        """``call`` entered the queue at ``call.started``: arm the timer if none is armed (an
        armed timer is due no later than this call's deadline)."""
        if self._timer is None:
            self._timer = self._loop.call_at(call.started + self._period, self._fire)

    def stop(self) -> None:
        """Drop the timer (nothing is held any more, or the operator closes)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        now = self._loop.time()
        if self._timeout is None:
            self._watch(now)
            return
        expired = []
        for call in self._running():
            if call.timed_out:
                continue
            deadline = call.started + self._timeout
            if deadline > now:
                self._timer = self._loop.call_at(deadline, self._fire)
                break
            expired.append(call)
        for call in expired:  # after the walk: expiring a call may change the queue
            self._on_expired(call)

    def _watch(self, now: float) -> None:
        held = list(self._running())
        for call in held:
            task = call.task
            if task is not None and task.done():
                self._on_lost(call)
        if held:
            self._timer = self._loop.call_at(now + self._period, self._fire)
