"""Room in the operator: backpressure, and waking whoever waits once an emission frees some.

:class:`Room` is a part of :class:`~aiospark.core.operator.AsyncWaitOperator` (a mixin, on its
state). An element may enter while fewer than ``capacity`` elements are held (and, with an
adaptive capacity, fewer calls than its limit run); ``process_element`` and ``wait_for_space``
otherwise wait on one future. After every emission (the operator's one emit path) room may have
appeared: the waiter is woken, ``finish()``'s waiter once the queue is empty, and the ``on_room``
listener is called in the same loop step. A failure or close wakes them all to look again.

Example::

    while not op.try_process(value):
        await op.wait_for_space()   # raises if the operator failed meanwhile
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable

from .adaptive import AdaptiveConcurrency
from .errors import AsyncFunctionError
from .queues import ElementQueue


class Room:
    """The operator's room and its waiters (see the module docstring); the operator's
    ``__init__`` and ``open()`` set the state declared here."""

    capacity: int
    adaptive: AdaptiveConcurrency | None
    inflight: int
    _held: int
    _queue: ElementQueue
    _loop: asyncio.AbstractEventLoop | None
    _failure: AsyncFunctionError | None
    _closed: bool
    _space_waiter: asyncio.Future[None] | None
    _idle_waiter: asyncio.Future[None] | None
    _room_listener: Callable[[], None] | None

    async def wait_for_space(self) -> None:
        """Wait until another call may start (raises if the operator failed meanwhile)."""
        self._check()
        while not self._has_room():
            await self._wait_for_space()

    def on_room(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener()`` on the loop after every emission (room may have appeared), and when
        the operator fails or closes.

        A driver holding its input in memory can then start the next calls in the same loop step
        that ended the previous ones, instead of waking a coroutine in ``wait_for_space()`` one
        loop iteration later. The listener may call ``try_process`` and must not raise.

        Example::

            def fill():
                while values and op.failure is None and op.try_process(values[0]):
                    values.popleft()

            op.on_room(fill)
        """
        if listener is not None and not callable(listener):
            raise TypeError(f"on_room takes a callable (or None), got {type(listener).__name__}")
        self._room_listener = listener

    def _has_room(self) -> bool:
        return self._held < self.capacity and (self.adaptive is None or self.inflight < self.adaptive.limit)

    def _room_may_have_appeared(self) -> None:
        waiter = self._space_waiter
        if waiter is not None and not waiter.done() and self._has_room():
            waiter.set_result(None)
        idle = self._idle_waiter
        if idle is not None and not idle.done() and self._queue.is_empty():
            idle.set_result(None)
        if self._room_listener is not None and self._failure is None:
            self._room_listener()

    def _wake_all(self) -> None:
        """Failure or close: whoever waits must look at the state again."""
        for waiter in (self._space_waiter, self._idle_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if self._room_listener is not None:
            self._room_listener()

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._loop is None:
            raise RuntimeError("AsyncWaitOperator is not open: 'await op.open()' first")
        if self._closed:
            raise RuntimeError("AsyncWaitOperator is closed")

    async def _wait_for_space(self) -> None:
        self._space_waiter = waiter = self._loop.create_future()  # type: ignore[union-attr]
        try:
            await waiter
        finally:
            if self._space_waiter is waiter:
                self._space_waiter = None
        self._check()
