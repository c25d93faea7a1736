"""A key-run task's settled calls, recorded from the output batch the task converts anyway.

In a task of key runs (:meth:`aiospark.journal.table_task.TableView.key_runs`) the operator hands
every call over to the view as it ends (``settled``), then emits its outputs. ``unordered_wait``
without watermarks emits in the order calls end, so the calls settled and the values emitted come
in the same order. The lane converts each list of emitted values to the output's Arrow batch; the
calls those values answer are recorded from that batch (:meth:`SettledCalls.take`): the outputs
are converted to Arrow once, not a second time by the writer thread.

A settled call keeps only its key values and its first output (alive anyway until the lane
converts it), not its input row: the common call (one row answering one row) costs two list
appends. What cannot be taken from a batch goes the writer's way (a
:data:`~aiospark.journal.table_task.TableEntry`, converted by the writer): a call whose recorded
rows straddle two output lists, and, when the task ends, every call whose outputs never reached a
batch (a failed conversion, a failed task). So a call is recorded whatever happens to its output.
The alignment of calls and values is checked by object identity, and a mismatch fails the task
rather than recording a row under another key.

Example (what the view and the lane do)::

    calls = SettledCalls(["key"], lists=False)
    outputs = calls.settled(row, [answer], recordable=True, rows=0)   # the loop thread, as a call ends
    taken = calls.take(values, batch)    # the task thread, after converting values to batch
    taken.keys, taken.index, taken.numbers, taken.empty, taken.rest, taken.calls
"""
from __future__ import annotations

import itertools
import operator
from collections import deque
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["SettledCalls", "Taken"]

_OUT_OF_STEP = ("aiospark: the task's outputs and its settled calls are out of step; none of them "
                "was recorded (please report this)")


class Taken:
    """What one output list records: ``keys`` (one list per key column) of the batch rows
    ``index`` (None: every batch row, in order), then of ``empty`` calls that gave no row;
    ``numbers``: each row's index among its call's results (None: all 0); ``rest``: calls the
    writer converts itself, as ``(None, {key column: value}, results)``; ``calls``: the calls
    recorded here."""

    __slots__ = ("keys", "index", "numbers", "empty", "rest", "calls")

    def __init__(self, keys: list[list[Any]], index: list[int] | None, numbers: list[int] | None, empty: int,
                 rest: list[tuple[None, dict[str, Any], list[Any]]], calls: int):
        self.keys = keys
        self.index = index
        self.numbers = numbers
        self.empty = empty
        self.rest = rest
        self.calls = calls


class SettledCalls:
    """The calls settled and not yet recorded, oldest first (see the module docstring). ``keys``:
    the key columns of an input row. A plain function's ``[None]`` is its "no row" answer,
    recorded (the view tells what is not recordable: :meth:`settled`)."""

    def __init__(self, keys: Sequence[str]):
        self.names = list(keys)
        self._key = operator.itemgetter(*self.names)  # a value for one column, a tuple for several
        #: per call, in the order settled: its key, its first output (None for an odd call)
        self._keys: list[Any] = []
        self._firsts: list[Any] = []
        #: calls settled so far (the loop thread's count) and taken before ``_keys[0]`` (the task
        #: thread's, which deletes what it took): a call's number is the same for both
        self._settled = 0
        self._base = 0
        #: the odd calls (not one recordable row answering one row): (call number, results or
        #: None when not recordable, values emitted), oldest first; the loop thread appends
        self._odd: deque[tuple[int, list[Any] | None, int]] = deque()
        #: values at the head of the next output list that belong to a call already taken
        self._carry = 0

    def settled(self, value: Any, results: list[Any], recordable: bool, rows: int) -> list[Any]:
        """A call of ``value`` is over with ``results``, which the ``rows`` rows after it in its run
        take too: what it emits (the list once per row)."""
        self._settled += 1
        if recordable and not rows and len(results) == 1 and results[0] is not None:
            self._keys.append(self._key(value))  # the common call: one row for one row
            self._firsts.append(results[0])
            return results
        outputs = results * (1 + rows) if rows else results
        self._odd.append((self._settled - 1, results if recordable else None, len(outputs)))
        self._keys.append(self._key(value))
        self._firsts.append(None)
        return outputs

    def take(self, values: list[Any], batch: pa.RecordBatch | None) -> Taken:
        """The calls that the emitted ``values`` (the next ones, in emission order) answer, with
        where their recorded rows are in ``batch`` (the non-None values converted, in order)."""
        n = len(values)
        keys, firsts, odd = self._keys, self._firsts, self._odd
        if not self._carry and batch is not None and batch.num_rows == n and (not odd or odd[0][0] >= self._base + n):
            # every call one row, in order: the batch is the record (the loop thread appends meanwhile)
            if n and (firsts[0] is not values[0] or firsts[n - 1] is not values[-1]):
                raise RuntimeError(_OUT_OF_STEP)
            taken = keys[:n]
            del keys[:n], firsts[:n]
            self._base += n
            return Taken(self._columns(taken), None, None, 0, [], n)
        kept_keys: list[Any] = []
        empty_keys: list[Any] = []
        index: list[int] = []
        numbers: list[int] = []
        rest: list[tuple[None, dict[str, Any], list[Any]]] = []
        recorded = 0
        # the batch row of value i: values hold Nones (a plain function's "no row") the batch lacks
        ranks = None if batch is not None and batch.num_rows == n else \
            list(itertools.accumulate(v is not None for v in values))
        pos, self._carry = self._carry, 0
        i = 0  # calls taken, from keys[0]
        while pos < n:
            key, first = keys[i], firsts[i]
            if odd and odd[0][0] == self._base + i:
                _, results, emitted = odd.popleft()
            else:
                results, emitted = [first], 1
            i += 1
            if results is not None:
                kept = [r for r in results if r is not None]
                if not kept:
                    empty_keys.append(key)
                    recorded += 1
                elif pos + len(kept) > n:  # its rows go on in the next list: the writer converts it
                    rest.append((None, self._row(key), results))
                elif values[pos] is not kept[0]:
                    raise RuntimeError(_OUT_OF_STEP)
                else:
                    for j in range(len(kept)):
                        kept_keys.append(key)
                        index.append(pos + j if ranks is None else ranks[pos + j] - 1)
                        numbers.append(j)
                    recorded += 1
            pos += emitted
        del keys[:i], firsts[:i]
        self._base += i
        self._carry = pos - n
        return Taken(self._columns(kept_keys + empty_keys), index, numbers, len(empty_keys), rest, recorded)

    def left(self) -> list[tuple[None, dict[str, Any], list[Any]]]:
        """At the task's end: the recordable calls whose outputs never reached a batch."""
        left = []
        odd = {number: (results, emitted) for number, results, emitted in self._odd}
        for i, (key, first) in enumerate(zip(self._keys, self._firsts)):
            results = odd[self._base + i][0] if self._base + i in odd else [first]
            if results is not None:
                left.append((None, self._row(key), results))
        self._keys, self._firsts, self._odd = [], [], deque()
        return left

    def _columns(self, keys: list[Any]) -> list[list[Any]]:
        """One list per key column (a call's key is a value for one column, a tuple for several)."""
        if len(self.names) == 1:
            return [keys]
        return [list(column) for column in zip(*keys)] if keys else [[] for _ in self.names]

    def _row(self, key: Any) -> dict[str, Any]:
        """An input row with the call's key values (what the writer's conversion reads of it)."""
        return dict(zip(self.names, [key] if len(self.names) == 1 else key))
