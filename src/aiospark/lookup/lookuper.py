"""Cache + coalescing + micro-batching in front of a :class:`LookupSource`.

This is what a lookup join calls once per input row. Per key it:

1. returns ``[]`` at once when any key value is ``None`` (SQL NULL never matches);
2. answers from the :class:`LookupCache` when one is configured;
3. joins an in-flight load of the same key (one source call for many waiters);
4. otherwise loads it: ``source.lookup(key)`` awaited in the caller's own task, or -- when
   the source supports batches -- adds the key to the pending batch, which is sent with one
   ``source.lookup_batch`` call once ``max_batch_size`` keys are pending or
   ``max_batch_delay`` seconds after its first key arrived (one loop timer per
   batch, no polling).

Lookups that join a load wait on a future of their own, which the load completes: cancelling
one of them never touches the load. The lookup that loads in its own task cancels its load when
it is cancelled (a timed-out call stops its request); lookups that joined it get a fresh load
of their own, in a task. A failed load raises the same exception in every waiter and is not
cached. A batch outcome may be an exception for one key: only that key's waiters get it.

Example::

    lookuper = Lookuper(RedisLookup("user:{id}", "name STRING"),
                        cache=LookupCache(max_rows=50_000, expire_after_write=60))
    await lookuper.open()
    rows = await lookuper.lookup((42,))      # [{'name': 'Ada'}] or []
    await lookuper.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from ..core import unwinding
from .cache import LookupCache
from .source import LookupSource

__all__ = ["Lookuper"]

_RUNTIME = ("_loop", "_inflight", "_pending", "_timer", "_tasks", "_opened")


def _as_rows(rows: Any) -> list:
    if type(rows) is list:
        return rows
    if rows is None:
        return []
    if isinstance(rows, Mapping):
        return [dict(rows)]
    return list(rows)


class Lookuper:
    """The per-worker lookup front end: ``await open()``, ``await lookup(key)``, ``await close()``.

    Args:
        source: the :class:`LookupSource` to query.
        cache: an optional :class:`LookupCache` (``None``: every key goes to the source,
            concurrent lookups of one key are still coalesced).
        batch: group keys into ``lookup_batch`` calls when the source supports it.
        max_batch_size / max_batch_delay: override the source's batching settings.

    Picklable before and after ``open()`` (runtime state is not pickled). One
    instance belongs to the event loop that ran ``open()``.
    """

    def __init__(
        self,
        source: LookupSource,
        cache: LookupCache | None = None,
        batch: bool = True,
        *,
        max_batch_size: int | None = None,
        max_batch_delay: float | None = None,
    ) -> None:
        if not callable(getattr(source, "lookup", None)):
            raise TypeError(f"source must be a LookupSource (with async lookup()), got {source!r}")
        if cache is not None and not isinstance(cache, LookupCache):
            raise TypeError(f"cache must be a LookupCache or None, got {cache!r}")
        size = source.max_batch_size if max_batch_size is None else max_batch_size
        delay = source.max_batch_delay if max_batch_delay is None else max_batch_delay
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"max_batch_size must be an int >= 1, got {size!r}")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            raise ValueError(f"max_batch_delay must be a number of seconds >= 0, got {delay!r}")
        self.source = source
        self.cache = cache
        self.batch = bool(batch) and bool(getattr(source, "supports_batch", False))
        self.max_batch_size = size
        self.max_batch_delay = float(delay)
        self.lookups = self.null_keys = self.coalesced = 0
        self.source_calls = self.batches = self.batched_keys = self.errors = 0
        self._opened = False

    # --- lifecycle -----------------------------------------------------------------------

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in _RUNTIME}
        state["_opened"] = False
        return state

    def __repr__(self) -> str:
        return f"Lookuper({self.source!r}, cache={self.cache!r}, batch={self.batch})"

    async def open(self) -> None:
        """Open the source and set up per-loop state. A second call is a no-op."""
        if self._opened:
            return
        self._loop = asyncio.get_running_loop()
        #: key -> the futures of the lookups waiting for its load (the load is running or batched)
        self._inflight: dict[tuple, list[asyncio.Future]] = {}
        #: keys of the next batch, in arrival order
        self._pending: dict[tuple, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        await self.source.open()
        self._opened = True

    async def close(self) -> None:
        """Cancel outstanding loads, then close the source. Safe to call twice."""
        if not self._opened:
            return
        self._opened = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = {}
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:  # a load that ignores its cancel is left behind after the grace, as a call would be
            await asyncio.wait(tasks, timeout=unwinding.GRACE_SECONDS)
        inflight, self._inflight = self._inflight, {}
        for waiters in inflight.values():
            for waiter in waiters:
                waiter.cancel()
        await self.source.close()

    async def __aenter__(self) -> Lookuper:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- lookups -------------------------------------------------------------------------

    async def lookup(self, key: Any) -> list[dict]:
        """Return the rows for ``key`` (a tuple of key values; a list or scalar is wrapped).

        ``[]`` means no match, and is returned without a source call when any key
        value is ``None``. The returned list may be shared with the cache and other
        callers: do not mutate it.
        """
        if type(key) is not tuple:
            key = tuple(key) if isinstance(key, list) else (key,)
        self.lookups += 1
        for v in key:
            if v is None:
                self.null_keys += 1
                return []
        cache = self.cache
        if cache is not None:
            rows = cache.get(key)
            if rows is not None:
                return rows
        if not self._opened:
            self._not_open()
        waiters = self._inflight.get(key)
        if waiters is None and not self.batch:
            # load in this task (inline: a coroutine less per row); lookups of the key join it
            self._inflight[key] = []
            self.source_calls += 1
            try:
                rows = await self.source.lookup(key)
                if type(rows) is not list:
                    rows = _as_rows(rows)
            except asyncio.CancelledError:
                self._hand_over(key)
                raise
            except BaseException as exc:
                self.errors += 1
                self._fail(key, exc)
                raise
            return self._loaded(key, rows)
        if self._loop is not asyncio.get_running_loop():  # a future of another loop would hang
            self._not_open()
        waiter = self._loop.create_future()
        if waiters is None:
            self._inflight[key] = [waiter]
            self._add_to_batch(key)
        else:
            waiters.append(waiter)
            self.coalesced += 1
        return await waiter

    async def lookup_many(self, keys: Iterable[Any]) -> list[list[dict]]:
        """Look up many keys concurrently; results in the order of ``keys``."""
        return list(await asyncio.gather(*(self.lookup(k) for k in keys)))

    def _not_open(self) -> None:
        if not self._opened:
            raise RuntimeError(f"{type(self).__name__} is not open: call 'await lookuper.open()' first")
        raise RuntimeError(f"{type(self).__name__} was opened on another event loop: close() it and "
                           "open() it on the loop that calls lookup()")

    def _start_load_task(self, key: tuple) -> None:
        task = self._loop.create_task(self._load_one(key))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _add_to_batch(self, key: tuple) -> None:
        pending = self._pending
        pending[key] = None
        if len(pending) >= self.max_batch_size:
            self._flush()
        elif len(pending) == 1:
            self._timer = self._loop.call_later(self.max_batch_delay, self._flush)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # mark retrieved: its waiters got the exception already

    def _fail(self, key: tuple, exc: BaseException) -> None:
        cancelled = isinstance(exc, asyncio.CancelledError)
        for waiter in self._inflight.pop(key, ()):
            if not waiter.done():
                if cancelled:
                    waiter.cancel()
                else:
                    waiter.set_exception(exc)

    def _hand_over(self, key: tuple) -> None:
        """The lookup loading ``key`` in its own task was cancelled: the lookups that joined it get
        a load of their own, in a task."""
        waiters = self._inflight.get(key)
        if waiters is not None and any(not w.done() for w in waiters):
            self._start_load_task(key)
        else:
            self._inflight.pop(key, None)

    async def _load_one(self, key: tuple) -> list[dict]:
        """Load ``key`` in a task of its own, for the lookups waiting on it."""
        self.source_calls += 1
        try:
            rows = _as_rows(await self.source.lookup(key))
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                self.errors += 1
            self._fail(key, exc)
            raise
        return self._loaded(key, rows)

    def _loaded(self, key: tuple, rows: list) -> list:
        if self.cache is not None:
            self.cache.put(key, rows)
        waiters = self._inflight.pop(key, None)
        if waiters:  # lookups of the same key joined this load
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(rows)
        return rows

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, {}
        if batch:
            task = self._loop.create_task(self._run_batch(list(batch)))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

    async def _run_batch(self, keys: list[tuple]) -> None:
        self.source_calls += 1
        self.batches += 1
        self.batched_keys += len(keys)
        try:
            result = await self.source.lookup_batch(keys)
            if not isinstance(result, Mapping):  # None is a forgotten return, not "all missing"
                raise TypeError(f"{type(self.source).__name__}.lookup_batch must return a mapping "
                                f"{{key: rows | exception}} (absent keys are misses), got "
                                f"{type(result).__name__}")
            get = result.get
        except BaseException as exc:
            self.errors += not isinstance(exc, asyncio.CancelledError)
            for key in keys:
                self._fail(key, exc)
            raise
        for key in keys:
            found = get(key)
            if isinstance(found, BaseException):  # this key's own error: its neighbours go on
                self.errors += 1
                self._fail(key, found)
                continue
            self._loaded(key, _as_rows(found))

    # --- metrics -------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters: ``lookups``, ``null_keys``, ``coalesced``, ``source_calls``, ``batches``,
        ``batched_keys``, ``errors``, ``inflight`` and, with a cache, ``cache_hits``,
        ``cache_misses``, ``cache_loads``, ``cache_evictions``, ``cache_expirations``,
        ``cache_size``."""
        out = {
            "lookups": self.lookups, "null_keys": self.null_keys, "coalesced": self.coalesced,
            "source_calls": self.source_calls, "batches": self.batches,
            "batched_keys": self.batched_keys, "errors": self.errors,
            "inflight": len(self._inflight) if self._opened else 0,
        }
        if self.cache is not None:
            out.update({f"cache_{k}": v for k, v in self.cache.stats().items()})
        return out
