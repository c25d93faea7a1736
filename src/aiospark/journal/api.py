"""``aiospark.Journal``: where a job's outcomes are kept, so no row is paid for twice.

Example::

    journal = aiospark.Journal("/data/journals/enrich-2026-11", key="id")
    out = aiospark.ordered_wait(df, enrich, "id LONG, name STRING", journal=journal)
    # killed at 60 %? run the same program again: only rows in flight are called again
"""
from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from .buckets import DEFAULT_BUCKETS, check_buckets
from .location import redacted
from .manifest import Manifest
from .schemes import scheme_of, store_class, supported
from .store import JournalStore, StoreTask
from .table_shapes import TableShape
from .task import TaskView


class Journal:
    """A journal of call outcomes for ``journal=`` of ``ordered_wait``, ``unordered_wait``,
    ``async_udf`` and ``lookup_join``.

    ``location``: a directory (a local path, ``file://``, ``s3://``, ``gs://``, ``hdfs://``,
    ``abfs://``: any filesystem pyarrow opens) or a ``redis://``/``rediss://`` URL (``?prefix=``
    names the key space). ``key``: the input column(s) that identify a row (default: every input
    column, by value; a row with a NULL in a ``key=`` column has no identity: it is always
    called, never recorded). ``keep_errors=True`` also records the errors a call answered with
    (emitted again as the same error rows; never a timeout, a 429/5xx, a connection error or the
    library's own refusals); by default failed rows are called again on a rerun. ``version`` (a
    non-empty string or an int) names the version of the question: a journal refuses a function
    whose code or state changed, and a new ``version`` records its outcomes next to the old
    ones in the same location (going back to an old version serves its outcomes again).
    ``buckets`` (an int, 1 to 65536; default for a new journal: the session's
    ``spark.sql.shuffle.partitions``, 200 unless set) is how many buckets a directory
    journal spreads its outcomes over (``k=<bucket>/``, a row's bucket by its key alone, so a rerun
    finds an outcome however Spark partitions the rows), and how many Spark partitions the dedup
    shuffle (``dedup=``) makes: a journal keeps the buckets of its first run, and refuses another
    explicit value.

    Example::

        aiospark.unordered_wait(df, fetch, schema, journal=aiospark.Journal("redis://127.0.0.1:6379/0?prefix=j1",
                                                                          key=["tenant", "id"]))
    """

    def __init__(self, location: str | os.PathLike[str], *, key: str | Sequence[str] | None = None,
                 keep_errors: bool = False, version: str | int | None = None, buckets: int | None = None):
        if isinstance(location, os.PathLike):
            location = os.fspath(location)
        if not isinstance(location, str) or not location.strip():
            raise TypeError(f"Journal(location) takes a directory path or URI, or a redis:// URL; got {location!r}")
        self.version = _check_version(version)
        cls = store_class(location)
        if cls is None:
            raise ValueError(f"Journal({redacted(location)!r}): {scheme_of(location)}:// is not a journal location; "
                             f"pass {supported()}")
        # a version's outcomes live next to the others' (a folder, a Redis key prefix); no
        # version: the location itself, as before versions existed
        self.store: JournalStore = cls(location if self.version is None else cls.versioned(location, self.version))
        self.key = _check_key(key)
        if not isinstance(keep_errors, bool):
            raise TypeError(f"Journal(keep_errors=) takes True or False, got {keep_errors!r}")
        self.keep_errors = keep_errors
        #: the buckets asked for (None: the journal's own, or :data:`DEFAULT_BUCKETS` for a new one)
        self.buckets = None if buckets is None else check_buckets(buckets)

    def with_key(self, key: str | Sequence[str]) -> Journal:
        """This journal (same location, settings and store) identifying rows by ``key``.

        Example::

            Journal("/data/j").with_key("id").key      # ['id']
        """
        keyed = copy.copy(self)
        keyed.key = _check_key(key)
        return keyed

    @property
    def location(self) -> str:
        """The location as it may be shown: credentials masked, a relative path made absolute
        (here, on the driver, once). What opens the store stays in the store, never printed."""
        return self.store.shown

    def key_columns(self, columns: Sequence[str], what: str) -> list[str]:
        """The key columns among a DataFrame's ``columns`` (all of them when ``key`` is None)."""
        if self.key is None:
            return list(columns)
        missing = [c for c in self.key if c not in columns]
        if missing:
            raise ValueError(f"{what}: Journal(key=...) names {', '.join(map(repr, missing))}, which is not a column "
                             f"of the DataFrame (its columns: {', '.join(columns)})")
        return list(self.key)

    def bind(self, manifest: Manifest, default_buckets: int | None = None, write: bool = True) -> BoundJournal:
        """Check the store (writable, no other function's outcomes) for this job: on the driver.
        ``default_buckets``: a new journal's buckets when ``buckets=`` was not given (the Spark
        entry points pass the session's ``spark.sql.shuffle.partitions``). ``write=False`` (a dry
        run): refuse another question's journal, write nothing (no manifest: a plan pins nothing)."""
        if manifest.version != self.version:
            manifest = dataclasses.replace(manifest, version=self.version)
        if not write:
            self.store.check_question(manifest)
        else:
            self.store.check(manifest)
        recorded = self.store.layout_buckets()
        if recorded is not None and self.buckets is not None and recorded != self.buckets:
            raise ValueError(f"Journal({self.location!r}, buckets={self.buckets}): this journal has {recorded} buckets "
                             f"(fixed by its first run); pass buckets={recorded} or leave buckets= out")
        buckets = recorded or self.buckets or default_buckets or DEFAULT_BUCKETS
        manifest = dataclasses.replace(manifest, buckets=buckets)
        if write:
            self.store.bind_layout(manifest)
            # another job may have pinned the buckets first (two first runs at once): its B is the journal's
            pinned = self.store.layout_buckets()
            if pinned is not None and pinned != buckets:
                if self.buckets is not None:
                    raise ValueError(f"Journal({self.location!r}, buckets={self.buckets}): another run fixed this "
                                     f"journal's buckets at {pinned} meanwhile; pass buckets={pinned} or leave buckets= out")
                manifest = dataclasses.replace(manifest, buckets=pinned)
        return BoundJournal(self.store, manifest, self.keep_errors, self.location)

    def __repr__(self) -> str:
        return (f"Journal({self.location!r}, key={self.key!r}"
                + (", keep_errors=True" if self.keep_errors else "")
                + (f", version={self.version!r}" if self.version is not None else "")
                + (f", buckets={self.buckets}" if self.buckets is not None else "") + ")")


