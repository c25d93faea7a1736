"""One task's journal on the table route of ``unordered_wait``: results written as typed Parquet.

On that route (:mod:`aiospark.spark.table_route`) Spark has already served every row whose
outcome the table held when the DataFrame was defined, and sorted the others by key: a task sees
each key's rows one after another. So this view keeps, of its own outcomes, only the last few
(:data:`RECENT`: the rows of one key share its call; memory stays flat whatever the rows per
task) and writes results to the table (:class:`~aiospark.journal.table.TableWriter`, a file per
flush). What an earlier attempt of the same task wrote (Spark retried it) is loaded first, so a
retry pays only what was in flight. Kept errors and outcomes written by the other entry points
are the bucket segments', asked row by row as on every route.

Example (what :meth:`aiospark.spark.journaled.Durable.open_task` does on the table route)::

    view = TableView(directory_task, keep_errors, to_table).load()
    view.writer = writer                       # at the task's first rows: its folder is known then
    op = AsyncWaitOperator(fn, out.append, identify=row_identity, journal=view)
    ...
    view.close()
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from operator import itemgetter
from types import NoneType
from typing import Any, cast

import pyarrow as pa

from ..core.durable import Recorded
from .store import Entry, StoreTask
from .table import TableWriter
from .table_calls import SettledCalls, Taken
from .task import FLUSH_SECONDS, TaskView

__all__ = ["RECENT", "RECORD_SECONDS", "TableView"]

#: own outcomes kept for equal rows still to come, at least (they arrive together, the input being
#: sorted by key: a key's next row is admitted at most ``capacity`` completions after its call ended)
RECENT = 1024

#: on this route a key-run task records its calls from its output batches, so a batch leaves at
#: least this often (seconds) while output waits: a slow service's answers reach the writer as they
#: come, not 10,000 rows later
RECORD_SECONDS = 0.25

#: the writer's period here: an answer waits for its batch (:data:`RECORD_SECONDS`) and then for
#: the next flush, and the two together are the journal's durability window (:data:`FLUSH_SECONDS`)
TABLE_FLUSH_SECONDS = FLUSH_SECONDS - RECORD_SECONDS

#: calls waiting for the writer thread that make it convert them (to Arrow: about 30 bytes a row
#: rather than the Python objects' 500): a flush a second, whatever the rate of calls, and the
#: memory of a few thousand calls
CHUNK = 8192

_THIRD = itemgetter(2)

#: (identity, input row, results) of one call, as :class:`TableView` hands them to ``to_table``
#: (no identity for a key run's call: see :meth:`TableView.settled`)
TableEntry = tuple["str | None", Any, list[Any]]


class TableView(TaskView):
    """A :class:`~aiospark.journal.task.TaskView` whose results go to the table (see the module
    docstring). ``to_table(entries)`` makes the table of a list of :data:`TableEntry` (the writer
    thread converts calls as a few thousand gather, :data:`CHUNK`); a file's rows are in the
    order the calls ended (a retry sorts what it reads: :mod:`.table_prior`).
    :attr:`writer` is set before the first call, and what earlier attempts of the task wrote is
    added to :attr:`known` then: the task's folder is known at its first rows."""

    def __init__(self, store_task: StoreTask, keep_errors: bool,
                 to_table: Callable[[list[TableEntry]], pa.Table | None],
                 encode: Callable[[Any], Any] | None = None, rebuild: Callable[[Any, Any], Any] | None = None,
                 recent: int = RECENT,
                 from_output: Callable[[Taken, pa.RecordBatch | None], pa.Table | None] | None = None):
        super().__init__(store_task, keep_errors, encode=encode, rebuild=rebuild, flush_seconds=TABLE_FLUSH_SECONDS)
        self.keep = max(RECENT, recent)
        self.writer: TableWriter | None = None
        self.to_table = to_table
        #: the table's rows of calls taken from the task's output batch (:meth:`output`)
        self.from_output = from_output
        #: key runs: the calls settled and not yet recorded
        self.calls: SettledCalls | None = None
        #: own outcomes of the last :attr:`keep` calls (a dict and its keys in order: cheaper per
        #: call than an OrderedDict)
        self.recent: dict[str, list[Any]] = {}
        self._order: deque[str] = deque()
        self._by_row = True
        #: key runs (:meth:`key_runs`): id(first row of a run) -> the rows after it, while its call
        #: runs; the ids of first rows whose key has a NULL (no identity: never recorded)
        self.followers: dict[int, int] = {}
        self.unkeyed: set[int] = set()

    chunk = CHUNK

    #: the operator asks this view row by row (an identity, a lookup and sharing per element) until
    #: :meth:`key_runs` says the task sends one element per run of equal keys
    records_only = False

    #: no look for runs of recorded rows ahead of admission (the operator's ``looks_ahead``): on
    #: this route a task's rows are the ones Spark found no outcome for, so a run of recorded rows
    #: is rare (a retried task's), and looking costs every row; each row is asked once, as admitted
    looks_ahead = False

    def load(self) -> TableView:
        """Check the manifest and read what is not split by bucket; the bucket segments are asked
        row by row only if some exist (kept errors, other entry points' outcomes)."""
        super().load()
        task: Any = self.store_task
        task.fetch([])  # the first fetch reads the folders not split by bucket, and lists the buckets
        self.known.update(task.cache)
        self._by_row = bool(getattr(task, "present", True))
        return self

    @property
    def fetches_by_row(self) -> bool:
        return self._by_row

    def recorded(self, identity: str) -> Recorded | None:
        results = self.recent.get(identity)
        if results is not None:
            self.hits += 1
            return Recorded(results)
        if identity not in self.known:  # the common case on this route: asked once per row
            return None
        return super().recorded(identity)

    def record_value(self, identity: str, value: Any, results: list[Any] | None,
                     error: BaseException | None) -> None:
        """The outcome of ``value``'s call: a result goes to the table, with the row's key values."""
        if error is not None or results is None:
            self.record(identity, results, error)  # a kept error: the bucket segments'
            return
        if self._failure is not None:
            raise self._failure
        if self.recordable is not None and not self.recordable(results):
            return
        if self.encode is not None:
            results = self.encode(results)
        self._queue((identity, value, results))  # a TableEntry
        recent, order = self.recent, self._order
        if identity not in recent:  # not after a retry of the same identity: it is still in the order
            order.append(identity)
            if len(order) > self.keep:
                del recent[order.popleft()]
        recent[identity] = results

    def key_runs(self, calls: SettledCalls) -> None:
        """From now on the task sends the operator only the first row of each run of equal keys
        (its input is sorted by key; :mod:`aiospark.spark.table_runs`), with the rows after it in
        :attr:`followers`: the operator asks nothing per element (:attr:`records_only`) and hands
        each call over once, to :meth:`settled`; the lane hands each output batch to :meth:`output`.
        Only for a task that can find no outcome of its own (no earlier attempt's files, no bucket
        segment) and keeps no errors."""
        self.records_only = True
        self.calls = calls

    def settled(self, value: Any, results: list[Any], recordable: bool) -> list[Any]:
        """The call of a key run's first row ``value`` is over with ``results`` (``recordable``:
        what the call answered, not its timeout's results): every row of the run takes them (the
        list once per row), and they are recorded from the output batch they become (:meth:`output`;
        not when the key has a NULL)."""
        assert self.calls is not None
        at = id(value)
        if self.unkeyed and at in self.unkeyed:
            self.unkeyed.discard(at)
            recordable = False
        elif recordable:
            if self._failure is not None:
                raise self._failure
            recordable = self.recordable is None or self.recordable(results)
        rows = self.followers.pop(at, 0) if self.followers else 0
        return self.calls.settled(value, results, recordable, rows)

    def output(self, values: list[Any], batch: pa.RecordBatch | None) -> None:
        """The task's next output: the operator emitted ``values`` and the lane converted them
        (those not None) to ``batch``. The calls they answer go to the writer as table rows made of
        ``batch`` (no second conversion), as the output leaves the task."""
        if self._failure is not None:
            raise self._failure
        assert self.calls is not None and self.from_output is not None
        taken = self.calls.take(values, batch)
        for entry in taken.rest:
            self._queue(entry)
        if taken.calls:  # the calls recorded from the batch (``rest`` is not among them)
            table = self.from_output(taken, batch)
            if table is not None:
                self._queue((None, taken.calls, table))  # calls already made table rows

    def close(self) -> None:
        """Record the calls whose outputs never reached a batch (a failed task's), then close."""
        if self.calls is not None and not self._closed:
            self._pending.extend(cast("list[Entry]", self.calls.left()))  # TableEntries, converted by close()
        super().close()

    def _prepare(self, entries: list[Any]) -> tuple[list[Entry], pa.Table | None, int]:
        # record()'s entries are (identity, results or None, error text or None); record_value()'s
        # and settled calls' are (identity, value, results); output()'s (None, calls, table): the
        # third item tells them apart
        kinds = set(map(type, map(_THIRD, entries)))  # one C-level pass: most flushes hold one kind
        errors = [e for e in entries if e[2] is None or type(e[2]) is str] if str in kinds or NoneType in kinds else []
        made = [e for e in entries if type(e[2]) is pa.Table] if pa.Table in kinds else []
        calls = cast("list[TableEntry]", [e for e in entries if type(e[2]) is list] if errors or made else entries)
        tables = [e[2] for e in made]
        converted = self.to_table(calls) if calls else None
        if converted is not None:
            tables.append(converted)
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables) if tables else None
        return errors, table, len(errors) + len(calls) + sum(e[1] for e in made)

    def _flush(self, chunks: list[Any]) -> None:
        """One flush: the kept errors to the bucket segments, the calls' tables as one file."""
        errors = [e for chunk in chunks for e in chunk[0]]
        if errors:
            self.store_task.write(errors)
        tables = [chunk[1] for chunk in chunks if chunk[1] is not None and chunk[1].num_rows]
        if tables:
            assert self.writer is not None  # set at the task's first rows, before any call
            self.writer.write(tables[0] if len(tables) == 1 else pa.concat_tables(tables))
        self.written += sum(chunk[2] for chunk in chunks)
