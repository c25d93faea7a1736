"""One task attempt's part of a directory journal: asked by row, reading and writing by bucket.

A row's outcome lives in its bucket's folder, ``<digest>/k=<bucket>/`` (the bucket from its
identity alone, :func:`~aiospark.journal.buckets.bucket_of`), so a task finds a recorded outcome
wherever Spark put the row. The task is asked per input chunk (:attr:`DirectoryTask.fetches_by_row`,
like Redis): :meth:`DirectoryTask.fetch` loads each bucket the chunk touches the first time it does
(all its segments: leases swept, bad crcs skipped, torn tails cut), and answers from memory after
that. With the dedup shuffle (:mod:`aiospark.spark.dedup`) a task holds the rows of about one
bucket, and reads about one folder.

Writes (:mod:`~aiospark.journal.writers`): on a local disk, one segment per bucket touched; on an
object store one part per flush in ``<digest>/parts/``, split into bucket segments when the task
closes.

Folders not split by bucket are read whole, once per task, at its first fetch: the results the
table route of ``unordered_wait`` keeps as Parquet (:mod:`~aiospark.journal.table`), an object store's
``parts/`` (killed tasks' parts, and running ones') and a journal written before buckets
(``p=<partition>/`` and ``b=<batch>/p=<partition>/`` folders; correct, but each task reads them
all).

Example::

    task = DirectoryTask(store, manifest, attempt="3.17")
    task.load()                                   # {}: the manifest checked
    known = task.fetch(["[1]", "[2]"])            # their buckets loaded
    task.write([("[3]", [{"id": 3}], None)]); task.close()
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from .buckets import DEFAULT_BUCKETS, bucket_of
from .lease import sweep
from .listing import listing
from .manifest import Manifest, refuse
from .segment import Outcomes, read_outcomes
from .store import Entry, StoreTask
from .table import read_table_outcomes, table_dir
from .table_shapes import fitting_files
from .writers import PARTS, PartsWriter, SegmentWriter, bucket_dir

#: a task on a local disk keeps at most this many bucket segments open (a file descriptor each); the
#: outcomes of further buckets (a task fed without the dedup shuffle, many buckets) go into parts,
#: as on an object store: one file per flush, split into bucket segments when the task ends
MAX_OPEN_SEGMENTS = 64

if TYPE_CHECKING:  # the store makes its tasks (function-level import there): no import back
    from .directory import DirectoryStore

__all__ = ["DirectoryTask"]


class DirectoryTask(StoreTask):
    """One task attempt's part of a :class:`~aiospark.journal.directory.DirectoryStore` (see the
    module docstring)."""

    fetches_by_row = True

    def __init__(self, store: DirectoryStore, manifest: Manifest, attempt: str):
        self.store = store
        self.manifest = manifest
        self.buckets = manifest.buckets or DEFAULT_BUCKETS
        fs, root = store.fs
        self.fs = fs
        self.top = f"{root}/{manifest.digest}"
        self.attempt = attempt
        self.local = store.local
        #: outcomes of the buckets loaded so far (and of the folders read whole, once)
        self.cache: Outcomes = {}
        #: the identities the table answered: their answer stands, as in the table route's join
        self.tabled: set[str] = set()
        self.loaded: set[int] = set()
        self._whole_read = False
        #: a task of the table route (spark/table_route.py): Spark's join read the table, and only the
        #: bucket folders present at the first fetch are read (see _read_whole)
        self.table_route = False
        #: buckets whose folder existed at the first fetch (the table route only; None: every bucket is looked at)
        self.present: set[int] | None = None
        #: on a local disk: bucket -> its open segment
        self.writers: dict[int, SegmentWriter] = {}
        #: the task's parts: on an object store, and on a local disk for buckets beyond MAX_OPEN_SEGMENTS
        self.parts: PartsWriter | None = None
        #: rows skipped while loading (bad crc), and segments read
        self.skipped = 0
        self.segments = 0

    def load(self) -> Outcomes:
        self.store.guarded("cannot read its outcomes", lambda: refuse(self.store.shown, self.store.read_manifest(),
                                                                      self.manifest))
        return {}

    def fetch(self, identities: Sequence[str]) -> Outcomes:
        return self.store.guarded("cannot read its outcomes", lambda: self._fetch(identities))

    def _fetch(self, identities: Sequence[str]) -> Outcomes:
        if not self._whole_read:
            self._whole_read = True
            self._read_whole()
        buckets, cache = self.buckets, self.cache
        for identity in identities:
            bucket = bucket_of(identity, buckets)
            if bucket not in self.loaded:
                self.loaded.add(bucket)
                if self.present is None or bucket in self.present:
                    self._read_dir(bucket_dir(self.top, bucket))
        return {i: cache[i] for i in identities if i in cache}

    def _read_whole(self) -> None:
        """The folders not split by bucket, read whole once: an object store's parts (killed
        tasks', and running ones') and a journal from before buckets (``p=``/``b=`` folders)."""
        if self.table_shape is not None:
            found = fitting_files(self.fs, table_dir(self.top), self.table_shape)
            for identity, outcome in read_table_outcomes(self.fs, found.paths, self.manifest.key,
                                                         misfits=found.misfits).items():
                self.cache[identity] = outcome
                self.tabled.add(identity)
        present = set()
        for info in listing(self.fs, self.top):
            name = info.path.rsplit("/", 1)[-1]
            if name.startswith("k=") and name[2:].isdigit():
                present.add(int(name[2:]))
            if info.type != pafs.FileType.Directory or not (name == PARTS or name.startswith(("p=", "b="))):
                continue
            if not name.startswith("b="):
                self._read_dir(info.path)
                continue
            for sub in listing(self.fs, info.path):
                if sub.type == pafs.FileType.Directory and sub.path.rsplit("/", 1)[-1].startswith("p="):
                    self._read_dir(sub.path)
        if self.table_route:
            # the table route: its tasks touch every bucket, most of them empty (results go to the
            # table); the folders that exist now are read, the others hold nothing of this run
            self.present = present

    def _read_dir(self, directory: str) -> None:
        """Every segment of ``directory`` into the cache (a result outranks a kept error; the
        table's answer, read first, outranks both)."""
        known, tabled = self.cache, self.tabled
        infos = listing(self.fs, directory)
        try:
            sweep(self.fs, infos)  # a killed writer's lease over no segment would stay forever
        except OSError:
            pass  # only housekeeping: the next reader or `aiospark journal --drop-errors` retries it
        for info in sorted(infos, key=lambda i: i.path):
            if info.type != pafs.FileType.File or not info.path.endswith(".arrow"):
                continue
            try:
                with self.fs.open_input_stream(info.path) as f:
                    data = f.read()
            except FileNotFoundError:
                continue  # compacted meanwhile: its outcomes are in the segment that replaced it
            # any other read error fails the task (JournalStoreError): rows it would have served
            # must not be paid again unseen; Spark retries the task
            found, skipped = read_outcomes(data)
            self.segments += 1
            self.skipped += skipped
            for identity, outcome in found.items():
                if (outcome[0] is None and identity in known) or identity in tabled:
                    continue
                known[identity] = outcome

    def write(self, entries: list[Entry]) -> None:
        """Append ``entries`` (identity, results or None, error text or None): durable when this
        returns (on a disk, a flushed batch per bucket; on an object store, one part)."""
        self.store.guarded("cannot write an outcome", lambda: self._write(entries))

    def _write(self, entries: list[Entry]) -> None:
        if not self.writers and self.parts is None:
            self.store.write_manifest(self.manifest)  # a journal bound elsewhere: its manifest first
        if not self.local:
            if self.parts is None:
                self.parts = PartsWriter(self.fs, self.top, self.attempt, self.store.lease_seconds, self.buckets)
            self.parts.write(entries)
            return
        groups: dict[int, list[Entry]] = {}
        for entry in entries:
            groups.setdefault(bucket_of(entry[0], self.buckets), []).append(entry)
        overflow: list[Entry] = []
        for bucket, group in groups.items():
            writer = self.writers.get(bucket)
            if writer is None and len(self.writers) >= MAX_OPEN_SEGMENTS:
                overflow += group  # a file held open per bucket would run out of descriptors
                continue
            if writer is None:
                writer = self.writers[bucket] = SegmentWriter(self.fs, bucket_dir(self.top, bucket), self.attempt,
                                                              self.store.lease_seconds)
            writer.write(group)
        if overflow:  # the buckets beyond the first MAX_OPEN_SEGMENTS: one part per flush, split at close
            if self.parts is None:
                self.parts = PartsWriter(self.fs, self.top, self.attempt, self.store.lease_seconds, self.buckets)
            self.parts.write(overflow)

    def _open(self) -> list[SegmentWriter | PartsWriter]:
        return [*self.writers.values(), *([self.parts] if self.parts is not None else [])]

    def renew(self) -> None:
        """Keep the leases of this task's writers alive (the task's writer thread calls it every
        second; each writes only every :data:`~aiospark.journal.lease.RENEW_SECONDS`)."""
        if self.writers or self.parts is not None:
            self.store.guarded("cannot renew its lease", self._renew)

    def _renew(self) -> None:
        for writer in self._open():
            writer.renew()

    def close(self) -> None:
        self.store.guarded("cannot close its segment", self._close)

    def _close(self) -> None:
        failure: BaseException | None = None
        for writer in self._open():
            try:
                writer.close()
            except BaseException as exc:  # every writer closes (its lease released); the first error is raised
                failure = failure or exc
        if failure is not None:
            raise failure
