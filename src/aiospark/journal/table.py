"""A journal's results as a table Spark reads: typed Parquet files beside the bucket segments.

The table route of ``unordered_wait`` (:mod:`aiospark.spark.table_route`) serves recorded rows
with a Spark join, no Python: so their results are kept as the output's own typed columns, one
Parquet file per flush of a task attempt, under
``<location>/<digest>/table/<shape>/<run>/<partition>/`` (``<shape>``: the exact output schema,
NOT NULLs and names included; ``<run>``: one definition of the DataFrame, named by when it was
defined; ``<partition>``: the hash partition of the keys it holds, where a retried task finds
what its earlier attempts wrote). A file is written under a hidden name and renamed when whole, so
a reader (Spark lists files, skipping names that start with ``.`` or ``_``) never sees half a file.

Columns: the key columns as ``_aiospark_k0``, ``_aiospark_k1``, ... (typed as the input's: the
join's side; readers that are not Spark -- every other entry point, ``aiospark.plan`` -- make a
row's identity of them, as the operator does of the input row's), :data:`N_COLUMN` (the result's
index in the call's list of results; ``-1`` on the one row of a call that gave no row), then the
declared output columns by position (``_aiospark_o0``, ...; their names in the file's metadata).
Only results are kept here; a kept error goes to the bucket segments, as every entry point keeps
it.

Example::

    writer = TableWriter(fs, table_dir(top) + "/" + shape, run="1795986798487-dc66199a", partition=3,
                         attempt="5.41")
    writer.write(table)                        # one file, durable when this returns
    found = read_table_outcomes(fs, table_files(fs, table_dir(top)), ["id"])   # identity -> (results, None)
"""
from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .identity import RowIdentity
from .listing import listing

__all__ = ["KEY_PREFIX", "N_COLUMN", "NO_ROW", "OUTPUT_NAMES", "OUTPUT_PREFIX", "OVERLAP_MARGIN", "FILE_NAME", "RUN_NAME", "TABLE", "TableFile", "TableWriter", "write_options",
           "key_column", "output_column",
           "may_repeat_keys", "new_run", "table_file", "read_table_outcomes", "table_dir", "table_files", "table_infos", "table_listing"]

#: the folder of a question's table, under its digest
TABLE = "table"
#: a result's index among its call's results; NO_ROW marks a call that gave no row
N_COLUMN = "_aiospark_n"
NO_ROW = -1
#: key column i is stored as KEY_PREFIX + str(i): an output column may have a key's name
KEY_PREFIX = "_aiospark_k"
#: output column j is stored as OUTPUT_PREFIX + str(j), its name in the file's metadata under
#: OUTPUT_NAMES (JSON): Spark matches Parquet columns by name, folding case by default
OUTPUT_PREFIX = "_aiospark_o"
OUTPUT_NAMES = b"aiospark.output_names"


#: seconds of clock slack when telling whether two writers' lives overlapped (see may_repeat_keys)
OVERLAP_MARGIN = 5.0
#: a run folder's name (:func:`new_run`)
RUN_NAME = re.compile(r"(\d{13})-[0-9a-f]{8}")
#: a table file's name (:class:`TableWriter`, compaction): ``<writer>-<ms>-<random>~<n>.parquet``
FILE_NAME = re.compile(r"(.+-(\d{13})-[0-9a-f]{8})~\d+\.parquet")
#: a question's digest (:attr:`Manifest.digest`) and a schema folder's name: 16 hex digits
HEX16 = re.compile(r"[0-9a-f]{16}")


class TableFile(NamedTuple):
    """Where a table file sits in its table: ``<shape>/<run>/<partition>/<name>``."""

    shape: str
    run: str
    partition: str
    #: the attempt that wrote it (``<attempt>-<ms>-<random>``: one writer per task attempt)
    writer: str
    #: when the run was defined and when the writer started (seconds since the epoch)
    run_start: float
    writer_start: float


