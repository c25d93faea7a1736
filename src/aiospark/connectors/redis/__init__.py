"""Redis: :class:`RedisLookup` (hashes, strings, JSON strings on ``redis.asyncio``) and
:class:`RedisRateLimit` (one rate limit for a whole cluster, kept in Redis).

The package, one module per concern:

* ``lookup.py`` -- :class:`RedisLookup`;
* ``url.py`` -- ``redis://`` / ``rediss://`` / ``unix://`` URLs, credentials kept as secrets;
* ``ratelimit.py`` -- :class:`RedisRateLimit` (spec, connection, pauses), with
  ``ratelimit_script.py`` (the GCRA Lua script and its connection) and ``ratelimit_local.py``
  (how one process's callers get start times from reservations).

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
