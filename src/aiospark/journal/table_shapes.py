"""Which of the table's schema folders answer a declared output schema.

The table keeps one folder per exact output schema (``table/<shape>``: names, types and NOT NULLs,
:mod:`aiospark.journal.table`). Two schemas that differ in nullability alone ask one question
(the manifest's schema text has no NOT NULL), and they often differ for no reason of the user's:
a schema copied from the input (``df.schema.add(...)``) takes the nullability Spark infers from
how the DataFrame was made (``spark.range`` NOT NULL, the same rows read from Parquet nullable).
So a reader takes, besides its own folder's files, those of a sibling folder whose outputs have
the same names and types, nullability aside, when each file's answers fit the reader's schema:

* where the reader's schema has no NOT NULL anywhere, every such file fits;
* otherwise a file fits when its Parquet statistics count no NULL in any leaf of a column the
  reader declares NOT NULL or holding a NOT NULL field. That is conservative: a NULL of a
  nullable part of such a column, an empty list, or a call that gave no row (its outputs are
  NULL) makes the file not fit, and its keys are asked again, as before this module.

The statistics are read from each sibling file's footer (no data); the own folder is never checked
(its files were converted with this very schema). Files are returned in path order across
folders: every reader keeps the first answer of a key in that order.

Example::

    found = fitting_files(fs, "/data/j/<digest>/table", TableShape("1a2b...", outputs))
    found.paths, found.mixed      # the files to read; True: several folders, keys may repeat
"""
from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .table import OUTPUT_NAMES, OUTPUT_PREFIX, table_file, table_infos

__all__ = ["Fitting", "TableShape", "fitting_files"]


@dataclasses.dataclass(frozen=True)
class TableShape:
    """A declared output schema's table folder (``folder``: its name) and the schema as Arrow,
    NOT NULLs kept (``outputs``)."""

    folder: str
    outputs: pa.Schema


@dataclasses.dataclass
class Fitting:
    """What :func:`fitting_files` found: the files, in path order, and whether they come from more
    than one folder (then two folders may answer one key: a reader keeps the first)."""

    infos: list[pafs.FileInfo]
    mixed: bool

    @property
    def paths(self) -> list[str]:
        return [info.path for info in self.infos]


def fitting_files(fs: pafs.FileSystem, table: str, shape: TableShape) -> Fitting:
    """The table files (under ``table``, a digest's ``table`` folder) whose answers fit ``shape``
    (see the module docstring)."""
    strict = [f"{OUTPUT_PREFIX}{j}" for j, field in enumerate(shape.outputs) if _strict(field)]
    names = shape.outputs.names
    found, folders = [], set()
    for info in table_infos(fs, table):
        place = table_file(info.path)
        assert place is not None  # table_infos keeps only these
        if place.shape != shape.folder and not _fits(fs, info.path, shape.outputs, names, strict):
            continue
        found.append(info)
        folders.add(place.shape)
    return Fitting(found, len(folders) > 1)


def _fits(fs: pafs.FileSystem, path: str, outputs: pa.Schema, names: list[str], strict: list[str]) -> bool:
    """Whether the file of another schema folder at ``path`` answers ``outputs``."""
    try:
        meta = pq.read_metadata(path, filesystem=fs)
        stored = meta.schema.to_arrow_schema()
        if json.loads((stored.metadata or {}).get(OUTPUT_NAMES, b"null")) != names:
            return False
    except (OSError, ValueError, pa.ArrowException):
        return False  # gone, or not a file this version can read: not served, asked again
    for j, field in enumerate(outputs):
        column = f"{OUTPUT_PREFIX}{j}"
        index = stored.get_field_index(column)
        if index < 0 or not _same_but_nulls(stored.field(index).type, field.type):
            return False
    if not strict:
        return True
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
