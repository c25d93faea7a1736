"""``aiospark journal --compact``: a directory journal written by many runs, as one segment per bucket.

Runs leave a bucket many segments (one per task attempt that wrote it, per run), killed tasks leave
parts (``parts/``, read whole by every task) and a journal written before buckets leaves
``p=``/``b=/p=`` folders (also read whole by every task). :func:`directory_compact` rewrites it
bucket by bucket: the merged outcomes of a bucket's ``k=<bucket>`` segments and the loose (parts and
legacy) outcomes of that bucket, read as a task reads them (a result outranks a kept error), are
written as one new closed segment ``k=<bucket>/compact-<random>.arrow``, then that bucket's old
segments are deleted. Once every bucket is written, the loose segments are deleted (with their
writers' expired leases, and legacy folders left empty). At every moment each outcome is in the old
segments, the new one, or both: a crash mid-way leaves duplicates (harmless: equal outcomes, read
once) and running it again finishes. A bucket already one segment with no loose outcome is left
untouched. Kept errors are kept; ``drop_errors=True`` leaves them out in the same pass (and also
rewrites a one-segment bucket holding one): one plan, refused or done as a whole, rather than a drop
then a compaction, which could drop and then refuse. Rows with a bad checksum are not carried over
(they are called again anyway). The table route's Parquet files become one file per schema and
partition (:mod:`aiospark.journal.table_compact`; runs still being written are left as they are).

It refuses (:class:`~aiospark.journal.errors.JournalStoreError`), before changing anything, when a
segment it would rewrite has a live lease or changed less than ``quiet`` seconds ago, as
``--drop-errors`` does (:func:`~aiospark.journal.directory_admin.refuse_written`). A journal from
before buckets gets its manifest's ``buckets`` written first (the default a task reads it with),
so the next run reads the ``k=`` folders compaction wrote with the same B.

Memory: the loose outcomes, plus one bucket at a time (:class:`~aiospark.journal.directory_admin.Buckets`).

Example::

    c = directory_compact(DirectoryStore("/data/journals/enrich-v1"), quiet=0.0)
    (c.written, c.removed, c.rows)          # (12, 40, 2000): 12 buckets, 40 segments gone, 2,000 outcomes
"""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from .directory_admin import (
    Buckets,
    delete_segments,
    directory_manifest,
    layout_of,
    refuse_written,
    sweep_leases,
    table_counts,
    take_over,
    write_segment,
)
from .errors import JournalStoreError
from .listing import listing
from .store import Compaction
from .table import table_dir
from .table_compact import table_compact
from .writers import bucket_dir

if TYPE_CHECKING:  # the store calls in here (function-level): no import back
    from .directory import DirectoryStore

__all__ = ["directory_compact"]


def directory_compact(store: DirectoryStore, quiet: float, drop_errors: bool = False) -> Compaction:
    """Rewrite the journal at ``store`` as one segment per bucket (see the module docstring)."""
    manifest = directory_manifest(store)
    fs, _ = store.fs
    layout = layout_of(store, manifest)
    reader = Buckets(fs, layout, strict=True)  # the loose segments, read once; what is unread is never deleted
    out = Compaction(store.shown, "directory", buckets=layout.buckets)
    rewrite = {b for b in reader.order() if len(layout.by_bucket.get(b, ())) > 1 or b in reader.loose}
    if drop_errors:  # a one-segment bucket holding a kept error is rewritten too
        rewrite |= {b for b in reader.order() if b not in rewrite
                    and any(r is None for r, _ in reader.merged(b).values())}
    consumed = layout.parts + layout.legacy
    rewritten = [info for b in sorted(rewrite) for info in layout.by_bucket.get(b, [])] + consumed
    refuse_written(store, rewritten, quiet, time.time(), "compact it")  # before anything changes
    if rewrite and manifest.buckets is None:  # pin the B its k= folders are written with
        now = directory_manifest(store)
        if now.buckets is not None and now.buckets != layout.buckets:  # a run pinned another B meanwhile
            raise JournalStoreError(f"{store.shown}: a run fixed the journal's buckets at {now.buckets} while it was "
                                    "being read; nothing was changed: run the command again")
        if now.buckets is None:
            store.write_manifest(dataclasses.replace(manifest, buckets=layout.buckets), replace=True)
    take_over(fs, rewritten)
    known: dict[str, bool] = {}
    for bucket in reader.order():
        merged = reader.merged(bucket)
        if bucket in rewrite:
            if drop_errors:
                kept = {i: o for i, o in merged.items() if o[0] is not None}
                out.dropped += len(merged) - len(kept)
                merged = kept
            if merged:  # complete and closed before any old segment of the bucket goes
                write_segment(fs, bucket_dir(layout.top, bucket), [(i, r, e) for i, (r, e) in sorted(merged.items())])
                out.written += 1
            old = layout.by_bucket.get(bucket, [])
            delete_segments(fs, old)
            out.removed += len(old)
        elif merged:
            out.kept += 1
        known.update((i, r is not None) for i, (r, _) in merged.items())
        errors = sum(1 for r, _ in merged.values() if r is None)
        out.results += len(merged) - errors
        out.errors += errors
    table = table_counts(store, manifest, known)  # counted before: compacting them changes no answer
    out.results += table.results
    out.errors -= table.outranked
    tables = table_compact(fs, table_dir(f"{store.fs[1]}/{manifest.digest}"), len(manifest.key), quiet)
    out.table_written, out.table_removed, out.table_busy = tables.written, tables.removed, tables.busy
    out.table_window = tables.window
    delete_segments(fs, consumed)  # every bucket holds their outcomes now
    out.removed += len(consumed)
    out.removed_parts, out.removed_legacy = len(layout.parts), len(layout.legacy)
    _remove_empty(fs, sorted({info.path.rsplit("/", 1)[0] for info in layout.legacy}, reverse=True))
    sweep_leases(store, layout.top)
    return out


def _remove_empty(fs: pafs.FileSystem, folders: list[str]) -> None:
    """Delete the legacy folders (``p=``, then their ``b=``) left empty: nothing writes them any
    more, and every task would list them. ``parts/`` stays: running tasks write there."""
    for folder in folders:
        for path in (folder, folder.rsplit("/", 1)[0]):
            if path.rsplit("/", 1)[-1].startswith(("p=", "b=")) and _empty(fs, path):
                try:
                    fs.delete_dir(path)
                except OSError:
                    pass  # only tidiness: an empty folder reads as nothing


def _empty(fs: pafs.FileSystem, path: str) -> bool:
    try:
        return fs.get_file_info(path).type == pafs.FileType.Directory and not listing(fs, path)
    except OSError:
        return False

