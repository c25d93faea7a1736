"""The journal store interface: what every place that keeps outcomes implements.

A store is two objects. :class:`JournalStore` is the whole location (picklable, made on the
driver, shipped to every task): it checks a job's manifest, opens one task's part, and answers
``aiospark journal`` (:meth:`JournalStore.summarize`, :meth:`JournalStore.drop_errors`,
:meth:`JournalStore.compact`).
:class:`StoreTask` is one task attempt's part: it loads what it holds up front, or is asked row
by row (:attr:`StoreTask.fetches_by_row`: Redis answers an input chunk in one pipelined MGET, a
directory loads the buckets an input chunk touches, each once), and appends what the task's
calls answered.

Both are abstract base classes, not protocols: an implementation says what it implements
(``class RedisStore(JournalStore)``), so a store that forgets a method fails where it is made,
not at a task's first write, and the choice between loading up front and fetching per row is a
declared class attribute the task view reads, never a probe for a method.

The implementations: :class:`~aiospark.journal.directory.DirectoryStore` (Arrow IPC segments on
any filesystem pyarrow opens) and :class:`~aiospark.connectors.redis.journal_store.RedisStore`;
:mod:`~aiospark.journal.schemes` picks one by the location's scheme.

Example::

    store = DirectoryStore("/tmp/j")
    store.check(manifest)                    # on the driver
    task = store.task(manifest, partition=0, batch=None, attempt="0")
    known = task.load()                      # {identity: (results, error)}
    if task.fetches_by_row:
        known.update(task.fetch(["[1]", "[2]"]))
    task.write([("[3]", [{"id": 3}], None)]); task.close()
"""
from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import JournalStoreError
from .location import Location
from .manifest import Manifest

if TYPE_CHECKING:
    from .table_shapes import TableShape

__all__ = ["Compaction", "Entry", "JournalNotFound", "JournalStore", "JournalSummary", "Outcomes", "StoreTask"]

#: identity -> (results -- as the call returned them, or pickled bytes a store hands back to be
#: unpickled on first use -- or None for a kept error; error text or None)
Outcomes = dict[str, tuple[Any, str | None]]

#: an outcome to write: (identity, results or None, error text or None)
Entry = tuple[str, Any, str | None]


class JournalNotFound(ValueError):
    """There is no journal at the location (nothing there, a file, or no manifest)."""


@dataclass
class JournalSummary:
    """What :meth:`JournalStore.summarize` found. ``segments`` is None for a store without
    segments (Redis); ``bytes`` counts the files (directory) or the keys' names and values
    (Redis); ``skipped``: rows with a bad checksum. ``results`` and ``errors`` count each
    identity once, as a task reads it (a result outranks a kept error), wherever its outcomes lie.

    The layout (a directory): ``buckets`` is the manifest's (None: a journal written before
    buckets, or Redis), ``bucket_segments`` the segments in ``bucket_folders`` ``k=<bucket>``
    folders, ``parts`` an object store's per-flush parts (``parts/``: running or killed tasks'),
    ``legacy`` the segments of folders written before buckets (``p=``, ``b=/p=``), ``table_files``
    the Parquet files of the table route (results Spark reads); ``layout``: a
    store without segments says how it keeps outcomes instead (Redis).

    Example::

        s = summarize("/data/j")
        (s.rows, s.bucket_segments, s.parts, s.compactable)    # (2000, 7, 2, True)
    """

    location: str
    store: str
    manifest: Manifest
    bytes: int = 0
    segments: int | None = None
    results: int = 0
    errors: int = 0
    skipped: int = 0
    error_samples: list[tuple[str, str]] = field(default_factory=list)
    buckets: int | None = None
    bucket_segments: int = 0
    bucket_folders: int = 0
    parts: int = 0
    legacy: int = 0
    layout: str = ""
    #: the table route's Parquet files (results of ``unordered_wait``: :mod:`aiospark.journal.table`)
    table_files: int = 0
    #: the schema and partition folders of those aiospark wrote (``--compact`` leaves one file in
    #: each), and the files it did not write (never touched)
    table_groups: int = 0
    table_foreign: int = 0

    @property
    def rows(self) -> int:
        """Outcomes recorded (results and kept errors)."""
        return self.results + self.errors

    @property
    def compactable(self) -> bool:
        """Whether :meth:`JournalStore.compact` would rewrite something: a bucket holding more
        than one segment, parts or legacy segments, or more than one table file of a partition (a
        store without segments: never)."""
        return self.parts + self.legacy > 0 or self.bucket_segments > self.bucket_folders \
            or self.table_files > self.table_groups + self.table_foreign


