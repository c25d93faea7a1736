"""``aiospark journal --compact`` for the table route's Parquet files: one file per partition.

Every run of ``unordered_wait`` on the table route adds files (one per flush of each task attempt)
under ``table/<shape>/<run>/<partition>/`` (:mod:`aiospark.journal.table`); a job run daily, or a
long one, leaves thousands, and every later run's join lists and opens them all.
:func:`table_compact` rewrites them, per schema folder and hash partition, as one file of a new run
folder, one answer per key (where two writers may have recorded a key, the first file in path
order stands, as Spark's join and every other reader choose it), then deletes the files it read.

Why it is safe for readers:

* The new run folder is named by the *earliest* definition time among the runs it merges, so its
  life (from that time to its file) overlaps every run it replaces. A crash between writing it and
  deleting the old files leaves each key twice; the overlap makes every reader keep one answer per
  key (:func:`~aiospark.journal.table.may_repeat_keys`), and running it again finishes. A run
  defined later than the compaction does not overlap it, so its join stays the plain one.
* A run whose newest file changed less than :data:`TABLE_QUIET_SECONDS` (or ``quiet``, if longer)
  ago may still be writing: its files are left as they are. Its retried tasks read their earlier
  attempts from its own folder (:mod:`aiospark.journal.table_prior`), which compaction must not
  empty under them.
* A DataFrame defined before the compaction and run after it lists files that are gone: Spark fails
  its job with a missing-file error (an error, never a silent miss); define it again.

Memory: one input file and the keys of one partition (only where keys may repeat).

Example::

    done = table_compact(fs, "/data/j/<digest>/table", keys=1, quiet=0.0)
    (done.written, done.removed)       # (4, 180): 180 files became one per partition
"""
from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .errors import JournalStoreError
from .table import key_column, may_repeat_keys, table_file, table_infos, write_options

__all__ = ["TABLE_QUIET_SECONDS", "TableCompaction", "table_compact", "table_groups"]

#: a run whose newest table file is younger than this may still be writing: left as it is
TABLE_QUIET_SECONDS = 60.0


@dataclasses.dataclass
class TableCompaction:
    """What :func:`table_compact` did: ``written`` new files (one per schema and partition),
    ``removed`` files they replaced, ``busy`` files of runs still being written (their last file is
    less than ``window`` seconds old), left alone."""

    written: int = 0
    removed: int = 0
    busy: int = 0
    #: the seconds within which a run's last file counts as it still writing
    window: float = TABLE_QUIET_SECONDS


#: the writer name of a compaction's files (``<WRITER>-<ms>-<random>~0.parquet``)
WRITER = "compact"


def table_groups(infos: Sequence[pafs.FileInfo], directory: str) -> tuple[int, int]:
    """``(partitions, foreign)`` of ``infos`` (the files under ``directory``): the schema and
    partition folders of the files aiospark wrote (:func:`table_compact` leaves one file in each),
    and how many files it did not write (left alone)."""
    places = [table_file(info.path, directory) for info in infos]
    return len({(p.shape, p.partition) for p in places if p is not None}), places.count(None)


