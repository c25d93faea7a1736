"""A directory journal read whole from outside a job: what it holds, and dropping its kept errors.

What ``aiospark journal`` does to a :class:`~aiospark.journal.directory.DirectoryStore` (its
:meth:`~aiospark.journal.store.JournalStore.summarize` and
:meth:`~aiospark.journal.store.JournalStore.drop_errors`; its
:meth:`~aiospark.journal.store.JournalStore.compact` is :mod:`~aiospark.journal.directory_compact`,
built on the helpers here).

**Counts.** One identity may have outcomes in several folders: its bucket's ``k=<bucket>`` folder
(one segment per task attempt and run), an object store's ``parts/`` (a killed task's flushes),
and the folders of a journal written before buckets (``p=<partition>``, ``b=<batch>/p=<partition>``).
The summary counts it once, as a task reads it (a result outranks a kept error), and holds one
bucket at a time, not the journal: :class:`Buckets` reads the folders not split by bucket once
(*loose* segments), groups their outcomes by :func:`~aiospark.journal.buckets.bucket_of`, then
merges them bucket by bucket with each ``k=<bucket>`` folder. It also says how the segments lie
(:class:`Layout`: bucket segments, parts, legacy), so a user sees whether compaction would help.
Folders a task never reads (no bucket of the journal's, no legacy name) are neither counted nor
touched.

**Dropping errors.** Per folder: the segments that hold an error row are replaced by one new
segment holding their results, in the layout tasks write (``compact-<random>.arrow``, written and
closed first), then those segments are deleted. At every moment the results are in the old
segments, the new one, or both, so a reader never sees neither; a crash in between leaves both
(equal results, harmless; run it again). Segments without errors are not touched. A segment a live
task still writes is never rewritten: its writer holds a lease (:mod:`~aiospark.journal.lease`),
renewed while it runs, quiet or not; a live lease refuses the drop, an expired one means its
writer died. ``quiet`` also refuses segments changed that recently (for writers that take no
lease: journals written by versions before leases).

Example::

    directory_summary(DirectoryStore("/data/journals/enrich-v1"), samples=5).errors   # 100
    directory_drop(DirectoryStore("/data/journals/enrich-v1"), quiet=0.0)             # 100
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .buckets import DEFAULT_BUCKETS, bucket_of
from .errors import JournalStoreError
from .identity import RowIdentity
from .lease import SUFFIX, holder, stem, sweep
from .listing import listing
from .manifest import MANIFEST, Manifest
from .segment import BATCH_ROWS, BATCHED, Outcomes, is_segment, read_outcomes, write_batch
from .store import JournalNotFound, JournalSummary
from .table import key_column, table_dir, table_file, table_listing
from .table_compact import table_groups
from .writers import PARTS

if TYPE_CHECKING:  # the store calls in here (function-level): no import back
    from .directory import DirectoryStore

__all__ = ["Buckets", "Layout", "delete_segments", "directory_drop", "directory_manifest", "directory_summary",
           "layout_of", "merge", "read_segment_file", "refuse_written", "sweep_leases", "table_counts", "take_over",
           "write_segment"]


def directory_manifest(store: DirectoryStore) -> Manifest:
    """The manifest of the journal at ``store`` (:class:`JournalNotFound` when there is none)."""
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


@dataclass
class Layout:
    """Where a journal's segments lie (file infos, each list in path order). ``top``:
    ``<location>/<digest>``; ``buckets``: B, the manifest's (or the default a task reads a journal
    from before buckets with); ``size``: bytes of every file under the location."""

    top: str
    buckets: int
    size: int = 0
    by_bucket: dict[int, list[Any]] = field(default_factory=dict)
    parts: list[Any] = field(default_factory=list)
    legacy: list[Any] = field(default_factory=list)

    @property
    def loose(self) -> list[Any]:
        """The segments not split by bucket (parts and legacy), in path order."""
        return sorted(self.parts + self.legacy, key=lambda i: i.path)

    @property
    def bucket_segments(self) -> int:
        return sum(len(infos) for infos in self.by_bucket.values())

    def folders(self) -> dict[str, list[Any]]:
        """Every folder holding segments -> its segments."""
        out: dict[str, list[Any]] = {}
        for info in [*(i for infos in self.by_bucket.values() for i in infos), *self.parts, *self.legacy]:
            out.setdefault(info.path.rsplit("/", 1)[0], []).append(info)
        return out


def _bucket(folder: str, buckets: int) -> int | None:
    text = folder[2:] if folder.startswith("k=") else ""
    if not text.isdigit() or str(int(text)) != text or int(text) >= buckets:
        return None  # no folder a task reads (it names k=<bucket> as bucket_dir does)
    return int(text)


def layout_of(store: DirectoryStore, manifest: Manifest) -> Layout:
    """The journal's segments, by kind (one recursive listing of the location)."""
    fs, root = store.fs
    out = Layout(f"{root}/{manifest.digest}", manifest.buckets or DEFAULT_BUCKETS)
    for info in listing(fs, root, recursive=True):
        if info.type != pafs.FileType.File:
            continue
        out.size += info.size or 0
        if not info.path.endswith(".arrow") or not info.path.startswith(f"{out.top}/"):
            continue
        folders = info.path[len(out.top) + 1:].split("/")[:-1]
        if len(folders) == 1 and (bucket := _bucket(folders[0], out.buckets)) is not None:
            out.by_bucket.setdefault(bucket, []).append(info)
        elif folders == [PARTS]:
            out.parts.append(info)
        elif (len(folders) == 1 and folders[0].startswith("p=")) or \
                (len(folders) == 2 and folders[0].startswith("b=") and folders[1].startswith("p=")):
            out.legacy.append(info)
    for infos in (*out.by_bucket.values(), out.parts, out.legacy):
        infos.sort(key=lambda i: i.path)
    return out


