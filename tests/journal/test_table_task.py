"""The table route's task view without Spark (journal/table_task.py): how its writer thread
takes the calls' results, and when they reach a file (calls recorded row by row: key runs record
from the output batch, tests/journal/test_table_calls.py)."""
from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from aiospark.journal import Journal, Manifest
from aiospark.journal.table import TableWriter, new_run, table_files
from aiospark.journal.table_task import TableView


async def fn(row):
    return row


def table_view(tmp_path, prepared: list[int], flush_seconds: float) -> tuple[TableView, str]:
    bound = Journal(str(tmp_path / "j")).bind(Manifest.of("unordered_wait", fn, "v BIGINT", ["k"], ["bigint"]))
    task = bound.store.task(bound.manifest, 0, None, "0.1")
    task.table_route = True

    def to_table(entries):
        prepared.append(len(entries))
        return pa.table({"k": [e[1]["k"] for e in entries], "v": [e[2][0]["v"] for e in entries]})

    view = TableView(task, False, to_table).load()
    view.flush_seconds = flush_seconds
    folder, run = str(tmp_path / "0123456789abcdef" / "table" / "fedcba9876543210"), new_run()
    view.writer = TableWriter(pafs.LocalFileSystem(), folder, run, 0, "0.1")
    return view, f"{folder}/{run}/0"


def written(folder: str) -> list[pa.Table]:
    table = folder.rsplit("/", 3)[0]  # the table of <table>/<shape>/<run>/<partition>
    return [pq.read_table(path) for path in table_files(pafs.LocalFileSystem(), table, folder[len(table) + 1:])]


def until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the writer thread did not get there"
        time.sleep(0.01)


def test_calls_are_converted_as_a_chunk_gathers_and_written_as_one_file_per_flush(tmp_path):
    """What waits for the writer thread stays a chunk, not a flush interval of calls: the thread
    converts each chunk as it gathers, and still writes one file per flush."""
    prepared: list[int] = []
    view, folder = table_view(tmp_path, prepared, flush_seconds=3600)
    view.chunk = 4
    completed = (9, 3, 7, 1, 8, 2, 6, 0, 5, 4)  # the order calls complete in: not the key's
    for at in (0, 4):
        for k in completed[at:at + 4]:
            view.record_value(str(k), {"k": k}, [{"v": 10 * k}], None)
        until(lambda at=at: sum(prepared) == at + 4)  # a chunk is taken as it gathers...
    for k in completed[8:]:
        view.record_value(str(k), {"k": k}, [{"v": 10 * k}], None)
    time.sleep(0.2)
    assert prepared == [4, 4]      # ...fewer wait for the flush...
    assert written(folder) == []   # ...and the flush is not due: no file yet
    view.close()
    assert prepared == [4, 4, 2]
    (table,) = written(folder)     # one file: every chunk of the flush, in the order calls ended
    assert table.column("k").to_pylist() == list(completed)
    assert table.column("v").to_pylist() == [10 * k for k in completed]


def test_a_flush_is_due_every_flush_seconds_whatever_the_chunks(tmp_path):
    """Fewer calls than a chunk still reach a file within the flush interval (a killed task
    loses only about that much), and the next calls go to the next file."""
    prepared: list[int] = []
    view, folder = table_view(tmp_path, prepared, flush_seconds=0.05)
    for k in range(3):
        view.record_value(str(k), {"k": k}, [{"v": k}], None)
    until(lambda: len(written(folder)) == 1)
    view.record_value(str(3), {"k": 3}, [{"v": 3}], None)
    until(lambda: len(written(folder)) == 2)
    view.close()
    assert sorted(k for t in written(folder) for k in t.column("k").to_pylist()) == [0, 1, 2, 3]


def test_a_failing_conversion_fails_the_task_at_its_next_call_or_close(tmp_path):
    prepared: list[int] = []
    view, _ = table_view(tmp_path, prepared, flush_seconds=3600)
    view.chunk = 2
    failed = threading.Event()

    def broken(entries):
        failed.set()
        raise ValueError("cannot convert")
    view.to_table = broken
    view.record_value(str(1), {"k": 1}, [{"v": 1}], None)
    view.record_value(str(2), {"k": 2}, [{"v": 2}], None)
    until(failed.is_set)
    until(lambda: view._failure is not None)
    try:
        view.record_value(str(3), {"k": 3}, [{"v": 3}], None)
    except ValueError as exc:
        assert "cannot convert" in str(exc)
    else:
        raise AssertionError("the conversion's failure did not reach the task")


def test_a_key_run_task_records_the_calls_of_a_list_beside_one_that_straddles_it(tmp_path):
    """Output lists hand the view their calls (key runs): a call recorded from the batch is kept
    even when the list's other call straddles into the next list (the writer converts that one)."""
    from aiospark.journal.table_calls import SettledCalls

    prepared: list[int] = []
    view, folder = table_view(tmp_path, prepared, flush_seconds=3600)

    def from_output(taken, batch):
        rows = batch.take(pa.array(taken.index, pa.int64())) if taken.index is not None else batch
        return pa.table({"k": taken.keys[0][:rows.num_rows], "v": rows.column("v")})
    view.from_output = from_output
    view.key_runs(SettledCalls(["k"]))
    values = view.settled({"k": 1}, [{"v": 10}], True) + view.settled({"k": 2}, [{"v": 20}, {"v": 21}], True)
    view.output(values[:2], pa.RecordBatch.from_pylist(values[:2]))   # 1 whole, 2 straddles
    view.output(values[2:], pa.RecordBatch.from_pylist(values[2:]))
    view.close()
    (table,) = written(folder)
    assert sorted(zip(table.column("k").to_pylist(), table.column("v").to_pylist())) == [(1, 10), (2, 20)]


def _rows_without_none(results) -> bool:
    return None not in results


def test_what_the_view_finds_not_recordable_is_never_written_on_either_path(tmp_path):
    """An AsyncFunction's list holding a None is no answer (the lane sets ``recordable``, as on the
    bucket route): neither a call recorded row by row nor a key run's call reaches the table, and
    the row's next equal row is called again rather than served."""
    from aiospark.journal.table_calls import SettledCalls

    prepared: list[int] = []
    view, folder = table_view(tmp_path, prepared, flush_seconds=3600)
    view.recordable = _rows_without_none
    view.record_value("1", {"k": 1}, [{"v": 10}], None)
    view.record_value("2", {"k": 2}, [None, {"v": 20}], None)
    assert view.recorded("2") is None and view.recorded("1") is not None
    view.close()
    (table,) = written(folder)
    assert table.column("k").to_pylist() == [1]

    prepared = []
    view, folder = table_view(tmp_path / "runs", prepared, flush_seconds=3600)
    view.recordable = _rows_without_none

    def from_output(taken, batch):
        rows = batch.take(pa.array(taken.index, pa.int64())) if taken.index is not None else batch
        return pa.table({"k": taken.keys[0][:rows.num_rows], "v": rows.column("v")})
    view.from_output = from_output
    view.key_runs(SettledCalls(["k"]))
    values = view.settled({"k": 3}, [None, {"v": 30}], True) + view.settled({"k": 4}, [{"v": 40}], True)
    values += view.settled({"k": 5}, [None], True)
    kept = [v for v in values if v is not None]
    view.output(values, pa.RecordBatch.from_pylist(kept))
    view.settled({"k": 6}, [{"v": 60}, None], True)  # never reaches a batch: left for the writer at close
    view.close()
    (table,) = written(folder)
    assert table.column("k").to_pylist() == [4]
