"""The directory store: append-only Arrow IPC segments on any filesystem pyarrow opens.

Layout (``<digest>`` is the manifest's hash, so outcomes of another function never share a
directory; ``b=`` only in Structured Streaming, the micro-batch id)::

    <location>/manifest.json                   what the outcomes belong to (written on first write)
    <location>/<digest>/[b=<batch>/]p=<partition>/<attempt>-<random>.arrow

Each task attempt appends to its own segment (an Arrow IPC *stream*: one record batch per flush,
one pickle and one crc per batch, see :mod:`~aiospark.journal.segment`); nothing is ever
rewritten. A task finds the outcomes
it needs by reading only its partition's directory: a rerun of the same input with the same
partitioning finds them all; with another partitioning the rows are called again (correct, only
costlier). A killed writer leaves a truncated segment: reading stops at the broken batch and
keeps the complete ones before it; a batch whose crc does not match is skipped (its rows are
called again).

On a local disk every flush reaches the OS, so a killed process loses nothing flushed. An object
store (``s3://``, ``gs://``, any filesystem that is not local) publishes an object only when it is
closed, so there each flush is an object of its own, a *part*
``<attempt>-<random>~<n>.arrow`` (a whole Arrow stream of that flush's batch): durable about a
second after the call, as on a disk. When the task ends its parts are compacted into one
``<attempt>-<random>.arrow`` (written first, from the parts' batches as they are: no pickling
again), then the parts are deleted. A killed task's parts stay and are read as segments.

While a segment is open its writer holds a lease (``<attempt>-<random>.lease``,
:mod:`~aiospark.journal.lease`), so ``aiospark journal --drop-errors`` never rewrites it; a writer
that stalled past its lease writes nothing more (it deletes a part or compacted segment written as
it found out) and fails its task, so it never brings dropped errors back.

Every message that leaves the store shows the location with its credentials masked
(:mod:`~aiospark.journal.location`), and so does a filesystem's own error.

Example::

    store = DirectoryStore("/tmp/journal")
    store.check(manifest)
    task = store.task(manifest, partition=3, batch=None, attempt="17")
    known = task.load()                       # identity -> (results, error)
    task.write([("[1]", [{"id": 1}], None)]); task.close()
"""
from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from .lease import Lease, LeaseLost, lease_seconds, sweep
from .location import resolve
from .manifest import MANIFEST, JournalMismatch, Manifest, refuse
from .segment import BATCHED, SCHEMA, Outcomes, crc, read_outcomes, read_segment, write_batch
from .store import Entry, JournalStore, JournalSummary, StoreTask

__all__ = ["MANIFEST", "SCHEMA", "DirectoryStore", "DirectoryTask", "crc", "open_location", "read_segment"]

T = TypeVar("T")


def open_location(location: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, root path)`` of a local path, ``file://`` or any URI pyarrow opens."""
    if "://" not in location:
        return pafs.LocalFileSystem(), resolve(location)
    fs, path = pafs.FileSystem.from_uri(location)
    return fs, path.rstrip("/") or "/"


