"""One task attempt's part of a directory journal: asked by row, reading and writing by bucket.

A row's outcome lives in its bucket's folder, ``<digest>/k=<bucket>/`` (the bucket from its
identity alone, :func:`~aiospark.journal.buckets.bucket_of`), so a task finds a recorded outcome
wherever Spark put the row. The task is asked per input chunk (:attr:`DirectoryTask.fetches_by_row`,
like Redis): :meth:`DirectoryTask.fetch` loads each bucket the chunk touches the first time it does
(all its segments: leases swept, bad crcs skipped, torn tails cut), and answers from memory after
that. With the dedup shuffle (:mod:`aiospark.spark.dedup`) a task holds the rows of about one
bucket, and reads about one folder.

Writes go to one segment per bucket touched (:class:`SegmentWriter`: its own lease, and on an
object store its own parts, compacted when the task closes).

A journal written before buckets (``p=<partition>/`` and ``b=<batch>/p=<partition>/`` folders)
is still read: those segments are loaded whole, once per task, at its first fetch (correct, but
each task reads them all; ``aiospark journal`` compaction into buckets is future work).

Example::

    task = DirectoryTask(store, manifest, attempt="3.17")
    task.load()                                   # {}: the manifest checked
    known = task.fetch(["[1]", "[2]"])            # their buckets loaded
    task.write([("[3]", [{"id": 3}], None)]); task.close()
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from .buckets import DEFAULT_BUCKETS, bucket_of
from .lease import Lease, LeaseLost, sweep
from .manifest import Manifest, refuse
from .segment import BATCHED, Outcomes, read_outcomes, write_batch
from .store import Entry, StoreTask

if TYPE_CHECKING:  # the store makes its tasks (function-level import there): no import back
    from .directory import DirectoryStore

__all__ = ["DirectoryTask", "SegmentWriter", "bucket_dir"]


def bucket_dir(root: str, manifest: Manifest, bucket: int) -> str:
    """The folder of ``bucket``'s segments."""
    return f"{root}/{manifest.digest}/k={bucket}"


