"""A key-run task's settled calls taken from its output (journal/table_calls.py), without Spark:
which batch rows each output list records, under which key, and what goes the writer's way."""
from __future__ import annotations

import pyarrow as pa
import pytest

from aiospark.journal.table_calls import SettledCalls


def settle(calls: SettledCalls, key, results, recordable=True, rows=0) -> list:
    return calls.settled({"k": key, "other": "x"}, results, recordable, rows)


def batch_of(values: list) -> pa.RecordBatch | None:
    rows = [v for v in values if v is not None]
    return pa.RecordBatch.from_pylist(rows) if rows else None


def test_one_row_per_call_is_the_batch_itself_under_each_calls_key():
    calls = SettledCalls(["k"])
    values = []
    for k in (5, 3, 9):
        values += settle(calls, k, [{"v": k * 10}])
    taken = calls.take(values[:2], batch_of(values[:2]))
    assert (taken.keys, taken.index, taken.numbers, taken.empty, taken.rest, taken.calls) == ([[5, 3]], None, None, 0, [], 2)
    taken = calls.take(values[2:], batch_of(values[2:]))
    assert taken.keys == [[9]] and taken.calls == 1
    assert calls.left() == []


def test_runs_several_rows_no_row_and_a_timeout_take_their_own_rows():
    calls = SettledCalls(["k"])
    values = []
    values += settle(calls, 1, [{"v": 1}, {"v": 2}])              # two rows
    values += settle(calls, 2, [{"v": 20}], rows=2)               # a run of three rows: recorded once
    values += settle(calls, 3, [])                                # no row: recorded as such
    values += settle(calls, 4, [{"v": 40}], recordable=False)     # a timeout's fallback: not recorded
    values += settle(calls, 5, [None, {"v": 50}], recordable=False)  # the view's "not an answer" (TableView.settled)
    values += settle(calls, 6, [{"v": 60}])
    batch = batch_of(values)
    taken = calls.take(values, batch)
    assert taken.keys == [[1, 1, 2, 6, 3]]  # rows found in the batch, then the calls that gave none
    assert taken.numbers == [0, 1, 0, 0] and taken.empty == 1 and taken.calls == 4
    rows = batch.to_pylist()
    assert [rows[i] for i in taken.index] == [{"v": 1}, {"v": 2}, {"v": 20}, {"v": 60}]


def test_a_plain_functions_none_is_its_no_row_answer_and_moves_the_batch_rows():
    calls = SettledCalls(["k"])
    values = settle(calls, 1, [None]) + settle(calls, 2, [{"v": 2}]) + settle(calls, 3, [None]) + \
        settle(calls, 4, [{"v": 4}])
    batch = batch_of(values)
    taken = calls.take(values, batch)
    assert taken.keys == [[2, 4, 1, 3]] and taken.empty == 2
    assert [batch.to_pylist()[i] for i in taken.index] == [{"v": 2}, {"v": 4}]


def test_a_call_whose_rows_straddle_two_lists_goes_to_the_writer_and_the_next_list_starts_after_it():
    calls = SettledCalls(["k"])
    values = settle(calls, 1, [{"v": 1}]) + settle(calls, 2, [{"v": 2}, {"v": 3}, {"v": 4}]) + \
        settle(calls, 3, [{"v": 5}])
    first, second = values[:2], values[2:]
    taken = calls.take(first, batch_of(first))
    assert taken.keys == [[1]] and [r for _, _, r in taken.rest] == [[{"v": 2}, {"v": 3}, {"v": 4}]]
    assert taken.rest[0][1] == {"k": 2} and taken.calls == 1
    taken = calls.take(second, batch_of(second))
    assert taken.keys == [[3]] and taken.index == [2] and taken.rest == []


def test_a_run_whose_copies_straddle_two_lists_is_recorded_with_the_first():
    calls = SettledCalls(["k"])
    values = settle(calls, 1, [{"v": 1}], rows=3) + settle(calls, 2, [{"v": 2}])
    taken = calls.take(values[:2], batch_of(values[:2]))
    assert taken.keys == [[1]] and taken.index == [0]
    taken = calls.take(values[2:], batch_of(values[2:]))
    assert taken.keys == [[2]] and taken.index == [2]


def test_calls_never_taken_are_left_for_the_writer_with_their_results():
    calls = SettledCalls(["k", "other"])
    values = calls.settled({"k": 1, "other": "a"}, [{"v": 1}], True, 0)
    calls.settled({"k": 2, "other": "b"}, [{"v": 2}], False, 0)
    calls.settled({"k": 3, "other": "c"}, [None], True, 0)
    taken = calls.take(values, batch_of(values))
    assert taken.keys == [[1], ["a"]]
    calls.settled({"k": 4, "other": "d"}, [{"v": 4}], True, 1)
    assert calls.left() == [(None, {"k": 3, "other": "c"}, [None]), (None, {"k": 4, "other": "d"}, [{"v": 4}])]


def test_outputs_out_of_step_with_the_calls_record_nothing():
    calls = SettledCalls(["k"])
    settle(calls, 1, [{"v": 1}])
    settle(calls, 2, [{"v": 2}])
    other = [{"v": 2}, {"v": 1}]  # not the objects the calls emitted
    with pytest.raises(RuntimeError, match="out of step"):
        calls.take(other, batch_of(other))
    calls = SettledCalls(["k"])
    shifted = [{"v": 0}, *settle(calls, 1, [{"v": 1}], rows=1)]  # a run's rows one place late
    with pytest.raises(RuntimeError, match="out of step"):
        calls.take(shifted, batch_of(shifted))
