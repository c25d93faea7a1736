"""How one task attempt writes its outcomes into a directory journal: durable within a flush.

* On a local disk, :class:`SegmentWriter`: one Arrow stream per bucket the task writes
  (``<digest>/k=<bucket>/<attempt>-<random>.arrow``), one record batch appended and flushed per
  flush. A flush reaches the OS, so a killed process loses nothing flushed.
* On an object store (``s3://``, ``gs://``, any filesystem that is not local) an object is
  published only when it is closed, and each object is a request of its own. So
  :class:`PartsWriter` puts each flush into *one* object whatever the buckets it touches, a part
  ``<digest>/parts/<attempt>-<random>~<n>.arrow``: one request per flush, as many buckets as
  the task holds (a task fed without the dedup shuffle holds rows of every bucket, and one object
  per bucket and flush made the flushes fall behind the calls). When the task ends, its parts are
  split into one segment per bucket, ``<digest>/k=<bucket>/<attempt>-<random>.arrow`` (the
  batches it built per bucket as it went, kept in memory: nothing read back, nothing pickled
  again), then the parts are deleted. A killed task's parts stay, and every task reads the
  ``parts`` folder whole at its first fetch.

Each writer holds a lease (:mod:`~aiospark.journal.lease`) over what it is writing, and fences
itself when the lease may have expired: it deletes what it just wrote and raises
:class:`~aiospark.journal.lease.LeaseLost`, so ``aiospark journal --drop-errors`` never sees
dropped errors come back.

Example::

    writer = PartsWriter(fs, "bucket/j/<digest>", "3.17", lease_seconds=60.0, buckets=4)
    writer.write([("[1]", [{"id": 1}], None)])   # one part, durable when this returns
    writer.close()                                # k=<bucket>/3.17-<random>.arrow, parts deleted
"""
from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from .buckets import bucket_of
from .lease import Lease, LeaseLost
from .segment import BATCHED, batches, write_batch
from .store import Entry

__all__ = ["PARTS", "PartsWriter", "SegmentWriter", "bucket_dir"]

#: the folder of an object store's parts, under the question's digest
PARTS = "parts"


def bucket_dir(top: str, bucket: int) -> str:
    """The folder of ``bucket``'s segments (``top``: ``<location>/<digest>``)."""
    return f"{top}/k={bucket}"


def _delete(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass  # compacted by `aiospark journal --drop-errors` after the lease expired


class SegmentWriter:
    """One bucket's segment on a local disk: an Arrow stream, a batch appended and flushed per
    write; its own lease."""

    def __init__(self, fs: pafs.FileSystem, directory: str, attempt: str, lease_seconds: float):
        self.fs = fs
        self.dir = directory
        stem = f"{directory}/{attempt}-{uuid.uuid4().hex[:8]}"
        self.path = f"{stem}.arrow"
        self.lease = Lease(fs, stem, lease_seconds)
        self._sink: Any = None
        self._writer: Any = None

    def write(self, entries: list[Entry]) -> None:
        if self._writer is None:
            self.fs.create_dir(self.dir, recursive=True)
            self.lease.renew()  # before the segment exists: --drop-errors never sees it unleased
            self._sink = self.fs.open_output_stream(self.path)
            self._writer = pa.ipc.new_stream(self._sink, BATCHED)
        self.lease.check("writing an outcome")
        write_batch(self._writer, entries)
        self._sink.flush()
        # a drop that took over deleted this file first (the append went to no name), or runs
        # later and reads this batch: either way nothing brings its errors back; stop writing
        self.lease.check("writing an outcome")

    def renew(self) -> None:
        if self._writer is not None:
            self.lease.renew(force=False)

    def close(self) -> None:
        try:
            if self._writer is not None:
                try:
                    self._writer.close()
                finally:
                    self._sink.close()
                    self._writer = self._sink = None
        finally:
            self.lease.release()


class PartsWriter:
    """A task's outcomes on an object store: one part per write, one segment per bucket at close
    (see the module docstring)."""

    def __init__(self, fs: pafs.FileSystem, top: str, attempt: str, lease_seconds: float, buckets: int):
        self.fs = fs
        self.top = top
        self.name = f"{attempt}-{uuid.uuid4().hex[:8]}"
        self.stem = f"{top}/{PARTS}/{self.name}"
        self.lease = Lease(fs, self.stem, lease_seconds)
        self.buckets = buckets
        #: the parts written so far
        self.parts: list[str] = []
        #: bucket -> (its segment's bytes so far, their stream writer)
        self._segments: dict[int, tuple[Any, Any]] = {}

    def write(self, entries: list[Entry]) -> None:
        groups: dict[int, list[Entry]] = {}
        for entry in entries:
            groups.setdefault(bucket_of(entry[0], self.buckets), []).append(entry)
        built = [(bucket, batch, meta) for bucket, group in groups.items() for batch, meta in batches(group)]
        if not self.parts:  # (a TypeError for unpicklable results came above: before any object)
            self.fs.create_dir(f"{self.top}/{PARTS}", recursive=True)
            self.lease.renew()  # before the first part exists: --drop-errors never sees it unleased
        self.lease.check("writing an outcome")
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, BATCHED) as writer:
            for _, batch, meta in built:
                writer.write_batch(batch, custom_metadata=meta)
        path = f"{self.stem}~{len(self.parts):06d}.arrow"
        with self.fs.open_output_stream(path) as f:
            f.write(sink.getvalue())
        self._fenced([path], "writing an outcome")
        self.parts.append(path)
        for bucket, batch, meta in built:
            segment = self._segments.get(bucket)
            if segment is None:
                data = pa.BufferOutputStream()
                segment = self._segments[bucket] = (data, pa.ipc.new_stream(data, BATCHED))
            segment[1].write_batch(batch, custom_metadata=meta)

    def _fenced(self, written: list[str], what: str) -> None:
        """After writing ``written``: when the lease may have expired meanwhile, delete them and raise."""
        try:
            self.lease.check(what)
        except LeaseLost:
            for path in written:
                _delete(self.fs, path)
            raise

    def renew(self) -> None:
        if self.parts:
            self.lease.renew(force=False)

    def close(self) -> None:
        try:
            if self.parts:
                self._split()
        finally:
            self.lease.release()

    def _split(self) -> None:
        """One segment per bucket of the parts' batches, then the parts deleted: at every moment
        each outcome is in the parts, a segment, or both. A writer whose lease may have expired
        leaves no segment: the drop may have taken errors out of its parts."""
        written: list[str] = []
        for bucket in sorted(self._segments):
            data, writer = self._segments[bucket]
            writer.close()
            self._fenced(written, "splitting its parts into segments")
            directory = bucket_dir(self.top, bucket)
            self.fs.create_dir(directory, recursive=True)
            path = f"{directory}/{self.name}.arrow"
            with self.fs.open_output_stream(path) as f:
                f.write(data.getvalue())
            written.append(path)
        self._fenced(written, "splitting its parts into segments")
        self._segments = {}
        for path in self.parts:
            _delete(self.fs, path)
        self.parts = []
