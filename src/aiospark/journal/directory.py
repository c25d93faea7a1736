"""The directory store: append-only Arrow IPC segments on any filesystem pyarrow opens.

Layout (``<digest>`` is the hash of the manifest's question, so outcomes of another function
never share a directory; ``<bucket>`` is ``crc32(identity) % B``, B the manifest's ``buckets``:
:mod:`~aiospark.journal.buckets`)::

    <location>/manifest.json                   what the outcomes belong to, and B (written at first bind)
    <location>/<digest>/k=<bucket>/<attempt>-<random>.arrow
    <location>/<digest>/parts/<attempt>-<random>~<n>.arrow   (object stores: a running or killed task's flushes)

A row's outcome is in its bucket's folder whatever Spark partition, micro-batch or run it came
from, so a rerun partitioned any other way, or a later micro-batch, finds it. Each task attempt
appends to one segment per bucket it writes (an Arrow IPC *stream*: one record batch per flush,
one pickle and one crc per batch, see :mod:`~aiospark.journal.segment`); nothing is ever
rewritten. A task loads a bucket the first time one of its rows needs it
(:mod:`~aiospark.journal.directory_task`). A killed writer leaves a truncated segment: reading
stops at the broken batch and keeps the complete ones before it; a batch whose crc does not
match is skipped (its rows are called again). Segments of a journal written before buckets
(``[b=<batch>/]p=<partition>/``) are still read, whole, once per task.

On a local disk every flush reaches the OS, so a killed process loses nothing flushed. An object
store (``s3://``, ``gs://``, any filesystem that is not local) publishes an object only when it is
closed, so there each flush is one object whatever buckets it holds, a *part*
``<digest>/parts/<attempt>-<random>~<n>.arrow``: durable about a second after the call, as on a
disk. When the task ends its parts are split into one segment per bucket (the batches as they were
built: no pickling again), then the parts are deleted. A killed task's parts stay, and are read
whole by every task (:mod:`~aiospark.journal.writers`). ``aiospark journal --compact``
(:mod:`~aiospark.journal.directory_compact`) rewrites a journal many runs wrote -- a bucket's many
segments, killed tasks' parts, folders from before buckets -- as one segment per bucket.

While a segment is open its writer holds a lease (``<attempt>-<random>.lease``,
:mod:`~aiospark.journal.lease`), so ``aiospark journal --drop-errors`` or ``--compact`` never
rewrites it; a writer
that stalled past its lease writes nothing more (it deletes a part or compacted segment written as
it found out) and fails its task, so it never brings dropped errors back.

Every message that leaves the store shows the location with its credentials masked
(:mod:`~aiospark.journal.location`), and so does a filesystem's own error.

Example::

    store = DirectoryStore("/tmp/journal")
    store.check(manifest)
    task = store.task(manifest, partition=3, batch=None, attempt="17")
    task.load()                               # {}: the manifest checked
    known = task.fetch(["[1]"])               # identity -> (results, error), its bucket loaded
    task.write([("[1]", [{"id": 1}], None)]); task.close()
"""
from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow.fs as pafs

from .directory_task import DirectoryTask
from .lease import lease_seconds
from .location import resolve
from .manifest import MANIFEST, JournalMismatch, Manifest, refuse
from .segment import SCHEMA, crc, read_segment
from .store import Compaction, JournalStore, JournalSummary

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

    def write_manifest(self, manifest: Manifest, replace: bool = False) -> None:
        """Write ``manifest`` unless one is there (``replace``: also then -- a journal from before
        buckets gets its layout written once)."""
        def write() -> None:
            fs, root = self.fs
            if not replace and fs.get_file_info(f"{root}/{MANIFEST}").type == pafs.FileType.File:
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

    def check_question(self, manifest: Manifest) -> None:
        refuse(self.shown, self.read_manifest(), manifest)

    def layout_buckets(self) -> int | None:
        recorded = self.read_manifest()
        return None if recorded is None else recorded.buckets

    def bind_layout(self, manifest: Manifest) -> None:
        recorded = self.read_manifest()
        if recorded is None or recorded.buckets is None:
            self.write_manifest(manifest, replace=recorded is not None)

    @staticmethod
    def versioned(location: str, version: str) -> str:
        """``<location>/v=<version>``."""
        if "://" in location:
            parts = urllib.parse.urlsplit(location)
            return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + f"/v={version}",
                                            parts.query, parts.fragment))
        return os.path.join(location, f"v={version}")

    def task(self, manifest: Manifest, partition: int, batch: str | None, attempt: str) -> DirectoryTask:
        return DirectoryTask(self, manifest, attempt)

    def summarize(self, samples: int) -> JournalSummary:
        from .directory_admin import directory_summary

        return directory_summary(self, samples)

    def drop_errors(self, quiet: float) -> int:
        from .directory_admin import directory_drop

        return directory_drop(self, quiet)

    def compact(self, quiet: float, drop_errors: bool = False) -> Compaction:
        from .directory_compact import directory_compact

        return directory_compact(self, quiet, drop_errors)