def read_segment_file(fs: pafs.FileSystem, info: Any, strict: bool = False) -> tuple[Outcomes, int]:
    """One segment's outcomes and skipped rows (``({}, 0)`` when it vanished meanwhile).

    ``strict`` (what a rewrite that deletes the file needs): a read that fails for another reason
    than the file being gone, or a non-empty file that is not a segment (someone else's ``.arrow``),
    is a :class:`JournalStoreError` rather than no outcomes, so nothing unread is ever deleted."""
    try:
        with fs.open_input_stream(info.path) as f:
            data = f.read()
    except FileNotFoundError:
        return {}, 0  # vanished meanwhile (a concurrent drop): its outcomes are in what replaced it
    except OSError as exc:
        if strict:
            raise JournalStoreError(f"cannot read {info.path} ({type(exc).__name__}): nothing was rewritten "
                                    "from it; run the command again") from None
        return {}, 0  # only counted or shown: an unreadable segment counts as empty
    if strict and data and not is_segment(data):
        raise JournalStoreError(f"{info.path} is not a journal segment: move it out of the journal's "
                                "folders (a rewrite would delete it)")
    return read_outcomes(data)


def merge(found: Iterable[Outcomes]) -> Outcomes:
    """Outcomes of several segments as a task reads them, in order: a result outranks a kept error."""
    known: Outcomes = {}
    for outcomes in found:
        for identity, outcome in outcomes.items():
            if outcome[0] is None and identity in known:
                continue
            known[identity] = outcome
    return known


