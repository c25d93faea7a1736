"""``aiospark.Journal``: where a job's outcomes are kept, so no row is paid for twice.

Example::

    journal = aiospark.Journal("/data/journals/enrich-2026-11", key="id")
    out = aiospark.ordered_wait(df, enrich, "id LONG, name STRING", journal=journal)
    # killed at 60 %? run the same program again: only rows in flight are called again
"""
from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from typing import Any

from .directory import DirectoryStore
from .location import redacted
from .manifest import Manifest
from .redis_store import RedisStore
from .task import TaskView

#: URI schemes of directory locations (what pyarrow's filesystems open)
DIRECTORY_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
REDIS_SCHEMES = ("redis", "rediss")


class Journal:
    """A journal of call outcomes for ``journal=`` of ``ordered_wait``, ``unordered_wait``,
    ``async_udf`` and ``lookup_join``.

    ``location``: a directory (a local path, ``file://``, ``s3://``, ``gs://``, ``hdfs://``,
    ``abfs://``: any filesystem pyarrow opens) or a ``redis://``/``rediss://`` URL (``?prefix=``
    names the key space). ``key``: the input column(s) that identify a row (default: every input
    column, by value). ``keep_errors=True`` also records failed calls' errors (emitted again as
    the same error rows); by default failed rows are called again on a rerun.

    Example::

        aiospark.unordered_wait(df, fetch, schema, journal=aiospark.Journal("redis://127.0.0.1:6379/0?prefix=j1",
                                                                          key=["tenant", "id"]))
    """

    def __init__(self, location: str | os.PathLike[str], *, key: str | Sequence[str] | None = None,
                 keep_errors: bool = False):
        if isinstance(location, os.PathLike):
            location = os.fspath(location)
        if not isinstance(location, str) or not location.strip():
            raise TypeError(f"Journal(location) takes a directory path or URI, or a redis:// URL; got {location!r}")
        scheme = urllib.parse.urlsplit(location).scheme.lower() if "://" in location else ""
        if scheme in REDIS_SCHEMES:
            self.store: Any = RedisStore(location)
        elif scheme == "" or scheme in DIRECTORY_SCHEMES:
            self.store = DirectoryStore(location)
        else:
            raise ValueError(f"Journal({redacted(location)!r}): {scheme}:// is not a journal location; pass a "
                             f"directory (a path, or {', '.join(s + '://' for s in DIRECTORY_SCHEMES)}) or a "
                             "redis:// / rediss:// URL")
        self.location = self.store.loc.text  # a relative path made absolute here, on the driver, once
        self.key = _check_key(key)
        if not isinstance(keep_errors, bool):
            raise TypeError(f"Journal(keep_errors=) takes True or False, got {keep_errors!r}")
        self.keep_errors = keep_errors

    def key_columns(self, columns: Sequence[str], what: str) -> list[str]:
        """The key columns among a DataFrame's ``columns`` (all of them when ``key`` is None)."""
        if self.key is None:
            return list(columns)
        missing = [c for c in self.key if c not in columns]
        if missing:
            raise ValueError(f"{what}: Journal(key=...) names {', '.join(map(repr, missing))}, which is not a column "
                             f"of the DataFrame (its columns: {', '.join(columns)})")
        return list(self.key)

    def bind(self, manifest: Manifest) -> BoundJournal:
        """Check the store (writable, no other function's outcomes) for this job: on the driver."""
        self.store.check(manifest)
        return BoundJournal(self.store, manifest, self.keep_errors, redacted(self.location))

    def __repr__(self) -> str:
        return (f"Journal({redacted(self.location)!r}, key={self.key!r}"
                + (", keep_errors=True" if self.keep_errors else "") + ")")


class BoundJournal:
    """A journal checked for one job (picklable, sent to every task)."""

    def __init__(self, store: Any, manifest: Manifest, keep_errors: bool, shown: str):
        self.store = store
        self.manifest = manifest
        self.keep_errors = keep_errors
        self.shown = shown

    def open_task(self, partition: int, batch: str | None, attempt: str, encode: Any = None,
                  decode: Any = None) -> TaskView:
        """This task's view, its recorded outcomes loaded (on the task's thread, before any row)."""
        view = TaskView(self.store.task(self.manifest, partition, batch, attempt), self.keep_errors,
                        encode=encode, decode=decode)
        return view.load()

    def __repr__(self) -> str:
        return f"<journal {self.shown} for {self.manifest.function}>"


def _check_key(key: Any) -> list[str] | None:
    if key is None:
        return None
    columns = [key] if isinstance(key, str) else key
    if not isinstance(columns, (list, tuple)) or not columns or not all(isinstance(c, str) and c for c in columns):
        raise TypeError(f"Journal(key=...) takes a column name or a non-empty list of column names, got {key!r}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"Journal(key=...) names a column twice: {list(columns)!r}")
    return list(columns)
