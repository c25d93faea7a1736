"""Which of the table's schema folders answer a declared output schema.

The table keeps one folder per exact output schema (``table/<shape>``: names, types and NOT NULLs,
:mod:`aiospark.journal.table`). Two schemas that differ in nullability alone ask one question
(the manifest's schema text has no NOT NULL), and they often differ for no reason of the user's:
a schema copied from the input (``df.schema.add(...)``) takes the nullability Spark infers from
how the DataFrame was made (``spark.range`` NOT NULL, the same rows read from Parquet nullable).
So a reader takes, besides its own folder's files, those of a sibling folder whose outputs have
the same names and types, nullability aside, and serves each of their calls whose answer fits the
reader's schema (no NULL under one of its NOT NULLs, at any depth); a call that does not fit is
asked again. Most files need no look at their rows: where the reader's schema has no NOT NULL,
or where the file's Parquet statistics (its footer) count no NULL in any leaf of a column holding
a NOT NULL, every call fits. Only the other files (:attr:`Fitting.checked`) are checked a call at
a time: by the readers in Python (:meth:`Fitting.misfits`), by the table route's join in Spark.

The own folder is never checked (its files were converted with this very schema). Files are
returned in path order across folders: every reader keeps the first answer of a key in that
order.

Example::

    found = fitting_files(fs, "/data/j/<digest>/table", TableShape("1a2b...", outputs))
    found.paths, found.mixed      # the files to read; True: several folders, keys may repeat
    found.checked                 # those whose calls are served only where they fit
    read_table_outcomes(fs, found.paths, key, misfits=found.misfits)
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .errors import JournalStoreError
from .table import N_COLUMN, NO_ROW, OUTPUT_NAMES, OUTPUT_PREFIX, table_file, table_infos

__all__ = ["Fitting", "TableShape", "fitting_files"]


@dataclasses.dataclass(frozen=True)
class TableShape:
    """A declared output schema's table folder (``folder``: its name) and the schema as Arrow,
    NOT NULLs kept (``outputs``)."""

    folder: str
    outputs: pa.Schema


@dataclasses.dataclass
class Fitting:
    """What :func:`fitting_files` found: the files, in path order, whether they come from more
    than one folder (then two folders may answer one key: a reader keeps the first), and those
    whose calls must be checked one at a time."""

    infos: list[pafs.FileInfo]
    mixed: bool
    checked: set[str]
    outputs: pa.Schema

    @property
    def paths(self) -> list[str]:
        return [info.path for info in self.infos]

    def misfits(self, path: str, table: pa.Table) -> pa.Array | None:
        """Which rows of the file ``path`` (read as ``table``) belong to calls whose answer does not
        fit (``read_table_outcomes(misfits=...)``); None where every call fits."""
        if path not in self.checked:
            return None
        bad = pa.array(np.zeros(table.num_rows, dtype=bool))
        for j, field in enumerate(self.outputs):
            if _strict(field):
                bad = pc.or_(bad, _nulls_under(table.column(f"{OUTPUT_PREFIX}{j}").combine_chunks(), field))
        return pc.and_(bad, pc.not_equal(table.column(N_COLUMN), NO_ROW))  # a call with no row fits


def fitting_files(fs: pafs.FileSystem, table: str, shape: TableShape) -> Fitting:
    """The table files (under ``table``, a digest's ``table`` folder) whose answers fit ``shape``
    (see the module docstring)."""
    strict = [f"{OUTPUT_PREFIX}{j}" for j, field in enumerate(shape.outputs) if _strict(field)]
    names = shape.outputs.names
    found, folders, checked = [], set(), set()
    for info in table_infos(fs, table):
        place = table_file(info.path, table)
        assert place is not None  # table_infos keeps only these
        if place.shape != shape.folder:
            fit = _fits(fs, info.path, shape.outputs, names, strict)
            if fit is None:
                continue
            if not fit:
                checked.add(info.path)
        found.append(info)
        folders.add(place.shape)
    return Fitting(found, len(folders) > 1, checked, shape.outputs)


def _fits(fs: pafs.FileSystem, path: str, outputs: pa.Schema, names: list[str], strict: list[str]) -> bool | None:
    """Whether every call of the file of another schema folder at ``path`` answers ``outputs``:
    True; False: some may not (its calls are checked one at a time); None: none does (other
    names or types)."""
    try:
        meta = pq.read_metadata(path, filesystem=fs)
    except FileNotFoundError:
        return None  # compacted since the listing, as read_table_outcomes skips it
    except (OSError, ValueError, pa.ArrowException) as exc:
        # a store's error is an error, never a miss that pays its keys again (the own folder's
        # files fail the join or the read the same way)
        raise JournalStoreError(f"cannot read the footer of table file {path}: {exc}; if it is not the "
                                "journal's, move it out of the journal's folder") from exc
    stored = meta.schema.to_arrow_schema()
    if json.loads((stored.metadata or {}).get(OUTPUT_NAMES, b"null")) != names:
        return None
    for j, field in enumerate(outputs):
        column = f"{OUTPUT_PREFIX}{j}"
        index = stored.get_field_index(column)
        if index < 0 or not _same_but_nulls(stored.field(index).type, field.type):
            return None
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema.split(".", 1)[0] not in strict or chunk.num_values == 0:
                continue
            stats = chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                return False
    return True


def _nulls_under(array: pa.Array, field: pa.Field) -> pa.Array:
    """Per value of ``array`` (of ``field``): whether it holds a NULL where ``field`` says NOT NULL."""
    bad = pc.is_null(array) if not field.nullable else pa.array(np.zeros(len(array), dtype=bool))
    t = field.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            if _strict(t.field(i)):  # a field of a NULL struct is no value
                bad = pc.or_(bad, pc.and_(_nulls_under(array.field(i), t.field(i)), pc.is_valid(array)))
    elif _children(t) and _strict(_children(t)[0]):  # a list or a map: its elements, by their row
        offsets = array.offsets.to_numpy(zero_copy_only=False)
        values = (array.items if pa.types.is_map(t) else array.values).slice(offsets[0], offsets[-1] - offsets[0])
        inner = _nulls_under(values, _children(t)[0]).to_numpy(zero_copy_only=False)
        rows = np.repeat(np.arange(len(array)), np.diff(offsets))[inner]  # a NULL list holds no element
        mask = np.zeros(len(array), dtype=bool)
        mask[rows] = True
        bad = pc.or_(bad, pa.array(mask))
    return bad


def _strict(field: pa.Field) -> bool:
    """Whether a NULL anywhere in a value of ``field`` may break a NOT NULL of it."""
    return not field.nullable or any(_strict(child) for child in _children(field.type))


def _children(t: pa.DataType) -> list[pa.Field]:
    """The declared parts of a nested type (a map's keys are never NULL: not a declaration)."""
    if pa.types.is_map(t):
        return [t.item_field]
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    return []


def _same_but_nulls(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether two types are one but for the nullability of their parts (names and order kept)."""
    if pa.types.is_map(a) or pa.types.is_map(b):
        return (pa.types.is_map(a) and pa.types.is_map(b) and _same_but_nulls(a.key_type, b.key_type)
                and _same_but_nulls(a.item_type, b.item_type))
    if pa.types.is_struct(a) or pa.types.is_struct(b):
        return (pa.types.is_struct(a) and pa.types.is_struct(b) and a.num_fields == b.num_fields
                and all(a.field(i).name == b.field(i).name and _same_but_nulls(a.field(i).type, b.field(i).type)
                        for i in range(a.num_fields)))
    for kind in (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list):
        if kind(a) or kind(b):
            return (kind(a) and kind(b) and getattr(a, "list_size", None) == getattr(b, "list_size", None)
                    and _same_but_nulls(a.value_type, b.value_type))
    return bool(a == b)
