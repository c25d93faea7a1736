"""A bounded LRU cache with Flink-style expiry for lookup results.

Mirrors Flink's ``lookup.cache = PARTIAL`` options: ``max-rows``,
``expire-after-write``, ``expire-after-access`` and ``cache-missing-key``.

Example::

    >>> cache = LookupCache(max_rows=2, expire_after_write=60.0)
    >>> cache.put(("a",), [{"v": 1}])
    >>> cache.get(("a",))
    [{'v': 1}]
    >>> cache.get(("b",)) is None     # None means "not cached"; [] is a cached miss
    True
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["LookupCache"]


class LookupCache:
    """LRU-bounded cache of ``key -> list[dict]`` with time-based expiry.

    * ``max_rows`` -- most keys kept (least recently used evicted first), >= 1.
    * ``expire_after_write`` -- seconds after a ``put`` an entry becomes stale.
    * ``expire_after_access`` -- seconds after the last ``get`` hit (or ``put``).
    * ``cache_missing`` -- also cache empty results (``[]``), like Flink's
      ``lookup.partial-cache.cache-missing-key``.

    Times use :func:`time.monotonic`. The cache is not thread-safe: use one per
    event loop (its methods never await, so asyncio tasks cannot interleave).
    Pickling ships only the configuration; the copy starts empty. Cached lists are
    shared with callers: treat them as read-only.
    """

    __slots__ = (
        "max_rows", "expire_after_write", "expire_after_access", "cache_missing",
        "_clock", "_data", "hits", "misses", "loads", "evictions", "expirations",
    )

    def __init__(
        self,
        max_rows: int = 10_000,
        expire_after_write: float | None = None,
        expire_after_access: float | None = None,
        cache_missing: bool = True,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be an int >= 1, got {max_rows!r}")
        for name, value in (("expire_after_write", expire_after_write),
                            ("expire_after_access", expire_after_access)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not value > 0):
                raise ValueError(
                    f"{name} must be a number of seconds > 0 or None (never expire), got {value!r}"
                )
        self.max_rows = max_rows
        self.expire_after_write = None if expire_after_write is None else float(expire_after_write)
        self.expire_after_access = None if expire_after_access is None else float(expire_after_access)
        self.cache_missing = bool(cache_missing)
        self._clock = clock
        self._reset()

    def _reset(self) -> None:
        # key -> [rows, written_at, accessed_at]
        self._data: OrderedDict[Any, list] = OrderedDict()
        self.hits = self.misses = self.loads = self.evictions = self.expirations = 0

    def __getstate__(self) -> dict:
        return {"max_rows": self.max_rows, "expire_after_write": self.expire_after_write,
                "expire_after_access": self.expire_after_access,
                "cache_missing": self.cache_missing, "clock": self._clock}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __repr__(self) -> str:
        return (f"LookupCache(max_rows={self.max_rows}, expire_after_write={self.expire_after_write}, "
                f"expire_after_access={self.expire_after_access}, cache_missing={self.cache_missing})")

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Any) -> list[dict] | None:
        """Return the cached rows for ``key``, or ``None`` when absent or expired.

        Counts a hit or a miss and refreshes the entry's LRU position and access time.
        """
        entry = self._data.get(key)
        if entry is None:
            self.misses += 1
            return None
        ew, ea = self.expire_after_write, self.expire_after_access
        if ew is not None or ea is not None:
            now = self._clock()
            if (ew is not None and now - entry[1] >= ew) or (ea is not None and now - entry[2] >= ea):
                del self._data[key]
                self.expirations += 1
                self.misses += 1
                return None
            entry[2] = now
        self._data.move_to_end(key)
        self.hits += 1
        return entry[0]

    def put(self, key: Any, rows: list[dict]) -> None:
        """Store ``rows`` (a loaded result) for ``key``, evicting the LRU entry if full.

        An empty result is stored only when ``cache_missing`` is true.
        """
        self.loads += 1
        if not rows and not self.cache_missing:
            self._data.pop(key, None)
            return
        now = self._clock() if (self.expire_after_write or self.expire_after_access) else 0.0
        data = self._data
        if key in data:
            data[key] = [rows, now, now]
            data.move_to_end(key)
            return
        data[key] = [rows, now, now]
        if len(data) > self.max_rows:
            data.popitem(last=False)
            self.evictions += 1

    def invalidate(self, key: Any) -> None:
        """Drop ``key`` from the cache if present."""
        self._data.pop(key, None)

    def clear(self) -> None:
        """Drop every entry (counters are kept)."""
        self._data.clear()

    def stats(self) -> dict[str, int]:
        """Counters: ``hits``, ``misses``, ``loads``, ``evictions``, ``expirations``, ``size``."""
        return {"hits": self.hits, "misses": self.misses, "loads": self.loads,
                "evictions": self.evictions, "expirations": self.expirations,
                "size": len(self._data)}
