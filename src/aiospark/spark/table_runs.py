"""Key runs: on the table route, a task sends the operator one row per run of equal keys.

The table route (:mod:`aiospark.spark.table_route`) hands a task the rows Spark found no outcome
for, sorted by key, so the rows of one key arrive one after another: a *run*. Where the task can
find no outcome of its own (no file of an earlier attempt, no bucket segment, no kept errors: the
common first run) and a failed call fails the task (``on_error="fail"``, no ``batch_size``), the
task finds the runs in Arrow and sends the operator only each run's first row. The operator then
asks its journal nothing per element (no identity, no lookup, no sharing:
``TableView.records_only``); when the first row's call is over, the view gives its results to
every row of the run (:meth:`aiospark.journal.table_task.TableView.settled`), through the
operator's one emit path, and the call is recorded from the output batch they become
(:mod:`aiospark.journal.table_calls`). The key is still called once per task, as it was when the
operator shared equal rows.

A run's first row enters the operator only once its run is complete: the last run of a batch may
go on in the next one, so it is held back until a row with another key (or the input's end) comes.
What a run costs is its first row and a count, whatever its length.

Keys are compared on the join columns (:func:`aiospark.spark.table_route.routed`): the key itself,
or, where NULLs are values (the default key), ``coalesce(key, filler)`` with ``isnull(key)``, whose
Arrow equality is Spark's and the identity's for the join types. Where a NULL makes no identity
(an explicit ``key=``), a row with a NULL key is a run of its own, called and never recorded.

Example (what :meth:`TableSplit.chunks` does with each batch's rows to call)::

    runs = KeyRuns(view, join_names, inputs, nulls=False)
    first_rows = runs.take(todo)     # the dicts to call; the rest are counted in view.followers
    ...
    first_rows = runs.end()          # the run held back, at the input's end
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .schema import to_python

__all__ = ["KeyRuns"]


class KeyRuns:
    """One task's runs of equal keys (see the module docstring). ``view`` is the task's
    :class:`~aiospark.journal.table_task.TableView` in key-run mode; ``keys`` the join columns;
    ``inputs`` the columns a row is called with; ``nulls``: whether NULL keys are values."""

    def __init__(self, view: Any, keys: Sequence[str], inputs: Sequence[str], nulls: bool):
        self.view = view
        self.keys = list(keys)
        self.inputs = list(inputs)
        self.nulls = nulls
        #: the run held back: its first row, the rows after it so far, its key (a 1-row batch)
        self._held: dict[str, Any] | None = None
        self._held_rows = 0
        self._held_key: pa.RecordBatch | None = None
        self._held_unkeyed = False

    def take(self, todo: pa.RecordBatch) -> list[dict[str, Any]]:
        """The first rows of the runs that ``todo`` (rows to call, sorted by key, with the join
        columns) completes, in order; the run it ends with is held back."""
        n = todo.num_rows
        keys = todo.select(self.keys)
        at: list[int] = pc.indices_nonzero(self._starts(keys)).to_pylist()
        if not at:  # every row goes on with the run held back
            self._held_rows += n
            return []
        out: list[dict[str, Any]] = []
        self._held_rows += at[0]  # the rows before the first start go on with the run held back
        if self._held is not None:
            out.append(self._release())
        firsts = todo if len(at) == n else todo.take(pa.array(at, pa.int64()))  # distinct keys: no copy
        rows = to_python(firsts.select(self.inputs))
        unkeyed = self._unkeyed(keys, at)
        followers, blank = self.view.followers, self.view.unkeyed
        if len(at) < n - at[0]:  # some run has rows after its first (else each run is one row)
            for i in range(len(at) - 1):
                if at[i + 1] - at[i] > 1:
                    followers[id(rows[i])] = at[i + 1] - at[i] - 1
        for i in unkeyed:
            if i < len(at) - 1:
                blank.add(id(rows[i]))
        self._held, self._held_rows = rows[-1], n - at[-1] - 1
        self._held_key = keys.slice(n - 1, 1)
        self._held_unkeyed = bool(unkeyed) and unkeyed[-1] == len(at) - 1
        return out + rows[:-1]

    def end(self) -> list[dict[str, Any]]:
        """The run held back, at the input's end ([] when none)."""
        return [self._release()] if self._held is not None else []

    def _release(self) -> dict[str, Any]:
        """The held run's first row, its run now complete (its rows counted for the view)."""
        row = self._held
        assert row is not None
        if self._held_rows:
            self.view.followers[id(row)] = self._held_rows
        if self._held_unkeyed:
            self.view.unkeyed.add(id(row))
        self._held, self._held_rows, self._held_key, self._held_unkeyed = None, 0, None, False
        return row

    def _starts(self, keys: pa.RecordBatch) -> pa.Array:
        """Whether each row starts a run: its key differs from the row before it (the held run's
        for the first row); a NULL key (no identity) always starts one."""
        n = keys.num_rows
        first = self._held_key is None
        later: Any = None
        for j in range(keys.num_columns):
            column = keys.column(j)
            if not first:
                assert self._held_key is not None
                first = pc.not_equal(column.slice(0, 1), self._held_key.column(j))[0].as_py() is not False
            if n > 1:
                differ = pc.fill_null(pc.not_equal(column.slice(1), column.slice(0, n - 1)), True)
                later = differ if later is None else pc.or_(later, differ)
        head = pa.array([first])
        return head if later is None else pa.concat_arrays([head, later])

    def _unkeyed(self, keys: pa.RecordBatch, at: list[int]) -> list[int]:
        """The positions, among the runs' first rows ``at``, of those with a NULL key (none where
        NULLs are values)."""
        if self.nulls or not any(keys.column(j).null_count for j in range(keys.num_columns)):
            return []
        missing: Any = None
        for j in range(keys.num_columns):
            null = pc.is_null(keys.column(j))
            missing = null if missing is None else pc.or_(missing, null)
        return pc.indices_nonzero(missing.take(pa.array(at, pa.int64()))).to_pylist()
