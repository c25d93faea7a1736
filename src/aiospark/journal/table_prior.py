"""What earlier attempts of a table-route task recorded, read in key order a window at a time.

A retried task (or a second use of one DataFrame in a plan) finds what its earlier attempts wrote
in its folder of the table (:mod:`aiospark.journal.table`). Loading all of it would cost memory in
proportion to what they recorded (about 470 MiB per million outcomes as Python objects). But the
task's input arrives sorted by key (the route sorts it). So each file (one flush of calls, in the
order they ended) is read whole as Arrow, closed, and sorted in that order (:func:`sort_table`:
the retry pays for the order, not every write), and the files are merged, a few hundred rows of
each made Python objects at once; the task asks for the outcomes of its keys one input batch at
a time:
:meth:`PriorOutcomes.upto` returns those of every key up to the batch's last one, and the task
forgets a window once its keys are behind it.

The order is Spark's ascending sort of the join columns (``spark/table_route.py``): each key
column, or for the default key (NULL is a value) ``coalesce(key, filler)`` then ``isnull(key)``;
NULL first. Python orders the values of the route's key types (integers, strings by code point,
bytes, dates, decimals, booleans) as Spark and Arrow order them, so a sort key is a tuple of
``(0,)`` for NULL or ``(1, value)``.

Example::

    prior = PriorOutcomes(fs, paths, ["id"], nulls=False)
    found = prior.upto(sort_key([41_000]))      # identity -> results of keys <= 41000
"""
from __future__ import annotations

import datetime as dt
import decimal
import heapq
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .identity import RowIdentity
from .table import N_COLUMN, NO_ROW, OUTPUT_NAMES, key_column, output_column

__all__ = ["PriorOutcomes", "SortKey", "filler", "sort_key", "sort_table"]

SortKey = tuple[tuple[Any, ...], ...]

#: rows of each file made Python objects at once while merging
_CHUNK = 256


def filler(value_type: pa.DataType) -> Any:
    """The value the route's join puts in place of NULL (``coalesce``) for a key of this type."""
    if pa.types.is_boolean(value_type):
        return False
    if pa.types.is_date(value_type):
        return dt.date(1970, 1, 1)
    if pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
        return ""
    if pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type):
        return b""
    if pa.types.is_decimal(value_type):
        return decimal.Decimal(0)
    return 0


def sort_key(values: Sequence[Any]) -> SortKey:
    """The order of join-column values (NULL first), as Python compares it."""
    return tuple((0,) if v is None else (1, v) for v in values)


def _stored_sort_key(values: Sequence[Any], fillers: Sequence[Any], nulls: bool) -> SortKey:
    if not nulls:
        return sort_key(values)
    joined: list[Any] = []
    for value, fill in zip(values, fillers):
        joined += [fill if value is None else value, value is None]
    return sort_key(joined)


def sort_table(table: pa.Table, keys: int, nulls: bool) -> pa.Table:
    """``table`` (a flush of the table route: key columns, :data:`N_COLUMN`, outputs) sorted in
    the order the route's tasks read their input in."""
    columns: list[pa.Array] = []
    for i in range(keys):
        column = table.column(key_column(i))
        if nulls:
            columns += [pc.coalesce(column, pa.scalar(filler(column.type), column.type)), pc.is_null(column)]
        else:
            columns.append(column)
    columns.append(table.column(N_COLUMN))
    names = [f"s{i}" for i in range(len(columns))]
    # no NULL among them: a stored key is NULL only where NULLs are values, and then coalesced
    order = pc.sort_indices(pa.table(columns, names=names), sort_keys=[(n, "ascending") for n in names])
    return table.take(order)


class PriorOutcomes:
    """The outcomes in table files ``paths`` (each sorted by :func:`sort_table` as read), merged in key
    order and handed out a window at a time (:meth:`upto`). Where two files recorded one key
    (two attempts that overlapped), the first file's answer stands."""

    def __init__(self, fs: pafs.FileSystem, paths: Sequence[str], key: Sequence[str], nulls: bool):
        self.identify = RowIdentity(key)
        self.nulls = nulls
        self.keys = len(key)
        self._merged = heapq.merge(*[self._rows(fs, path, n) for n, path in enumerate(paths)],
                                   key=lambda row: row[0])
        self._head: Any = next(self._merged, None)

    def _rows(self, fs: pafs.FileSystem, path: str, file: int) -> Iterator[tuple[SortKey, int, Any, int, Any]]:
        """``(sort key, file, key values, result index, output row)`` of one file, in its order."""
        try:
            # read whole and closed: a long task leaves thousands of files, more than a process
            # may hold open; as Arrow a file is a fraction of the Python objects it becomes
            table = sort_table(pq.read_table(path, filesystem=fs), self.keys, self.nulls)
        except FileNotFoundError:  # removed since it was listed: its keys count as not recorded
            return
        names = json.loads((table.schema.metadata or {})[OUTPUT_NAMES])
        key_columns = [key_column(i) for i in range(self.keys)]
        fillers = [filler(table.schema.field(c).type) for c in key_columns]
        outputs = [output_column(j) for j in range(len(names))]
        for batch in table.to_batches(max_chunksize=_CHUNK):
            keys = zip(*[batch.column(c).to_pylist() for c in key_columns])
            rows = batch.select(outputs).rename_columns(names).to_pylist(maps_as_pydicts="strict")
            for values, n, row in zip(keys, batch.column(N_COLUMN).to_pylist(), rows):
                yield _stored_sort_key(values, fillers, self.nulls), file, values, n, row

    def upto(self, last: SortKey) -> dict[str, tuple[list[Any], None]]:
        """identity -> (results, None) of every key not handed out yet whose sort key is at most
        ``last``."""
        found: dict[str, tuple[list[Any], None]] = {}
        owner: dict[str, int] = {}
        head, merged = self._head, self._merged
        while head is not None and head[0] <= last:
            _, file, values, n, row = head
            identity = self.identify(dict(zip(self.identify.columns, values)))
            assert identity is not None  # a stored key is never NULL unless NULLs are values
            if owner.setdefault(identity, file) == file:
                results = found.setdefault(identity, ([], None))[0]
                if n != NO_ROW:
                    results.append(row)
            head = next(merged, None)
        self._head = head
        return found