def table_compact(fs: pafs.FileSystem, directory: str, keys: int, quiet: float) -> TableCompaction:
    """Rewrite the table files under ``directory`` (a digest's ``table`` folder; ``keys``: the
    journal's key columns) as one file per schema and partition (see the module docstring)."""
    out = TableCompaction()
    now = time.time()
    # a file this module did not lay out is left alone
    placed = [(info, place) for info in table_infos(fs, directory)
              if (place := table_file(info.path, directory)) is not None]
    newest: dict[tuple[str, str], float] = {}
    for info, place in placed:
        if info.base_name.startswith(f"{WRITER}-"):
            continue  # a compaction's file, whole when renamed: no task writes in its run
        mtime = info.mtime.timestamp() if info.mtime is not None else now
        newest[place.shape, place.run] = max(newest.get((place.shape, place.run), 0.0), mtime)
    out.window = max(quiet, TABLE_QUIET_SECONDS)
    busy = {key for key, t in newest.items() if now - t < out.window}
    shapes: dict[str, dict[str, list[pafs.FileInfo]]] = {}
    runs: dict[str, set[str]] = {}
    for info, place in placed:
        if (place.shape, place.run) in busy:
            out.busy += 1
        else:
            shapes.setdefault(place.shape, {}).setdefault(place.partition, []).append(info)
            runs.setdefault(place.shape, set()).add(place.run)
    emptied: set[str] = set()
    for shape, groups in sorted(shapes.items()):
        if all(len(files) == 1 for files in groups.values()):
            continue  # already one file per partition
        # every partition of the schema goes into one new run folder, named by the earliest run it
        # replaces: its life overlaps all of theirs (see the module docstring)
        run = f"{min(runs[shape]).split('-', 1)[0]}-{uuid.uuid4().hex[:8]}"  # run names: <13-digit ms>-<hex>
        for partition, files in sorted(groups.items()):
            _rewrite(fs, directory, f"{shape}/{run}/{partition}", files, keys)
            out.written += 1
            for info in files:  # every one was read whole into the new file
                try:
                    fs.delete_file(info.path)
                except FileNotFoundError:
                    pass
            out.removed += len(files)
            emptied.update(info.path.rsplit("/", 1)[0] for info in files)
    _remove_empty(fs, directory, emptied)
    return out


def _rewrite(fs: pafs.FileSystem, directory: str, under: str, files: list[pafs.FileInfo], keys: int) -> None:
    """``files`` (one partition of one schema) read in path order as one file in the folder
    ``under`` of the table ``directory``, durable when this returns: ``compact-<ms>-<random>~0.parquet``."""
    repeat = may_repeat_keys(files, directory)
    folder = f"{directory}/{under}"
    name = f"{WRITER}-{time.time_ns() // 1_000_000:013d}-{uuid.uuid4().hex[:8]}~0.parquet"
    fs.create_dir(folder, recursive=True)
    hidden = f"{folder}/.{name}"
    seen: set[tuple[Any, ...]] = set()
    try:
        with fs.open_output_stream(hidden) as sink:
            writer: pq.ParquetWriter | None = None
            try:
                for info in sorted(files, key=lambda i: i.path):
                    table = pq.read_table(info.path, filesystem=fs)
                    if writer is None:
                        writer = pq.ParquetWriter(sink, table.schema, **write_options(table.schema))
                    elif not table.schema.equals(writer.schema, check_metadata=True):
                        raise JournalStoreError(
                            f"table file {info.path} does not have the schema of the other files of its partition "
                            f"(columns, types or output names): nothing of partition {folder.rsplit('/', 1)[-1]} "
                            "was changed; move that file away and compact again")
                    writer.write_table(_first_answers(table, keys, seen) if repeat else table)
            finally:
                if writer is not None:
                    writer.close()
    except BaseException:
        fs.delete_file(hidden)
        raise
    fs.move(hidden, f"{folder}/{name}")  # a reader sees the whole file or none


def _first_answers(table: pa.Table, keys: int, seen: set[tuple[Any, ...]]) -> pa.Table:
    """The rows of ``table`` whose key no earlier file answered (``seen``: the keys of the files
    before it, to which this file's keys are added)."""
    values = list(zip(*[table.column(key_column(i)).to_pylist() for i in range(keys)]))
    keep = [v not in seen for v in values]
    seen.update(values)
    return table if all(keep) else table.filter(pa.array(keep, pa.bool_()))


def _remove_empty(fs: pafs.FileSystem, directory: str, folders: set[str]) -> None:
    """Delete the partition and run folders compaction emptied (every run lists them otherwise)."""
    for folder in sorted(folders, reverse=True):
        for path in (folder, folder.rsplit("/", 1)[0]):
            if not path.startswith(directory + "/"):
                continue
            try:
                if not list(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))):
                    fs.delete_dir(path)
            except OSError:
                pass  # only tidiness: an empty folder reads as nothing