@dataclass
class Compaction:
    """What :meth:`JournalStore.compact` did. ``written``: buckets rewritten as one new segment
    each; ``kept``: buckets holding outcomes left as they were (one segment, nothing to add);
    ``removed``: segments deleted, of which ``removed_parts`` parts and ``removed_legacy``
    segments of folders written before buckets; ``results`` and ``errors``: the journal's
    outcomes afterwards, counted as :class:`JournalSummary` counts them; ``dropped``: kept errors
    removed (``drop_errors=True``); ``note``: why a store has nothing to compact (Redis).

    Example::

        c = compact("/data/j")
        (c.written, c.removed, c.rows)     # (4, 11, 2000)
    """

    location: str
    store: str
    buckets: int | None = None
    written: int = 0
    kept: int = 0
    removed: int = 0
    removed_parts: int = 0
    removed_legacy: int = 0
    results: int = 0
    errors: int = 0
    dropped: int = 0
    note: str = ""
    #: the table route's files: new ones (one per schema and partition), the ones they replaced,
    #: and those of runs still being written, left alone (:mod:`aiospark.journal.table_compact`)
    table_written: int = 0
    table_removed: int = 0
    table_busy: int = 0
    table_window: float = 0.0

    @property
    def rows(self) -> int:
        """Outcomes in the journal after the compaction (results and kept errors)."""
        return self.results + self.errors


class StoreTask(abc.ABC):
    """One task attempt's part of a :class:`JournalStore` (used on the task's threads only)."""

    #: True: the task asks :meth:`fetch` for each input chunk's identities before feeding it (the
    #: store is too big to load, or shared by every partition); False: :meth:`load` returned all
    #: this task can find, and :meth:`fetch` is never called
    fetches_by_row: ClassVar[bool] = False
    #: the output schema whose table (:mod:`aiospark.journal.table`; only a directory store keeps
    #: one) the task reads, with the answers of other schema folders that fit it
    #: (:mod:`aiospark.journal.table_shapes`); None: no table is read. Set by the job's
    #: :class:`~aiospark.journal.api.BoundJournal`
    table_shape: TableShape | None = None

    @abc.abstractmethod
    def load(self) -> Outcomes:
        """Check the store's manifest against the task's, and return what is known up front."""

    def fetch(self, identities: Sequence[str]) -> Outcomes:
        """The recorded outcomes of ``identities`` (those the store holds); only called when
        :attr:`fetches_by_row`. A store that loads up front has nothing more to say."""
        return {}

    @abc.abstractmethod
    def write(self, entries: list[Entry]) -> None:
        """Store ``entries``: durable when this returns (a TypeError for unpicklable results
        before anything is written)."""

    def renew(self) -> None:
        """Keep this writer's claim alive (the task's writer thread calls it about every second,
        also while nothing completes). A store whose writers hold no lease does nothing."""
        return None  # deliberately empty: not abstract, most stores have no lease

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the task holds (files, connections); called once, also after a failure."""


class JournalStore(abc.ABC):
    """A journal's location (see the module docstring). Picklable: clients and files are opened
    again in each task."""

    #: the location, credentials kept apart from :attr:`Location.shown`
    loc: Location
    #: ``JournalSummary.store`` of this kind of store ("directory", "redis")
    kind: ClassVar[str]

    def __init__(self, location: str) -> None:
        """Open nothing yet (this runs on the driver, and the store is pickled to the tasks)."""
        self.loc = Location(location)

    @property
    def shown(self) -> str:
        """The location as errors, logs and reprs show it (credentials masked)."""
        return self.loc.shown

    @staticmethod
    @abc.abstractmethod
    def versioned(location: str, version: str) -> str:
        """Where outcomes of ``version`` live, next to the other versions' at ``location``."""

    @abc.abstractmethod
    def check(self, manifest: Manifest) -> None:
        """On the driver, before any task: the store can be written, and holds no other
        question's outcomes (:class:`~aiospark.journal.manifest.JournalMismatch`)."""

    def check_question(self, manifest: Manifest) -> None:
        """Like :meth:`check`, writing nothing (a dry run, :func:`aiospark.plan`): refuse a store
        that holds another question's outcomes. A store whose ``check`` only reads keeps it."""
        self.check(manifest)

    def layout_buckets(self) -> int | None:
        """The buckets the store's outcomes are laid out in (a directory's manifest), or None
        (a new journal, or a store whose layout has none: Redis is asked by key)."""
        return None

    def bind_layout(self, manifest: Manifest) -> None:
        """Record ``manifest.buckets`` as the store's layout (on the driver, at bind); a store
        without a layout does nothing."""
        return None  # deliberately empty: not abstract, Redis has no layout

    @abc.abstractmethod
    def task(self, manifest: Manifest, partition: int, batch: str | None, attempt: str) -> StoreTask:
        """One task attempt's part (``batch``: the micro-batch id of Structured Streaming)."""

    @abc.abstractmethod
    def summarize(self, samples: int) -> JournalSummary:
        """What the store holds, with the first ``samples`` error texts (:class:`JournalNotFound`
        when it holds no journal)."""

    @abc.abstractmethod
    def drop_errors(self, quiet: float) -> int:
        """Remove the kept errors, never a result (a running writer's outcomes refuse it, or stay
        safe); returns how many were removed. ``quiet``: a directory also refuses segments
        changed that recently."""

    def compact(self, quiet: float, drop_errors: bool = False) -> Compaction:
        """Rewrite the store into its one layout, each outcome kept (``drop_errors``: the kept
        errors left out); what a live writer still writes refuses it (:class:`JournalStoreError`),
        as :meth:`drop_errors` does. A store that cannot be compacted refuses; one with nothing to
        compact says so in :attr:`Compaction.note`."""
        raise JournalStoreError(f"the journal at {self.shown} ({self.kind}) cannot be compacted")