class BoundJournal:
    """A journal checked for one job (picklable, sent to every task)."""

    def __init__(self, store: JournalStore, manifest: Manifest, keep_errors: bool, shown: str):
        self.store = store
        self.manifest = manifest
        self.keep_errors = keep_errors
        self.shown = shown
        #: the output schema whose table its tasks read (:attr:`StoreTask.table_shape`; set by
        #: ``ordered_wait``/``unordered_wait``, the entry points whose results it holds)
        self.table_shape: TableShape | None = None

    @property
    def buckets(self) -> int:
        """The journal's buckets: also the partitions of the dedup shuffle."""
        return self.manifest.buckets or DEFAULT_BUCKETS

    def open_task(self, partition: int, batch: str | None, attempt: str,
                  encode: Callable[[Any], Any] | None = None,
                  rebuild: Callable[[Any, Any], Any] | None = None) -> TaskView:
        """This task's view, its recorded outcomes loaded (on the task's thread, before any row)."""
        view = TaskView(self.store_task(partition, batch, attempt), self.keep_errors, encode=encode, rebuild=rebuild)
        return view.load()

    def store_task(self, partition: int, batch: str | None, attempt: str) -> StoreTask:
        """The store's part of one task attempt, reading this job's table (if any)."""
        task = self.store.task(self.manifest, partition, batch, attempt)
        task.table_shape = self.table_shape
        return task

    def __repr__(self) -> str:
        return f"<journal {self.shown} for {self.manifest.function}>"


def _check_version(version: Any) -> str | None:
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, (str, int)):
        raise TypeError(f"Journal(version=...) takes a string or an int naming the version of the question, "
                        f"got {type(version).__name__}")
    text = str(version)
    if not text or len(text) > 64 or not all(c.isalnum() or c in "._-" for c in text):
        raise ValueError(f"Journal(version=...) takes 1 to 64 letters, digits, '.', '_' or '-' (it names a "
                         f"folder or a Redis key prefix), got {version!r}")
    return text


def _check_key(key: Any) -> list[str] | None:
    if key is None:
        return None
    columns = [key] if isinstance(key, str) else key
    if not isinstance(columns, (list, tuple)) or not columns or not all(isinstance(c, str) and c for c in columns):
        raise TypeError(f"Journal(key=...) takes a column name or a non-empty list of column names, got {key!r}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"Journal(key=...) names a column twice: {list(columns)!r}")
    return list(columns)
