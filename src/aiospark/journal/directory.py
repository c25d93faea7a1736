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

On a local disk every flush reaches the OS, so a killed process loses nothing flushed. Object
stores (``s3://``, ``gs://``) publish a file only when it is closed: there the durability window
is the task, not the second.

Example::

    store = DirectoryStore("/tmp/journal")
    store.check(manifest)
    task = store.task(manifest, partition=3, batch=None, attempt="17")
    known = task.load()                       # identity -> (results, error)
    task.write([("[1]", [{"id": 1}], None)]); task.close()
"""
from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from .manifest import JournalMismatch, Manifest, refuse
from .segment import BATCHED, SCHEMA, Outcomes, crc, read_outcomes, read_segment, write_batch

__all__ = ["MANIFEST", "SCHEMA", "DirectoryStore", "DirectoryTask", "crc", "open_location", "read_segment"]

MANIFEST = "manifest.json"


def open_location(location: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, root path)`` of a local path, ``file://`` or any URI pyarrow opens."""
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))
    fs, path = pafs.FileSystem.from_uri(location)
    return fs, path.rstrip("/") or "/"


class DirectoryStore:
    """Outcomes as segment files under ``location`` (see the module docstring). Picklable: the
    filesystem is opened again in each task."""

    def __init__(self, location: str):
        self.location = location
        self._fs: tuple[pafs.FileSystem, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location, "_fs": None}

    @property
    def fs(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            self._fs = open_location(self.location)
        return self._fs

    def read_manifest(self) -> Manifest | None:
        fs, root = self.fs
        path = f"{root}/{MANIFEST}"
        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(path) as f:
            return Manifest.from_json(f.read().decode())

    def write_manifest(self, manifest: Manifest) -> None:
        fs, root = self.fs
        if fs.get_file_info(f"{root}/{MANIFEST}").type == pafs.FileType.File:
            return
        fs.create_dir(root, recursive=True)
        with fs.open_output_stream(f"{root}/{MANIFEST}") as f:  # every writer writes the same text
            f.write(manifest.to_json().encode())

    def check(self, manifest: Manifest) -> None:
        """On the driver, before any task: the location can be written, and holds no other
        function's outcomes."""
        try:
            fs, root = self.fs
            refuse(self.location, self.read_manifest(), manifest)
            fs.create_dir(root, recursive=True)
            probe = f"{root}/.write-test-{uuid.uuid4().hex}"
            with fs.open_output_stream(probe) as f:
                f.write(b"ok")
            fs.delete_file(probe)
        except JournalMismatch:
            raise
        except Exception as exc:
            raise OSError(f"aiospark.Journal cannot write to {self.location}: {type(exc).__name__}: {exc}. Pass a "
                          "directory this job may create and write files in") from exc

    def task(self, manifest: Manifest, partition: int, batch: str | None, attempt: str) -> DirectoryTask:
        return DirectoryTask(self, manifest, partition, batch, attempt)


class DirectoryTask:
    """One task attempt's part of a :class:`DirectoryStore`: reads its partition, appends its segment."""

    def __init__(self, store: DirectoryStore, manifest: Manifest, partition: int, batch: str | None,
                 attempt: str):
        self.store = store
        self.manifest = manifest
        fs, root = store.fs
        self.fs = fs
        self.dir = f"{root}/{manifest.digest}" + (f"/b={batch}" if batch is not None else "") + f"/p={partition}"
        self.path = f"{self.dir}/{attempt}-{uuid.uuid4().hex[:8]}.arrow"
        self._sink: Any = None
        self._writer: Any = None
        #: rows skipped while loading (bad crc), and segments read
        self.skipped = 0
        self.segments = 0

    def load(self) -> Outcomes:
        refuse(self.store.location, self.store.read_manifest(), self.manifest)
        known: Outcomes = {}
        infos = self.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))
        for info in sorted(infos, key=lambda i: i.path):
            if info.type != pafs.FileType.File or not info.path.endswith(".arrow"):
                continue
            try:
                with self.fs.open_input_stream(info.path) as f:
                    data = f.read()
            except OSError:
                continue  # vanished or unreadable: its rows are called again
            found, skipped = read_outcomes(data)
            self.segments += 1
            self.skipped += skipped
            for identity, outcome in found.items():
                if outcome[0] is None and identity in known:
                    continue
                known[identity] = outcome
        return known

    def write(self, entries: list[tuple[str, Any, str | None]]) -> None:
        """Append ``entries`` (identity, results or None, error text or None): one batch, flushed."""
        if self._writer is None:
            self.store.write_manifest(self.manifest)
            self.fs.create_dir(self.dir, recursive=True)
            self._sink = self.fs.open_output_stream(self.path)
            self._writer = pa.ipc.new_stream(self._sink, BATCHED)
        write_batch(self._writer, entries)
        self._sink.flush()

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._sink.close()
                self._writer = self._sink = None