class DirectoryStore(JournalStore):
    """Outcomes as segment files under ``location`` (see the module docstring). Picklable: the
    filesystem is opened again in each task. A relative path is made absolute here, once."""

    kind = "directory"

    def __init__(self, location: str):
        super().__init__(location)
        #: the writers' lease, read here (on the driver) so every task uses the same
        self.lease_seconds = lease_seconds()
        self._fs: tuple[pafs.FileSystem, str] | None = None

    @property
    def location(self) -> str:
        """What opens the store (credentials included: never print it; :attr:`shown` is that)."""
        return self.loc.text

    def __getstate__(self) -> dict[str, Any]:
        return {"loc": self.loc, "lease_seconds": self.lease_seconds, "_fs": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"DirectoryStore({self.shown!r})"

    def guarded(self, what: str, action: Callable[[], T]) -> T:
        """``action()``, whatever it raises shown without this location's credentials."""
        try:
            return action()
        except Exception as exc:
            clean = self.loc.clean(exc, f"the journal at {self.shown}: {what}")
            if clean is exc:
                raise
            raise clean from None

    @property
    def fs(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            self._fs = self.guarded("cannot open it", lambda: open_location(self.location))
        return self._fs

    @property
    def local(self) -> bool:
        """Whether every flush reaches storage as it is written (a local filesystem)."""
        return isinstance(self.fs[0], pafs.LocalFileSystem)

    def read_manifest(self) -> Manifest | None:
        def read() -> Manifest | None:
            fs, root = self.fs
            path = f"{root}/{MANIFEST}"
            if fs.get_file_info(path).type != pafs.FileType.File:
                return None
            with fs.open_input_stream(path) as f:
                return Manifest.from_json(f.read().decode())

        return self.guarded("cannot read its manifest", read)

    def write_manifest(self, manifest: Manifest) -> None:
        def write() -> None:
            fs, root = self.fs
            if fs.get_file_info(f"{root}/{MANIFEST}").type == pafs.FileType.File:
                return
            fs.create_dir(root, recursive=True)
            with fs.open_output_stream(f"{root}/{MANIFEST}") as f:  # every writer writes the same text
                f.write(manifest.to_json().encode())

        self.guarded("cannot write its manifest", write)

    def check(self, manifest: Manifest) -> None:
        """On the driver, before any task: the location can be written, and holds no other
        function's outcomes."""
        try:
            fs, root = self.fs
            refuse(self.shown, self.read_manifest(), manifest)
            fs.create_dir(root, recursive=True)
            probe = f"{root}/.write-test-{uuid.uuid4().hex}"
            with fs.open_output_stream(probe) as f:
                f.write(b"ok")
            fs.delete_file(probe)
        except JournalMismatch:
            raise
        except Exception as exc:
            text = self.loc.scrub(f"{type(exc).__name__}: {exc}")
            error = OSError(f"aiospark.Journal cannot write to {self.shown}: {text}. Pass a directory this job may "
                            "create and write files in")
            if self.loc.leaks(exc):
                raise error from None
            raise error from exc

    @staticmethod
    def versioned(location: str, version: str) -> str:
        """``<location>/v=<version>``."""
        if "://" in location:
            parts = urllib.parse.urlsplit(location)
            return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + f"/v={version}",
                                            parts.query, parts.fragment))
        return os.path.join(location, f"v={version}")

    def task(self, manifest: Manifest, partition: int, batch: str | None, attempt: str) -> DirectoryTask:
        return DirectoryTask(self, manifest, partition, batch, attempt)

    def summarize(self, samples: int) -> JournalSummary:
        from .directory_admin import directory_summary

        return directory_summary(self, samples)

    def drop_errors(self, quiet: float) -> int:
        from .directory_admin import directory_drop

        return directory_drop(self, quiet)


class DirectoryTask(StoreTask):
    """One task attempt's part of a :class:`DirectoryStore`: reads its partition, appends its segment
    (on an object store: one part per flush, compacted at close)."""

    def __init__(self, store: DirectoryStore, manifest: Manifest, partition: int, batch: str | None,
                 attempt: str):
        self.store = store
        self.manifest = manifest
        fs, root = store.fs
        self.fs = fs
        self.dir = f"{root}/{manifest.digest}" + (f"/b={batch}" if batch is not None else "") + f"/p={partition}"
        self.stem = f"{self.dir}/{attempt}-{uuid.uuid4().hex[:8]}"
        self.path = f"{self.stem}.arrow"
        self.lease = Lease(fs, self.stem, store.lease_seconds)
        self.local = store.local
        self._sink: Any = None
        self._writer: Any = None
        #: an object store's parts written so far: (path, the part's bytes)
        self.parts: list[tuple[str, Any]] = []
        #: rows skipped while loading (bad crc), and segments read
        self.skipped = 0
        self.segments = 0

    def load(self) -> Outcomes:
        return self.store.guarded("cannot read its outcomes", self._load)

    def _load(self) -> Outcomes:
        refuse(self.store.shown, self.store.read_manifest(), self.manifest)
        known: Outcomes = {}
        infos = self.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))
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
        return known

    def write(self, entries: list[Entry]) -> None:
        """Append ``entries`` (identity, results or None, error text or None): one batch, durable
        when this returns (a flushed append; on an object store, an object of its own)."""
        self.store.guarded("cannot write an outcome", lambda: self._write(entries))

    def _write(self, entries: list[Entry]) -> None:
        if self._writer is None and not self.parts:
            self.store.write_manifest(self.manifest)
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
        """Keep this writer's lease alive (the task's writer thread calls it every second; it
        writes only every :data:`~aiospark.journal.lease.RENEW_SECONDS`)."""
        if self._writer is not None or self.parts:
            self.store.guarded("cannot renew its lease", lambda: self.lease.renew(force=False))

    def close(self) -> None:
        self.store.guarded("cannot close its segment", self._close)

    def _close(self) -> None:
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
        """One segment of this task's parts (their batches as written), then the parts deleted: at
        every moment each outcome is in the parts, the segment, or both. A writer whose lease may
        have expired compacts nothing: the drop may have removed errors these parts hold."""
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