class Buckets:
    """A journal's outcomes bucket by bucket: the loose segments (parts, legacy) read once and
    grouped by bucket; :meth:`merged` adds one bucket's ``k=`` segments, read as it is asked.
    ``values=False`` keeps only whether an outcome is a result (``True`` stands for its results):
    counting needs no more. ``skipped``: rows with a bad checksum among the segments read so far."""

    def __init__(self, fs: pafs.FileSystem, layout: Layout, values: bool = True, strict: bool = False):
        self.fs = fs
        self.layout = layout
        self.values = values
        #: a rewrite's reading (:func:`read_segment_file`): a segment that cannot be read stops it
        self.strict = strict
        self.skipped = 0
        #: bucket -> the loose segments' merged outcomes of that bucket
        self.loose: dict[int, Outcomes] = {}
        for identity, outcome in merge(self._read(info) for info in layout.loose).items():
            self.loose.setdefault(bucket_of(identity, layout.buckets), {})[identity] = outcome

    def _read(self, info: Any) -> Outcomes:
        found, skipped = read_segment_file(self.fs, info, self.strict)
        self.skipped += skipped
        if self.values:
            return found
        return {i: (None if r is None else True, e) for i, (r, e) in found.items()}

    def order(self) -> list[int]:
        """The buckets holding any segment or loose outcome, in order."""
        return sorted(set(self.layout.by_bucket) | set(self.loose))

    def merged(self, bucket: int) -> Outcomes:
        """``bucket``'s outcomes as a task reads them: the loose ones first, then its segments."""
        return merge([self.loose.get(bucket, {}), *(self._read(i) for i in self.layout.by_bucket.get(bucket, []))])


def directory_summary(store: DirectoryStore, samples: int) -> JournalSummary:
    manifest = directory_manifest(store)
    fs, _ = store.fs
    layout = layout_of(store, manifest)
    out = JournalSummary(store.shown, "directory", manifest, bytes=layout.size,
                         segments=layout.bucket_segments + len(layout.parts) + len(layout.legacy),
                         buckets=manifest.buckets, bucket_segments=layout.bucket_segments,
                         bucket_folders=len(layout.by_bucket), parts=len(layout.parts), legacy=len(layout.legacy))
    reader = Buckets(fs, layout, values=False)
    for bucket in reader.order():
        for identity, (payload, error) in sorted(reader.merged(bucket).items()):
            if payload is not None:
                out.results += 1
                continue
            out.errors += 1
            if len(out.error_samples) < samples:
                out.error_samples.append((identity, error or ""))
    out.skipped = reader.skipped
    table = table_counts(store, manifest, {i: p is not None for b in reader.order()
                                           for i, (p, _) in reader.merged(b).items()})
    out.table_files, out.table_groups, out.table_foreign = table.files, table.groups, table.foreign
    out.bytes += table.bytes
    out.results += table.results
    out.errors -= table.outranked
    return out


@dataclass
class TableCounts:
    """The table route's results (:mod:`aiospark.journal.table`) beside the bucket segments':
    ``results`` keys the segments do not hold as results already, ``outranked`` kept errors
    there that a table result outranks."""

    files: int = 0
    bytes: int = 0
    groups: int = 0
    foreign: int = 0
    results: int = 0
    outranked: int = 0


def table_counts(store: DirectoryStore, manifest: Manifest, known: dict[str, bool]) -> TableCounts:
    """Count the table's keys once each (two writers of one key count once) against ``known``,
    the bucket segments' identities (True: a result, False: a kept error)."""
    fs, root = store.fs
    directory = table_dir(f"{root}/{manifest.digest}")
    every = table_listing(fs, directory)
    out = TableCounts(len(every), sum(i.size or 0 for i in every), *table_groups(every, directory))
    infos = [i for i in every if table_file(i.path, directory) is not None]  # a file aiospark did not write is counted, never read
    if not infos:
        return out
    columns = [key_column(i) for i in range(len(manifest.key))]
    keys = pa.concat_tables([pq.read_table(i.path, columns=columns, filesystem=fs) for i in infos])
    distinct = keys.group_by(columns).aggregate([]).rename_columns(list(manifest.key))
    out.results = distinct.num_rows
    if known:  # only then can a key be in both
        identify = RowIdentity(manifest.key)
        for row in distinct.to_pylist():
            was_result = known.get(identify(row) or "")
            if was_result is True:
                out.results -= 1
            elif was_result is False:
                out.outranked += 1
    return out


