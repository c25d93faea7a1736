"""A directory journal read whole from outside a job: what it holds, and dropping its kept errors.

What ``aiospark journal`` does to a :class:`~aiospark.journal.directory.DirectoryStore` (its
:meth:`~aiospark.journal.store.JournalStore.summarize` and
:meth:`~aiospark.journal.store.JournalStore.drop_errors`). Errors are dropped per partition
directory: the segments that hold an error row are replaced by one new segment holding their
results, in the layout tasks write (``compact-<random>.arrow``, written and closed first), then
those segments are deleted. At every moment the results are in the old segments, the new one, or
both, so a reader never sees neither; a crash in between leaves both (equal results, harmless; run
it again). Segments without errors are not touched. A segment a live task still writes is never
rewritten: its writer holds a lease (:mod:`~aiospark.journal.lease`), renewed while it runs, quiet
or not; a live lease refuses the drop, an expired one means its writer died. ``quiet`` also
refuses segments changed that recently (for writers that take no lease: journals written by
versions before leases).

Example::

    directory_summary(DirectoryStore("/data/journals/enrich-v1"), samples=5).errors   # 100
    directory_drop(DirectoryStore("/data/journals/enrich-v1"), quiet=0.0)             # 100
"""
from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from .errors import JournalStoreError
from .lease import SUFFIX, holder, stem, sweep
from .listing import listing
from .manifest import MANIFEST, Manifest
from .segment import BATCH_ROWS, BATCHED, Outcomes, read_outcomes, write_batch
from .store import JournalNotFound, JournalSummary

if TYPE_CHECKING:  # the store calls in here (function-level): no import back
    from .directory import DirectoryStore

__all__ = ["directory_drop", "directory_summary"]


def _directory_manifest(store: DirectoryStore) -> Manifest:
    fs, root = store.fs
    kind = fs.get_file_info(root).type
    if kind == pafs.FileType.NotFound:
        raise JournalNotFound(f"no journal at {store.shown}: nothing is there")
    if kind == pafs.FileType.File:
        raise JournalNotFound(f"no journal at {store.shown}: it is a file; a directory journal is a directory "
                              f"holding {MANIFEST}")
    manifest = store.read_manifest()
    if manifest is None:
        raise JournalNotFound(f"no journal at {store.shown}: the directory holds no {MANIFEST} (a journal "
                              "writes it with its first outcome)")
    return manifest


def _partitions(store: DirectoryStore, manifest: Manifest) -> tuple[int, dict[str, list[Any]]]:
    """``(bytes of every file under the location, {partition directory: its segments' infos})``."""
    fs, root = store.fs
    size = 0
    parts: dict[str, list[Any]] = {}
    for info in listing(fs, root, recursive=True):
        if info.type != pafs.FileType.File:
            continue
        size += info.size or 0
        if info.path.endswith(".arrow") and info.path.startswith(f"{root}/{manifest.digest}/"):
            parts.setdefault(info.path.rsplit("/", 1)[0], []).append(info)
    return size, parts


def _read(fs: pafs.FileSystem, info: Any) -> tuple[Outcomes, int]:
    try:
        with fs.open_input_stream(info.path) as f:
            return read_outcomes(f.read())
    except OSError:
        return {}, 0  # vanished meanwhile (a concurrent drop): its rows are elsewhere or called again


def _merge(found: list[Outcomes]) -> Outcomes:
    known: Outcomes = {}
    for outcomes in found:  # as a task reads them: a result outranks a kept error
        for identity, outcome in outcomes.items():
            if outcome[0] is None and identity in known:
                continue
            known[identity] = outcome
    return known


def directory_summary(store: DirectoryStore, samples: int) -> JournalSummary:
    manifest = _directory_manifest(store)
    fs, _ = store.fs
    size, parts = _partitions(store, manifest)
    out = JournalSummary(store.shown, "directory", manifest, bytes=size,
                         segments=sum(len(v) for v in parts.values()))
    for directory in sorted(parts):
        read = [_read(fs, info) for info in sorted(parts[directory], key=lambda i: i.path)]
        out.skipped += sum(skipped for _, skipped in read)
        for identity, (payload, error) in sorted(_merge([found for found, _ in read]).items()):
            if payload is not None:
                out.results += 1
                continue
            out.errors += 1
            if len(out.error_samples) < samples:
                out.error_samples.append((identity, error or ""))
    return out


def directory_drop(store: DirectoryStore, quiet: float) -> int:
    manifest = _directory_manifest(store)
    fs, _ = store.fs
    _, parts = _partitions(store, manifest)
    now = time.time()
    plan = []
    for directory in sorted(parts):
        infos = sorted(parts[directory], key=lambda i: i.path)
        read = [(info, _read(fs, info)[0]) for info in infos]
        merged = _merge([found for _, found in read])
        errors = sum(1 for payload, _ in merged.values() if payload is None)
        if not errors:
            continue
        affected = [(info, found) for info, found in read if any(p is None for p, _ in found.values())]
        for info, _ in affected:
            expires = holder(fs, info.path, now)
            if expires is not None:
                raise JournalStoreError(
                    f"the journal at {store.shown} is being written (segment {info.path} is held by a running task, "
                    f"its lease runs until {time.strftime('%H:%M:%S', time.localtime(expires))}): drop its errors "
                    "once the job has ended (a killed task's lease expires by itself)")
        busy = [i.path for i, _ in affected if i.mtime is not None and now - i.mtime.timestamp() < quiet]
        if busy:
            raise JournalStoreError(f"the journal at {store.shown} is being written (segment {busy[0]} changed "
                                    f"less than {quiet:g} s ago): drop its errors once the job has ended")
        plan.append((directory, affected, errors))
    dropped = 0
    for directory, affected, errors in plan:
        results = _merge([found for _, found in affected])
        entries = [(i, r, None) for i, (r, _) in sorted(results.items()) if r is not None]
        for lease in sorted({stem(info.path) + SUFFIX for info, _ in affected}):
            try:  # first: a dead writer's expired lease (a live one refused the drop above) is taken
                fs.delete_file(lease)  # over; a stalled writer that resumes finds it gone (journal/lease.py)
            except FileNotFoundError:
                pass
        if entries:  # the new segment is complete and closed before any old one goes (the tasks' layout)
            with fs.open_output_stream(f"{directory}/compact-{uuid.uuid4().hex[:8]}.arrow") as sink, \
                    pa.ipc.new_stream(sink, BATCHED) as writer:
                for start in range(0, len(entries), BATCH_ROWS):
                    write_batch(writer, entries[start:start + BATCH_ROWS])
        for info, _ in affected:
            try:
                fs.delete_file(info.path)
            except FileNotFoundError:
                pass  # a stalled writer that resumed deleted its own (journal/lease.py)
        dropped += errors
    root = store.fs[1]
    infos = listing(fs, f"{root}/{manifest.digest}", recursive=True)
    sweep(fs, [i for i in infos if i.type == pafs.FileType.File])
    return dropped