def table_file(path: str, table: str) -> TableFile | None:
    """The place of a file laid out and named as aiospark writes the table ``table`` (a digest's
    ``table`` folder): ``<table>/<shape>/<run>/<partition>/<name>`` (:func:`new_run`,
    :class:`TableWriter`); None for any other file, such as a user's copy of a folder at another
    depth or under another name."""
    if not path.startswith(table + "/"):
        return None
    parts = path[len(table) + 1:].split("/")
    if len(parts) != 4 or not HEX16.fullmatch(parts[0]) or not parts[2].isdigit() or str(int(parts[2])) != parts[2]:
        return None
    run, name = RUN_NAME.fullmatch(parts[1]), FILE_NAME.fullmatch(parts[3])
    if run is None or name is None:
        return None
    return TableFile(parts[0], parts[1], parts[2], name.group(1), int(run.group(1)) / 1000, int(name.group(2)) / 1000)


def write_options(schema: pa.Schema) -> dict[str, Any]:
    """How a table file is written (``pq.write_table``/``ParquetWriter`` keywords): snappy, and
    Parquet's dictionary encoding only where it may pay.

    - Not the key columns, which a run records once each: a dictionary of distinct values only
      costs (500k rows of distinct LONG keys: 0.057 s a file with it, 0.039 s without, and a
      smaller file).
    - An output column's dictionary is given up for plain encoding past 32 KiB: a column of few
      distinct values (a label) keeps it, one of distinct values (an id, a text) stops paying
      early (50k distinct LONG outputs a file: 174 ns a row with Parquet's default 1 MiB, 86 ns
      with 32 KiB, and 12.3 bytes a row instead of 16).

    The statistics readers rely on (``journal/table_shapes.py``) are written either way."""
    return {"compression": "snappy", "use_dictionary": [n for n in schema.names if not n.startswith(KEY_PREFIX)],
            "dictionary_pagesize_limit": 32 * 1024}


def key_column(i: int) -> str:
    return f"{KEY_PREFIX}{i}"


def output_column(j: int) -> str:
    """Output column j as stored (its name is in the file's :data:`OUTPUT_NAMES` metadata)."""
    return f"{OUTPUT_PREFIX}{j}"


def table_dir(top: str) -> str:
    """The table's folder (``top``: ``<location>/<digest>``)."""
    return f"{top}/{TABLE}"


