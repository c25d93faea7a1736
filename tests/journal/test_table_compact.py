"""``--compact`` of the table route's Parquet files without Spark (journal/table_compact.py): one
file per schema and partition, the first answer of a repeated key kept, runs still being written
left alone, a crash between the new file and the deletions read as one answer per key."""
from __future__ import annotations

import json
import os
import shutil
import time

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
    may_repeat_keys,
    output_column,
    read_table_outcomes,
    table_files,
    table_infos,
    table_listing,
)
from aiospark.journal.table_compact import table_compact, table_groups

#: a question's digest and a schema folder's name, as aiospark names them (16 hex digits)
DIGEST, SHAPE = "0123456789abcdef", "fedcba9876543210"


def run_name(seconds_ago: float) -> str:
    return f"{int((time.time() - seconds_ago) * 1000):013d}-{os.urandom(4).hex()}"


def table(keys, values, ns=None, names=("v",)) -> pa.Table:
    ns = ns if ns is not None else [0] * len(keys)
    return pa.Table.from_arrays([pa.array(keys, pa.int64()), pa.array(ns, pa.int32()), pa.array(values, pa.string())],
                                names=[key_column(0), N_COLUMN, output_column(0)],
                                metadata={OUTPUT_NAMES: json.dumps(list(names))})


def age(root, seconds: float) -> None:
    """Every file under ``root`` last changed ``seconds`` ago (a run that has ended)."""
    then = time.time() - seconds
    for folder, _, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(folder, f), (then, then))


def ended_run(fs, directory) -> TableWriter:
    """A run defined ten minutes ago whose task wrote keys 1 and 2 in two flushes, the last two
    minutes ago."""
    w = TableWriter(fs, f"{directory}/{SHAPE}", run_name(600), 0, attempt="1.0")
    w.write(table([1], ["a"]))
    w.write(table([2], ["b"]))
    age(directory, 120)
    return w


def outcomes(fs, directory):
    return {i: r for i, (r, _) in read_table_outcomes(fs, table_files(fs, directory), ["k"]).items()}


def test_runs_become_one_file_per_partition_and_every_answer_stays(tmp_path):
    fs, directory = pafs.LocalFileSystem(), str(tmp_path / DIGEST / "table")
    shape = f"{directory}/{SHAPE}"
    first, second = run_name(600), run_name(300)
    for partition in (0, 1):  # run 1: two attempts' flushes per partition
        w = TableWriter(fs, shape, first, partition, attempt=f"1.{partition}")
        w.write(table([10 + partition], ["a"]))
        w.write(table([20 + partition, 20 + partition, 30 + partition], ["b0", "b1", None], [0, 1, NO_ROW]))
    w = TableWriter(fs, shape, second, 0, attempt="7.0")  # run 2: keys run 1 lacked
    w.write(table([40], ["c"]))
    w.write(table([50], ["d"]))
    age(directory, 120)
    before = outcomes(fs, directory)
    assert len(table_infos(fs, directory)) == 6 and table_groups(table_infos(fs, directory), directory) == (2, 0)

    done = table_compact(fs, directory, keys=1, quiet=0.0)

    assert (done.written, done.removed, done.busy) == (2, 6, 0)
    assert outcomes(fs, directory) == before
    assert before['[21]'] == [{"v": "b0"}, {"v": "b1"}] and before['[31]'] == []
    after = table_infos(fs, directory)
    assert len(after) == 2 and table_groups(after, directory) == (2, 0)
    # named by the earliest run it merges; no empty folder of the old runs is left to list
    assert {i.path.rsplit("/", 3)[-3].split("-")[0] for i in after} == {first.split("-")[0]}
    assert sorted(os.listdir(shape)) == sorted({i.path.rsplit("/", 3)[-3] for i in after})
    # a run defined later (here: two minutes) does not overlap it: Spark's join needs no window
    age(directory, 120)
    later = TableWriter(fs, shape, run_name(0), 0, attempt="9.0")
    later.write(table([60], ["e"]))
    assert may_repeat_keys(table_infos(fs, directory), directory) is False
    # the next compaction leaves one run folder again: an older run left beside the new one
    # would overlap it and cost every later join a one-answer-per-key window
    age(directory, 120)
    again = table_compact(fs, directory, keys=1, quiet=0.0)
    assert (again.written, again.removed) == (2, 3)
    assert outcomes(fs, directory) == {**before, '[60]': [{"v": "e"}]}
    assert len(os.listdir(shape)) == 1 and not may_repeat_keys(table_infos(fs, directory), directory)
    assert table_compact(fs, directory, keys=1, quiet=0.0).written == 0, "one file per partition: nothing to do"