class SegmentWriter:
    """One segment a task appends to (see :mod:`~aiospark.journal.directory`): on a local disk an
    Arrow stream flushed per batch; on an object store one part per flush, compacted at close. It
    holds its own lease, and fences itself when the lease may have expired."""

    def __init__(self, fs: pafs.FileSystem, directory: str, attempt: str, lease_seconds: float, local: bool):
        self.fs = fs
        self.dir = directory
        self.stem = f"{directory}/{attempt}-{uuid.uuid4().hex[:8]}"
        self.path = f"{self.stem}.arrow"
        self.lease = Lease(fs, self.stem, lease_seconds)
        self.local = local
        self._sink: Any = None
        self._writer: Any = None
        #: an object store's parts written so far: (path, the part's bytes)
        self.parts: list[tuple[str, Any]] = []

    @property
    def started(self) -> bool:
        return self._writer is not None or bool(self.parts)

    def write(self, entries: list[Entry]) -> None:
        if not self.started:
            self.fs.create_dir(self.dir, recursive=True)
            self.lease.renew()  # before the segment exists: --drop-errors never sees it unleased
        self.lease.check("writing an outcome")
        if not self.local:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, BATCHED) as writer:
                write_batch(writer, entries)  # a TypeError (unpicklable results) before any object
            data = sink.getvalue()
            path = f"{self.stem}~{len(self.parts):06d}.arrow"
            with self.fs.open_output_stream(path) as f:
                f.write(data)
            self._fenced(path, "writing an outcome")
            self.parts.append((path, data))
            return
        if self._writer is None:
            self._sink = self.fs.open_output_stream(self.path)
            self._writer = pa.ipc.new_stream(self._sink, BATCHED)
        write_batch(self._writer, entries)
        self._sink.flush()
        # a drop that took over deleted this file first (the append went to no name), or runs
        # later and reads this batch: either way nothing brings its errors back; stop writing
        self.lease.check("writing an outcome")

    def _fenced(self, path: str, what: str) -> None:
        """After writing ``path``: when the lease may have expired meanwhile, delete it and raise."""
        try:
            self.lease.check(what)
        except LeaseLost:
            try:
                self.fs.delete_file(path)
            except FileNotFoundError:
                pass
            raise

    def renew(self) -> None:
        if self.started:
            self.lease.renew(force=False)

    def close(self) -> None:
        try:
            if self._writer is not None:
                try:
                    self._writer.close()
                finally:
                    self._sink.close()
                    self._writer = self._sink = None
            if self.parts:
                self._compact()
        finally:
            self.lease.release()

    def _compact(self) -> None:
        """One segment of the parts (their batches as written), then the parts deleted: at every
        moment each outcome is in the parts, the segment, or both. A writer whose lease may have
        expired compacts nothing: the drop may have removed errors these parts hold."""
        self.lease.check("compacting its segment")
        with self.fs.open_output_stream(self.path) as sink, pa.ipc.new_stream(sink, BATCHED) as writer:
            for _, data in self.parts:
                reader = pa.ipc.open_stream(data)
                while True:
                    try:
                        batch, meta = reader.read_next_batch_with_custom_metadata()
                    except StopIteration:
                        break
                    writer.write_batch(batch, custom_metadata=meta)
        self._fenced(self.path, "compacting its segment")
        for path, _ in self.parts:
            try:
                self.fs.delete_file(path)
            except FileNotFoundError:
                pass  # compacted by `aiospark journal --drop-errors` after the lease expired
        self.parts = []


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
        self.root = root
        self.attempt = attempt
        self.local = store.local
        #: outcomes of the buckets loaded so far (and of the legacy folders, once)
        self.cache: Outcomes = {}
        self.loaded: set[int] = set()
        self._legacy_read = False
        #: bucket -> its open segment
        self.writers: dict[int, SegmentWriter] = {}
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
        if not self._legacy_read:
            self._legacy_read = True
            self._read_legacy()
        buckets, cache = self.buckets, self.cache
        for identity in identities:
            bucket = bucket_of(identity, buckets)
            if bucket not in self.loaded:
                self.loaded.add(bucket)
                self._read_dir(bucket_dir(self.root, self.manifest, bucket))
        return {i: cache[i] for i in identities if i in cache}

    def _read_legacy(self) -> None:
        """Segments of a journal from before buckets (``p=``/``b=`` folders): read whole, once."""
        top = f"{self.root}/{self.manifest.digest}"
        for info in self.fs.get_file_info(pafs.FileSelector(top, allow_not_found=True)):
            name = info.path.rsplit("/", 1)[-1]
            if info.type != pafs.FileType.Directory or not name.startswith(("p=", "b=")):
                continue
            if name.startswith("p="):
                self._read_dir(info.path)
                continue
            for sub in self.fs.get_file_info(pafs.FileSelector(info.path, allow_not_found=True)):
                if sub.type == pafs.FileType.Directory and sub.path.rsplit("/", 1)[-1].startswith("p="):
                    self._read_dir(sub.path)

    def _read_dir(self, directory: str) -> None:
        """Every segment of ``directory`` into the cache (a result outranks a kept error)."""
        known = self.cache
        infos = self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
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
            except OSError:
                continue  # vanished (compacted meanwhile) or unreadable: its rows are called again
            found, skipped = read_outcomes(data)
            self.segments += 1
            self.skipped += skipped
            for identity, outcome in found.items():
                if outcome[0] is None and identity in known:
                    continue
                known[identity] = outcome

    def write(self, entries: list[Entry]) -> None:
        """Append ``entries`` (identity, results or None, error text or None) to their buckets'
        segments: one batch per bucket, durable when this returns (a flushed append; on an object
        store, an object of its own)."""
        self.store.guarded("cannot write an outcome", lambda: self._write(entries))

    def _write(self, entries: list[Entry]) -> None:
        groups: dict[int, list[Entry]] = {}
        for entry in entries:
            groups.setdefault(bucket_of(entry[0], self.buckets), []).append(entry)
        if not self.writers:
            self.store.write_manifest(self.manifest)  # a journal bound elsewhere: its manifest first
        for bucket, group in groups.items():
            writer = self.writers.get(bucket)
            if writer is None:
                writer = self.writers[bucket] = SegmentWriter(
                    self.fs, bucket_dir(self.root, self.manifest, bucket), self.attempt, self.store.lease_seconds,
                    self.local)
            writer.write(group)

    def renew(self) -> None:
        """Keep the leases of this task's segments alive (the task's writer thread calls it every
        second; each writes only every :data:`~aiospark.journal.lease.RENEW_SECONDS`)."""
        if self.writers:
            self.store.guarded("cannot renew its lease", self._renew)

    def _renew(self) -> None:
        for writer in list(self.writers.values()):
            writer.renew()

    def close(self) -> None:
        self.store.guarded("cannot close its segment", self._close)

    def _close(self) -> None:
        failure: BaseException | None = None
        for writer in self.writers.values():
            try:
                writer.close()
            except BaseException as exc:  # every segment closes (its lease released); the first error is raised
                failure = failure or exc
        if failure is not None:
            raise failure