def table_listing(fs: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    """Every whole Parquet file under ``directory``, aiospark's or not (sorted by path; none when
    it does not exist): what ``aiospark journal`` counts."""
    return sorted((info for info in listing(fs, directory, recursive=True)
                   if info.type == pafs.FileType.File and info.path.endswith(".parquet")
                   and not info.path.rsplit("/", 1)[-1].startswith((".", "_"))), key=lambda i: i.path)


def table_infos(fs: pafs.FileSystem, table: str, under: str = "") -> list[pafs.FileInfo]:
    """The files aiospark wrote in the table ``table`` (:func:`table_file`), in its folder
    ``under`` (``<shape>/<run>/<partition>``, or a part of it; all: ""): the only ones read, served
    or compacted; a user's file beside them (a copy, notes) is never opened."""
    listed = table_listing(fs, f"{table}/{under}" if under else table)
    return [info for info in listed if table_file(info.path, table) is not None]


def table_files(fs: pafs.FileSystem, table: str, under: str = "") -> list[str]:
    """The paths of :func:`table_infos`."""
    return [info.path for info in table_infos(fs, table, under)]


def new_run() -> str:
    """A run's folder name: when it was defined (ms) and a random part."""
    return f"{time.time_ns() // 1_000_000:013d}-{uuid.uuid4().hex[:8]}"


def may_repeat_keys(infos: Sequence[pafs.FileInfo], table: str, margin: float = OVERLAP_MARGIN) -> bool:
    """Whether two writers may have recorded one key, so a reader must keep one answer per key.

    A key is written once per run: a run calls only keys its snapshot of the table lacked (taken
    when it was defined), and one task holds all rows of a key, reading at its start what its own
    earlier attempts wrote. So two answers to one key need two writers at once: two runs whose
    lives overlap (from definition to last file), or two attempts of one task that overlap (a
    speculative one, a zombie); sequential reruns and retries never repeat a key. Lives are
    compared with ``margin`` seconds of slack for clocks; a name this module did not make counts
    as a possible repeat (``table``: the table folder of ``infos``)."""
    runs: dict[str, list[float]] = {}
    writers: dict[tuple[str, str, str], list[float]] = {}
    for info in infos:
        place = table_file(info.path, table)
        if place is None or info.mtime_ns is None:
            return True
        mtime = info.mtime_ns / 1e9
        life = runs.setdefault(place.run, [place.run_start, mtime])
        life[1] = max(life[1], mtime)
        own = writers.setdefault((place.run, place.partition, place.writer), [place.writer_start, mtime])
        own[1] = max(own[1], mtime)
    if _overlap(list(runs.values()), margin):
        return True
    tasks: dict[tuple[str, str], list[list[float]]] = {}
    for (run, partition, _), life in writers.items():
        tasks.setdefault((run, partition), []).append(life)
    return any(_overlap(lives, margin) for lives in tasks.values())


def _overlap(lives: list[list[float]], margin: float) -> bool:
    lives = sorted(lives)
    return any(later[0] - margin <= max(e[1] for e in lives[:i + 1])
               for i, later in enumerate(lives[1:]))


class TableWriter:
    """One task attempt's files of the table: one per :meth:`write`, durable when it returns."""

    def __init__(self, fs: pafs.FileSystem, directory: str, run: str, partition: int, attempt: str):
        self.fs = fs
        self.folder = f"{directory}/{run}/{partition}"
        #: the writer's start: readers tell from it whether two writers overlapped (may_repeat_keys)
        self.prefix = f"{attempt}-{time.time_ns() // 1_000_000:013d}-{uuid.uuid4().hex[:8]}"
        self.files = 0
        self._made = False

    def write(self, table: pa.Table) -> None:
        if not self._made:
            self.fs.create_dir(self.folder, recursive=True)
            self._made = True
        name = f"{self.prefix}~{self.files}.parquet"
        hidden = f"{self.folder}/.{name}"
        with self.fs.open_output_stream(hidden) as out:
            pq.write_table(table, out, **write_options(table.schema))
        self.fs.move(hidden, f"{self.folder}/{name}")  # a reader sees the whole file or none
        self.files += 1


def read_table_outcomes(fs: pafs.FileSystem, paths: Sequence[str], key: Sequence[str],
                        misfits: Callable[[str, pa.Table], pa.Array | None] | None = None,
                        ) -> dict[str, tuple[list[Any], None]]:
    """identity -> (results, None) of the table files ``paths`` (``key``: the journal's key
    columns, whose identity each row's stored key values make): each call's results as dicts of
    the output columns, in their order (a call that gave no row: ``[]``). Where two writers
    recorded one identity, the first file read (in path order) stands. ``misfits(path, table)``:
    which rows of a file answer another question (a mask; None: none), whose calls are skipped."""
    identify = RowIdentity(key)  # a stored key is never NULL unless NULLs are values (the default key)
    found: dict[str, tuple[list[Any], None]] = {}
    for path in paths:
        try:
            table = pq.read_table(path, filesystem=fs)
        except FileNotFoundError:
            continue
        keys = table.select([key_column(i) for i in range(len(key))]).rename_columns(list(key)).to_pylist()
        misfit = misfits(path, table) if misfits is not None else None
        skip = set() if misfit is None else {identify(keys[i]) for i in pc.indices_nonzero(misfit).to_pylist()}
        names = json.loads((table.schema.metadata or {})[OUTPUT_NAMES])
        ns = table.column(N_COLUMN).to_pylist()
        outputs = table.select([output_column(j) for j in range(len(names))]).rename_columns(names)
        rows = outputs.to_pylist(maps_as_pydicts="strict")
        mine: dict[str, list[Any]] = {}
        for values, n, row in zip(keys, ns, rows):
            identity = identify(values)
            assert identity is not None
            results = mine.get(identity)
            if results is None:
                if identity in found or identity in skip:
                    continue  # an earlier file's answer to the same question stands, or none fits
                results = mine[identity] = []
            if n != NO_ROW:
                results.append(row)
        for identity, results in mine.items():
            found[identity] = (results, None)
    return found