def test_a_key_two_overlapping_writers_recorded_keeps_the_answer_readers_chose(tmp_path):
    fs, directory = pafs.LocalFileSystem(), str(tmp_path / DIGEST / "table")
    run = run_name(600)
    a = TableWriter(fs, f"{directory}/{SHAPE}", run, 0, attempt="1.0")
    a.prefix = f"1.0-{run_name(590)}"  # started 590 s ago
    a.write(table([1, 2], ["first-1", "first-2"]))
    b = TableWriter(fs, f"{directory}/{SHAPE}", run, 0, attempt="1.1")  # a speculative attempt, at once
    b.prefix = f"1.1-{run_name(580)}"
    b.write(table([2, 2, 3], ["second-2a", "second-2b", "second-3"], [0, 1, 0]))
    age(directory, 120)
    infos = table_infos(fs, directory)
    assert may_repeat_keys(infos, directory)
    before = outcomes(fs, directory)
    assert before['[2]'] == [{"v": "first-2"}]
    assert table_compact(fs, directory, keys=1, quiet=0.0).written == 1
    assert outcomes(fs, directory) == before
    (path,) = table_files(fs, directory)
    assert pa.parquet.read_table(path).num_rows == 3  # one answer per key, nothing else


def test_a_crash_before_the_old_files_go_still_reads_one_answer_per_key(tmp_path):
    fs, directory = pafs.LocalFileSystem(), str(tmp_path / DIGEST / "table")
    ended_run(fs, directory)
    kept = tmp_path / "kept"
    shutil.copytree(directory, kept)
    table_compact(fs, directory, keys=1, quiet=0.0)
    shutil.copytree(kept, directory, dirs_exist_ok=True)  # as if killed between writing and deleting
    infos = table_infos(fs, directory)
    assert len(infos) == 3
    assert may_repeat_keys(infos, directory), "Spark's join would give the rows of keys 1 and 2 twice"
    age(directory, 120)
    table_compact(fs, directory, keys=1, quiet=0.0)  # running it again finishes
    (path,) = table_files(fs, directory)
    assert sorted(pa.parquet.read_table(path).column(key_column(0)).to_pylist()) == [1, 2]


def test_a_run_written_in_the_last_minute_is_left_as_it_is(tmp_path):
    fs, directory = pafs.LocalFileSystem(), str(tmp_path / DIGEST / "table")
    ended_run(fs, directory)
    live = TableWriter(fs, f"{directory}/{SHAPE}", run_name(30), 0, attempt="2.0")
    live.write(table([3], ["c"]))
    live.write(table([4], ["d"]))
    before = outcomes(fs, directory)
    done = table_compact(fs, directory, keys=1, quiet=0.0)
    assert (done.written, done.removed, done.busy) == (1, 2, 2)
    assert outcomes(fs, directory) == before
    assert len(table_files(fs, directory, live.folder[len(directory) + 1:])) == 2, "a running run's files were moved from under its retries"
    # quiet longer than a minute widens what counts as running; the compaction's own new file
    # belongs to no running job, however recent
    age(live.folder, 200)
    assert table_compact(fs, directory, keys=1, quiet=300.0).busy == 2


def test_a_file_of_another_schema_in_a_folder_stops_its_partition_and_deletes_nothing(tmp_path):
    fs, directory = pafs.LocalFileSystem(), str(tmp_path / DIGEST / "table")
    w = TableWriter(fs, f"{directory}/{SHAPE}", run_name(600), 0, attempt="1.0")
    w.write(table([1], ["a"]))
    w.write(table([2], ["b"], names=("w",)))  # other output names: not the same table
    age(directory, 120)
    files = table_files(fs, directory)
    with pytest.raises(JournalStoreError, match="does not have the schema"):
        table_compact(fs, directory, keys=1, quiet=0.0)
    assert table_files(fs, directory) == files
    assert not [n for _, _, fs_ in os.walk(directory) for n in fs_ if n.startswith(".")], "a hidden file was left"


def test_files_this_module_did_not_lay_out_are_left_alone(tmp_path):
    fs, directory = pafs.LocalFileSystem(), str(tmp_path / DIGEST / "table")
    w = TableWriter(fs, f"{directory}/{SHAPE}", run_name(600), 0, attempt="1.0")
    w.write(table([1], ["a"]))
    w.write(table([2], ["b"]))
    run = w.folder.rsplit("/", 2)[-2]
    foreign = [tmp_path / DIGEST / "table" / SHAPE / "notes.parquet", tmp_path / DIGEST / "table" / SHAPE / "my-run" / "0" / "x.parquet",
               tmp_path / DIGEST / "table" / SHAPE / run_name(900) / "all" / "y.parquet",
               # a user's copy beside the journal's own files: not a name aiospark gives
               tmp_path / DIGEST / "table" / SHAPE / run / "0" / "my_backup.parquet",
               # a copy of a run folder one level deeper, aiospark's names and all
               tmp_path / DIGEST / "table" / SHAPE / "backup" / run / "0" / os.listdir(w.folder)[0],
               # a copy of the whole digest folder into its own table, and of a partition as "000"
               tmp_path / DIGEST / "table" / DIGEST / "table" / SHAPE / run / "0" / os.listdir(w.folder)[0],
               tmp_path / DIGEST / "table" / SHAPE / run / "000" / os.listdir(w.folder)[0]]
    for f in foreign:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"not the journal's")
    age(directory, 120)
    assert table_groups(table_listing(fs, directory), directory) == (1, 7)
    assert len(table_infos(fs, directory)) == 2, "only aiospark's files are ever read"
    done = table_compact(fs, directory, keys=1, quiet=0.0)
    assert (done.written, done.removed) == (1, 2)
    assert all(f.read_bytes() == b"not the journal's" for f in foreign)
