"""Which :class:`~aiospark.journal.store.JournalStore` a location opens, by its URI scheme.

A directory (a plain path, ``file://``, ``s3://``, ... : what pyarrow's filesystems open) is a
:class:`~aiospark.journal.directory.DirectoryStore`; ``redis://`` and ``rediss://`` are the Redis
store, which lives with the rest of the Redis code in :mod:`aiospark.connectors.redis`. It is
imported here, inside :func:`store_class`, when a Redis location is opened: the journal package
never imports a client library's connector at module level, and the Redis store (which imports
this package's interface) never reaches back here, so there is no cycle.

Example::

    store_class("redis://127.0.0.1:6379/0?prefix=j1")     # <class '...journal_store.RedisStore'>
    store_class("/data/journals/j1")                      # <class '...directory.DirectoryStore'>
    store_class("ftp://host/j")                           # None
"""
from __future__ import annotations

import urllib.parse

from .directory import DirectoryStore
from .store import JournalStore

__all__ = ["DIRECTORY_SCHEMES", "REDIS_SCHEMES", "scheme_of", "store_class"]

#: URI schemes of directory locations (what pyarrow's filesystems open; "" is a plain path)
DIRECTORY_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
REDIS_SCHEMES = ("redis", "rediss")


def scheme_of(location: str) -> str:
    """The location's scheme, lower case ("" for a plain path)."""
    return urllib.parse.urlsplit(location).scheme.lower() if "://" in location else ""


def store_class(location: str) -> type[JournalStore] | None:
    """The store class that opens ``location``, or None when no store knows its scheme."""
    scheme = scheme_of(location)
    if scheme in REDIS_SCHEMES:
        from ..connectors.redis.journal_store import RedisStore

        return RedisStore
    if scheme == "" or scheme in DIRECTORY_SCHEMES:
        return DirectoryStore
    return None


def supported() -> str:
    """The schemes, as an error message lists them."""
    return f"a directory (a path, or {', '.join(s + '://' for s in DIRECTORY_SCHEMES)}) or a redis:// / rediss:// URL"
