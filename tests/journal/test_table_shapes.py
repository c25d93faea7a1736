"""Which schema folders answer a declared schema (journal/table_shapes.py), without Spark: another
folder's file is read only when its outputs have the same names and types, nullability aside, and
its statistics show no NULL where the reader declares NOT NULL."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from aiospark.journal.errors import JournalStoreError
from aiospark.journal.table import (
    N_COLUMN,
    NO_ROW,
    OUTPUT_NAMES,
    TableWriter,
    key_column,
    new_run,
    output_column,
    read_table_outcomes,
)
from aiospark.journal.table_shapes import TableShape, _fits, fitting_files

DIGEST, OWN, OTHER = "0123456789abcdef", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"


def write(fs, table_dir: str, shape: str, outputs: pa.Schema, rows: list[dict], numbers=None) -> str:
    """One table file of ``outputs`` (keys 0, 1, ...) in the folder ``shape``; its path."""
    columns = [pa.array(list(range(len(rows))), pa.int64()), pa.array(numbers or [0] * len(rows), pa.int32())]
    columns += [pa.array([r[f.name] for r in rows], f.type) for f in outputs]
    names = [key_column(0), N_COLUMN, *[output_column(j) for j in range(len(outputs))]]
    writer = TableWriter(fs, f"{table_dir}/{shape}", new_run(), 0, "1.0")
    writer.write(pa.Table.from_arrays(columns, names=names,
                                      metadata={OUTPUT_NAMES: json.dumps(outputs.names)}))
    return f"{writer.folder}/{writer.prefix}~0.parquet"


@pytest.fixture
def table(tmp_path):
    return pafs.LocalFileSystem(), str(tmp_path / DIGEST / "table")


def found(fs, table_dir, outputs):
    return [p.rsplit("/", 4)[-4] for p in fitting_files(fs, table_dir, TableShape(OWN, outputs)).paths]


def test_a_nullable_reader_takes_every_file_of_the_same_names_and_types(table):
    fs, table_dir = table
    strict = pa.schema([pa.field("v", pa.string(), False)])
    write(fs, table_dir, OWN, pa.schema([pa.field("v", pa.string())]), [{"v": None}])
    write(fs, table_dir, OTHER, strict, [{"v": "a"}])
    write(fs, table_dir, "cccccccccccccccc", pa.schema([pa.field("v", pa.int64())]), [{"v": 1}])
    write(fs, table_dir, "dddddddddddddddd", pa.schema([pa.field("V", pa.string())]), [{"V": "a"}])
    assert found(fs, table_dir, pa.schema([pa.field("v", pa.string())])) == [OWN, OTHER]
    assert fitting_files(fs, table_dir, TableShape(OWN, pa.schema([pa.field("v", pa.string())]))).mixed


def served(fs, table_dir, outputs) -> dict[str, list]:
    """The calls each reader serves, by identity (``read_table_outcomes`` with the misfits)."""
    found = fitting_files(fs, table_dir, TableShape(OWN, outputs))
    return {i: r for i, (r, _) in read_table_outcomes(fs, found.paths, ["k"], misfits=found.misfits).items()}


def test_a_not_null_reader_is_served_each_call_of_another_folder_that_fits(table):
    fs, table_dir = table
    lax = pa.schema([pa.field("v", pa.string()), pa.field("n", pa.int64())])
    clean = write(fs, table_dir, OTHER, lax, [{"v": "a", "n": None}])      # n is nullable here: fits
    mixed = write(fs, table_dir, OTHER, lax, [{"v": "b", "n": 1}, {"v": None, "n": 1}, {"v": None, "n": None}],
                  numbers=[0, 0, NO_ROW])  # key 1 answered NULL under v; key 2 gave no row
    strict = pa.schema([pa.field("v", pa.string(), False), pa.field("n", pa.int64())])
    found = fitting_files(fs, table_dir, TableShape(OWN, strict))
    assert found.paths == sorted([clean, mixed]) and found.checked == {mixed}, "statistics spare the clean file"
    assert served(fs, table_dir, strict) == {"[0]": [{"v": "a", "n": None}], "[2]": []}  # key 0: the first file's
    assert len(served(fs, table_dir, lax)) == 3


def test_nested_not_nulls_are_checked_at_every_depth(table):
    fs, table_dir = table
    lax_items = pa.struct([pa.field("x", pa.int64()), pa.field("tags", pa.list_(pa.field("element", pa.string())))])
    lax = pa.schema([pa.field("s", lax_items), pa.field("m", pa.map_(pa.string(), pa.int64()))])
    write(fs, table_dir, OTHER, lax, [
        {"s": {"x": 1, "tags": ["a"]}, "m": [("a", 1)]},
        {"s": {"x": None, "tags": ["a"]}, "m": []},      # x NULL
        {"s": {"x": 1, "tags": []}, "m": [("b", None)]},  # a map value NULL
        {"s": {"x": 1, "tags": [None]}, "m": None},      # an element NULL
        {"s": None, "m": None},                           # a NULL struct: its x is no value
    ])
    items = pa.struct([pa.field("x", pa.int64(), False),
                       pa.field("tags", pa.list_(pa.field("element", pa.string(), False)))])
    strict = pa.schema([pa.field("s", items), pa.field("m", pa.map_(pa.string(), pa.field("value", pa.int64(), False)))])
    assert sorted(served(fs, table_dir, strict)) == ["[0]", "[4]"]
    assert len(served(fs, table_dir, lax)) == 5


def test_an_unreadable_file_of_another_folder_is_an_error_and_a_vanished_one_is_skipped(table):
    """A store's error is never a miss that pays its keys again; a file compaction removed since
    the listing is skipped, as the own folder's readers skip it."""
    fs, table_dir = table
    path = write(fs, table_dir, OTHER, pa.schema([pa.field("v", pa.string())]), [{"v": "a"}])
    with open(path, "wb") as out:
        out.write(b"not parquet")
    with pytest.raises(JournalStoreError, match="cannot read the footer of table file .*move it out"):
        fitting_files(fs, table_dir, TableShape(OWN, pa.schema([pa.field("v", pa.string(), False)])))
    os.remove(path)
    assert _fits(fs, path, pa.schema([pa.field("v", pa.string())]), ["v"], []) is None