def refuse_written(store: DirectoryStore, infos: list[Any], quiet: float, now: float, then: str) -> None:
    """A :class:`JournalStoreError` when a writer may still write one of ``infos``: its lease is
    live, or it changed less than ``quiet`` seconds ago; ``then`` says what to do once the job has
    ended ("drop its errors")."""
    fs = store.fs[0]
    for path in sorted({stem(i.path): i.path for i in infos}.values()):  # one lease per writer
        expires = holder(fs, path, now)
        if expires is not None:
            raise JournalStoreError(
                f"the journal at {store.shown} is being written (segment {path} is held by a running task, its "
                f"lease runs until {time.strftime('%H:%M:%S', time.localtime(expires))}): {then} once the job "
                "has ended (a killed task's lease expires by itself)")
    busy = [i.path for i in infos if i.mtime is not None and now - i.mtime.timestamp() < quiet]
    if busy:
        raise JournalStoreError(f"the journal at {store.shown} is being written (segment {busy[0]} changed "
                                f"less than {quiet:g} s ago): {then} once the job has ended")


def take_over(fs: pafs.FileSystem, infos: list[Any]) -> None:
    """Delete the (expired: :func:`refuse_written` refused live ones) leases of ``infos``' writers,
    before their segments are rewritten: a stalled writer that resumes finds its lease gone and
    writes no more (journal/lease.py)."""
    for lease in sorted({stem(info.path) + SUFFIX for info in infos}):
        try:
            fs.delete_file(lease)
        except FileNotFoundError:
            pass


def write_segment(fs: pafs.FileSystem, directory: str, entries: Sequence[tuple[str, Any, str | None]]) -> str:
    """``entries`` as a new closed segment ``<directory>/compact-<random>.arrow`` (the batched
    layout tasks write); returns its path. Complete before the caller deletes what it replaces."""
    fs.create_dir(directory, recursive=True)
    path = f"{directory}/compact-{uuid.uuid4().hex[:8]}.arrow"
    with fs.open_output_stream(path) as sink, pa.ipc.new_stream(sink, BATCHED) as writer:
        for start in range(0, len(entries), BATCH_ROWS):
            write_batch(writer, entries[start:start + BATCH_ROWS])
    return path


def delete_segments(fs: pafs.FileSystem, infos: list[Any]) -> None:
    for info in infos:
        try:
            fs.delete_file(info.path)
        except FileNotFoundError:
            pass  # a stalled writer that resumed deleted its own (journal/lease.py)


def sweep_leases(store: DirectoryStore, top: str) -> None:
    """Delete expired leases left without a segment anywhere under ``top``."""
    fs = store.fs[0]
    sweep(fs, [i for i in listing(fs, top, recursive=True) if i.type == pafs.FileType.File])


def directory_drop(store: DirectoryStore, quiet: float) -> int:
    manifest = directory_manifest(store)
    fs, _ = store.fs
    layout = layout_of(store, manifest)
    now = time.time()
    plan = []
    for directory, infos in sorted(layout.folders().items()):
        read = [(info, read_segment_file(fs, info)[0]) for info in sorted(infos, key=lambda i: i.path)]
        errors = sum(1 for payload, _ in merge(found for _, found in read).values() if payload is None)
        if not errors:
            continue
        affected = [(info, found) for info, found in read if any(p is None for p, _ in found.values())]
        refuse_written(store, [info for info, _ in affected], quiet, now, "drop its errors")
        plan.append((directory, affected, errors))
    dropped = 0
    for directory, affected, errors in plan:
        results = merge(found for _, found in affected)
        entries = [(i, r, None) for i, (r, _) in sorted(results.items()) if r is not None]
        take_over(fs, [info for info, _ in affected])
        if entries:  # the new segment is complete and closed before any old one goes (the tasks' layout)
            write_segment(fs, directory, entries)
        delete_segments(fs, [info for info, _ in affected])
        dropped += errors
    sweep_leases(store, layout.top)
    return dropped
