"""One client (pool) per process, event loop and source configuration, shared by every user.

Spark opens a lookup source once per Python worker *per job* (each ``lookup_join`` call is a new
function), so a pool made in every ``open()`` would add ``pool_size`` server connections per job
and keep them until the worker ends. Instead, ``open()`` takes a reference to the client of its
configuration and ``close()`` gives it back; the client is closed when its last user closes
(for Spark: when the worker process ends, see :mod:`aiospark.runtime.worker_loop`). Twenty jobs
with ``PostgresLookup(pool_size=2)`` hold at most 2 connections per worker.

Example::

    client = await SHARED.acquire(("redis", url, db), make_client, close_client)
    ...
    await SHARED.release(("redis", url, db))
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["SharedClients", "SHARED", "config_key"]


def config_key(*parts: Any) -> str:
    """A digest of a configuration (secrets included, so that other credentials get another client),
    safe to keep and show: it reveals nothing of the parts."""
    return hashlib.sha256(repr(parts).encode("utf-8", "surrogatepass")).hexdigest()


class _Entry:
    __slots__ = ("client", "users", "ready", "close")

    def __init__(self, ready: asyncio.Future, close: Callable[[Any], Awaitable[None]]) -> None:
        self.client: Any = None
        self.users = 0
        self.ready = ready
        self.close = close


class SharedClients:
    """Reference-counted clients keyed by (process, running loop, configuration key)."""

    def __init__(self) -> None:
        self._entries: dict[tuple, _Entry] = {}

    def _key(self, key: str) -> tuple:
        # per process (a forked child must not use its parent's sockets) and per loop (asyncio
        # clients belong to the loop that made them)
        return (os.getpid(), id(asyncio.get_running_loop()), key)

    async def acquire(self, key: str, create: Callable[[], Awaitable[Any]],
                      close: Callable[[Any], Awaitable[None]]) -> Any:
        """The client for ``key``, made with ``create()`` by its first user; counts one more user.

        Concurrent first users wait for one ``create()``; a failed ``create()`` raises in each of
        them and leaves nothing behind (the next ``acquire`` tries again).
        """
        k = self._key(key)
        entry = self._entries.get(k)
        if entry is None:
            loop = asyncio.get_running_loop()
            entry = self._entries[k] = _Entry(loop.create_future(), close)
            try:
                entry.client = await create()
            except BaseException as exc:
                del self._entries[k]
                entry.ready.set_exception(exc)
                entry.ready.exception()  # retrieved here: each waiter re-raises it
                raise
            entry.ready.set_result(None)
        elif not entry.ready.done():
            await asyncio.shield(entry.ready)
        entry.users += 1
        return entry.client

    async def release(self, key: str) -> None:
        """One user fewer for ``key``; the last one closes the client."""
        k = self._key(key)
        entry = self._entries.get(k)
        if entry is None or not entry.ready.done():
            return
        entry.users -= 1
        if entry.users <= 0:
            del self._entries[k]
            await entry.close(entry.client)

    def users(self, key: str) -> int:
        """How many users hold the client of ``key`` on this loop (0: none is open)."""
        entry = self._entries.get(self._key(key))
        return entry.users if entry is not None else 0


#: The process-wide registry the connectors use.
SHARED = SharedClients()
