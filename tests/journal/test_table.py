"""The table route's files without Spark (journal/table.py): when readers must keep one answer
per key, and a file that vanishes between listing and reading."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from aiospark.journal.table import (
    N_COLUMN,
    NO_ROW,
    OUTPUT_NAMES,
    TableWriter,
    key_column,
    may_repeat_keys,
    output_column,
    read_table_outcomes,
    table_files,
)

RUN_A = "1795986798000-0000000a"   # defined at t = 1795986798.0 s
RUN_B = "1795986900000-0000000b"   # defined 102 s later


TABLE = "/j/0123456789abcdef/table"


def info(run: str, partition: int, writer_ms: int, mtime_s: float, n: int = 0, name: str | None = None):
    name = name or f"5.{partition}-{writer_ms:013d}-0000abcd~{n}.parquet"
    return pafs.FileInfo(f"/j/0123456789abcdef/table/fedcba9876543210/{run}/{partition}/{name}", pafs.FileType.File,
                         mtime_ns=int(mtime_s * 1e9), size=10)


def test_sequential_runs_and_retries_never_repeat_a_key():
    files = [info(RUN_A, 0, 1795986798100, 1795986801.0), info(RUN_A, 0, 1795986798100, 1795986805.0, n=1),
             info(RUN_A, 1, 1795986798200, 1795986803.0),
             # the retry of task 1 starts after its first attempt's last file
             info(RUN_A, 1, 1795986820000, 1795986822.0),
             # the next run is defined after every file of the first
             info(RUN_B, 0, 1795986900100, 1795986903.0)]
    assert may_repeat_keys(files, TABLE) is False


def test_overlapping_runs_or_attempts_may_repeat_keys():
    # run B was defined while run A still wrote (its snapshot missed A's later files)
    assert may_repeat_keys([info(RUN_A, 0, 1795986798100, 1795986950.0),
                            info(RUN_B, 0, 1795986900100, 1795986903.0)], TABLE) is True
    # two attempts of one task wrote at once (a speculative copy)
    assert may_repeat_keys([info(RUN_A, 0, 1795986798100, 1795986830.0),
                            info(RUN_A, 0, 1795986810000, 1795986812.0)], TABLE) is True
    # two tasks of one run at once are fine: they hold different keys
    assert may_repeat_keys([info(RUN_A, 0, 1795986798100, 1795986830.0),
                            info(RUN_A, 1, 1795986798100, 1795986830.0)], TABLE) is False


@pytest.mark.parametrize("name", ["part-00000.parquet", "5.0-notatime-0000abcd~0.parquet", "x~0.parquet"])
def test_a_file_this_module_did_not_name_counts_as_a_possible_repeat(name):
    assert may_repeat_keys([info(RUN_A, 0, 1795986798100, 1795986801.0, name=name)], TABLE) is True
    foreign_run = pafs.FileInfo("/j/0123456789abcdef/table/fedcba9876543210/some-run/0/5.0-1795986798100-0000abcd~0.parquet",
                                pafs.FileType.File, mtime_ns=1, size=1)
    assert may_repeat_keys([foreign_run], TABLE) is True


def one_call_table(key: int, value: str) -> pa.Table:
    return pa.Table.from_arrays([pa.array([key], pa.int64()), pa.array([0], pa.int32()), pa.array([value])],
                                names=[key_column(0), N_COLUMN, output_column(0)],
                                metadata={OUTPUT_NAMES: json.dumps(["v"])})


def test_a_file_that_vanishes_after_listing_is_skipped_and_its_keys_are_not_recorded(tmp_path):
    fs = pafs.LocalFileSystem()
    writer = TableWriter(fs, str(tmp_path / "0123456789abcdef" / "table" / "fedcba9876543210"), run=RUN_A, partition=0, attempt="1.1")
    writer.write(one_call_table(1, "a"))
    writer.write(one_call_table(2, "b"))
    paths = table_files(fs, str(tmp_path / "0123456789abcdef" / "table"))
    assert len(paths) == 2
    fs.delete_file(paths[1])  # compacted or removed by its owner between the listing and the read
    found = read_table_outcomes(fs, paths, ["k"])
    assert [results for results, _ in found.values()] == [[{"v": "a"}]]  # key 2: not recorded, called again


def test_the_first_file_read_stands_and_a_call_without_rows_is_recorded_as_none(tmp_path):
    fs = pafs.LocalFileSystem()
    writer = TableWriter(fs, str(tmp_path / "0123456789abcdef" / "table" / "fedcba9876543210"), run=RUN_A, partition=0, attempt="1.1")
    writer.write(one_call_table(1, "first"))
    writer.write(one_call_table(1, "second"))
    empty = pa.Table.from_arrays([pa.array([3], pa.int64()), pa.array([NO_ROW], pa.int32()),
                                  pa.array([None], pa.string())], names=[key_column(0), N_COLUMN, output_column(0)],
                                 metadata={OUTPUT_NAMES: json.dumps(["v"])})
    writer.write(empty)
    found = read_table_outcomes(fs, table_files(fs, str(tmp_path / "0123456789abcdef" / "table")), ["k"])
    assert sorted(r for r, _ in found.values()) == [[], [{"v": "first"}]]


def string_table(keys, values, ns=None) -> pa.Table:
    ns = ns or [0] * len(keys)
    return pa.Table.from_arrays([pa.array(keys, pa.string()), pa.array(ns, pa.int32()), pa.array(values, pa.string())],
                                names=[key_column(0), N_COLUMN, output_column(0)],
                                metadata={OUTPUT_NAMES: json.dumps(["v"])})


def test_earlier_attempts_are_handed_out_in_key_order_one_window_at_a_time(tmp_path):
    """Files hold calls in the order they ended; the reader sorts each as it reads it."""
    from aiospark.journal.table_prior import PriorOutcomes, sort_key

    fs = pafs.LocalFileSystem()
    writer = TableWriter(fs, str(tmp_path / "0123456789abcdef" / "table" / "fedcba9876543210"), run=RUN_A, partition=0, attempt="1.1")
    # the default key (NULL is a value): NULL sorts as ("", null) right after ""
    writer.write(string_table(["é", "b", "", None], ["vé", "vb", "vempty", "vnull"]))
    writer.write(string_table(["d", "c", "b", "c"], [None, "c1", "other", "c0"], [NO_ROW, 1, 0, 0]))
    writer.write(string_table(["z"], ["vz"]))
    paths = table_files(fs, str(tmp_path / "0123456789abcdef" / "table"))
    fs.delete_file(paths[2])  # removed after listing: its key is not recorded
    prior = PriorOutcomes(fs, paths, ["k"], nulls=True)
    join = lambda v: sort_key(["" if v is None else v, v is None])  # noqa: E731  the input's join columns
    first = prior.upto(join(None))
    assert {i: r for i, (r, _) in first.items()} == {'[""]': [{"v": "vempty"}], "[null]": [{"v": "vnull"}]}
    second = prior.upto(join("c"))
    # "b" twice: the first file's answer stands; "c" has two rows in order
    assert {i: r for i, (r, _) in second.items()} == {'["b"]': [{"v": "vb"}], '["c"]': [{"v": "c0"}, {"v": "c1"}]}
    third = prior.upto(join("zz"))  # "é" (U+00E9) sorts after "zz", as Spark sorts UTF-8 bytes
    assert {i: r for i, (r, _) in third.items()} == {'["d"]': []}
    assert [r for r, _ in prior.upto(join("ê")).values()] == [[{"v": "vé"}]]
    assert prior.upto(join("\uffff")) == {}  # "z"'s file vanished: not recorded
