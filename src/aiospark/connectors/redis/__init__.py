"""Redis: :class:`RedisLookup` (hashes, strings, JSON strings on ``redis.asyncio``),
:class:`RedisRateLimit` (one rate limit for a whole cluster, kept in Redis), and the Redis
implementations of the journal's store and the budget's lease source.

The package, one module per concern:

* ``lookup.py`` -- :class:`RedisLookup`;
* ``url.py`` -- ``redis://`` / ``rediss://`` / ``unix://`` URLs, credentials kept as secrets;
* ``ratelimit.py`` -- :class:`RedisRateLimit` (spec, connection, pauses), with
  ``ratelimit_script.py`` (the GCRA Lua script and its connection) and ``ratelimit_local.py``
  (how one process's callers get start times from reservations).
* ``journal_store.py`` -- the journal's Redis store (``aiospark.Journal("redis://...")``), an
  :class:`aiospark.journal.store.JournalStore`;
* ``budget_leases.py`` -- a ``Budget(redis=...)``'s pot and its tasks' leases, an
  :class:`aiospark.budget.source.SharedPot` and :class:`aiospark.budget.source.LeaseSource`.

Every use of the ``redis`` client library in aiospark is in this package.

The ``redis`` client library is imported only when a source or limiter opens.

Example::

    from aiospark.connectors.redis import RedisLookup, RedisRateLimit

    users = RedisLookup("user:{id}", "name STRING, age INT", url="redis://127.0.0.1:6379/0")
    limit = RedisRateLimit(500, url="redis://127.0.0.1:6379/0")
"""

from __future__ import annotations

from .lookup import RedisLookup
from .ratelimit import RedisRateLimit

__all__ = ["RedisLookup", "RedisRateLimit"]
