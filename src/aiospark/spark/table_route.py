"""The table route of ``unordered_wait`` with a journal: recorded rows served by Spark, no Python.

Where it applies (:func:`table_target`), a run is three parts of one Spark plan:

1. **served**: the input joined on its key columns with the journal's table
   (:mod:`aiospark.journal.table`: each call's results as the output's typed columns, written
   by earlier runs), one answer per key (the file written first), rows that gave no row dropped:
   the recorded rows' outputs, made by Spark alone. A fully recorded rerun never starts Python.
2. **called**: the other rows (a left anti join), ``repartition(B, key...)`` and sorted by key
   within each partition: equal keys meet in one task, one after another, so each key is called
   once: a task sends the operator one row per run of equal keys (:mod:`.table_runs`), or, where
   it must ask its journal row by row (a retried task, kept errors, error rows), the operator
   shares a call with the rows after it while holding only the last few outcomes
   (:class:`~aiospark.journal.table_task.TableView`); each call's results go to the table as the
   call completes (a Parquet file per flush).
3. ``served.unionByName(called)``.

The join compares the key columns with Spark's equality, which is the row identity's only for
types whose values Spark never normalizes (:data:`JOIN_TYPES`: no float, whose NaN and -0.0 a
join folds; no timestamp, whose zone Parquet and Spark may read differently; no nested type):
other keys take the bucket route. The default key (every input column) joins NULL-safe: NULLs
are values there; a NULL in an explicit ``key=`` column makes no identity, never joins, and its
row is called (never recorded). The outcomes of every other route (pickled bucket segments: kept
errors, ``ordered_wait``'s results, a journal from an earlier release) are still found by the
operator, row by row, as on every route; and every other route reads the table of its output
schema whole (:class:`~aiospark.journal.directory_task.DirectoryTask`).

Example (what ``_wait`` does)::

    table = table_target(df, durable, call_facts)
    if table is not None:
        durable.table = table
        out = routed(df, runner, durable, table, out_schema)
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator as op
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, MapType, StructField, StructType
from pyspark.sql.window import Window

from ..journal.directory import DirectoryStore
from ..journal.table import (
    N_COLUMN,
    NO_ROW,
    OUTPUT_NAMES,
    TableWriter,
    key_column,
    may_repeat_keys,
    new_run,
    output_column,
    table_dir,
    table_files,
)
from ..journal.table_calls import SettledCalls, Taken
from ..journal.table_prior import PriorOutcomes, SortKey, filler, sort_key
from ..journal.table_shapes import fitting_files
from ..journal.table_task import TableEntry, TableView
from .arrow_names import map_in_arrow, quoted
from .key_hash import key_partition
from .schema import OutputSchemaError, RowConverter, arrow_schema, to_python
from .table_fit import fitting_calls
from .table_runs import KeyRuns

if TYPE_CHECKING:
    from ..journal import BoundJournal
    from .journaled import Durable

__all__ = ["JOIN_TYPES", "Served", "TableSplit", "TableTarget", "routed", "served_rows", "table_target"]

#: key column types whose Spark equality is the row identity's equality
JOIN_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "string", "boolean", "date", "binary"})

_FILE = "_aiospark_file"
_FIRST = "_aiospark_first"


def _joinable(type_name: str) -> bool:
    return type_name in JOIN_TYPES or (type_name.startswith("decimal(") and " " not in type_name)


def _folded_twice(data_type: Any) -> bool:
    """Whether a struct in ``data_type``, at any depth, has two fields whose names differ only in
    case (top-level outputs are stored by position, nested fields by name)."""
    if isinstance(data_type, StructType):
        names = [f.name.lower() for f in data_type.fields]
        return len(set(names)) < len(names) or any(_folded_twice(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _folded_twice(data_type.elementType)
    if isinstance(data_type, MapType):
        return _folded_twice(data_type.keyType) or _folded_twice(data_type.valueType)
    return False


def table_target(df: Any, durable: Durable, *, ordered: bool, order_key: Any, shuffle: bool, batch_format: str,
                 function: Any, declared: StructType, what: str) -> TableTarget | None:
    """The table route's target for this call, or None where the bucket route serves it (see the
    module docstring for when)."""
    bound = durable.bound
    if (bound is None or ordered or order_key is not None or not shuffle or batch_format != "rows"
            or getattr(df, "isStreaming", False) or getattr(function, "journal_rows", None) is not None
            or not isinstance(bound.store, DirectoryStore) or not bound.store.local):
        return None
    if any(n.startswith("_aiospark_") for n in [*declared.fieldNames(), *df.columns]):
        return None  # the route's own columns (join keys, the partition, the stored outputs)
    if any(_folded_twice(f.dataType) for f in declared.fields):
        return None  # Spark reads Parquet struct fields by name, folding case: `a` and `A` collide
    fields = [df.schema[c] for c in durable.columns]
    if not fields or not all(_joinable(f.dataType.simpleString()) for f in fields):
        return None
    return TableTarget(durable.columns, StructType(fields), declared, nulls=durable.nulls, what=what)


class TableTarget:
    """One definition's table: where its tasks write and how a flush becomes a table (picklable)."""

    def __init__(self, keys: Sequence[str], key_schema: StructType, declared: StructType, nulls: bool, what: str):
        self.keys = list(keys)
        self.nulls = nulls
        #: one definition of the DataFrame: its tasks' retries find their earlier attempts' files
        self.run = new_run()
        self.what = what
        self.declared = declared
        #: the folder it writes: the table of this exact output schema (names, types, NOT NULLs):
        #: the manifest's schema text leaves NOT NULL out and does not quote names, and Spark reads
        #: Parquet columns by name (it reads the other folders whose answers fit: table_shapes)
        self.shape = shape_of(declared)
        self.stored_keys = StructType([StructField(key_column(i), f.dataType, True)
                                       for i, f in enumerate(key_schema.fields)])
        #: output columns are stored by position (``_aiospark_o<j>``; their names in the file's
        #: metadata): names Spark would fold (``v`` and ``V``) or misread stay apart
        self.outputs = StructType([StructField(output_column(j), f.dataType, True)
                                   for j, f in enumerate(declared.fields)])
        #: the calls in flight per task at most (set by ``_wait``): how many own outcomes a task keeps
        self.capacity = 1024
        #: in a task: its journal, where it was opened, and as what attempt
        self.view: Any = None
        self.bound: Any = None
        self.attempt = ""
        #: in a task: what its earlier attempts recorded (read a window at a time), and the
        #: identities of each window handed to the view (rows to call, identities), oldest first
        self.prior: PriorOutcomes | None = None
        self.windows: deque[tuple[int, list[str]]] = deque()
        self.biggest = 0
        #: the input's join columns, in the order the input is sorted by (set by :func:`routed`)
        self.join_names: list[str] = []
        #: whether this run's tasks may send one row per run of equal keys (set by the lane:
        #: a failed call fails the task, no batch_size, outputs stored as they are)
        self.runs_allowed = False
        #: in a task: its hash partition and what its earlier attempts wrote (:meth:`locate`)
        self.part: int | None = None
        self.prior_files: list[str] = []
        self.key_types = list(arrow_schema(self.stored_keys).types)
        self.output_fields = list(arrow_schema(self.declared))
        self.schema = StructType([*self.stored_keys.fields,
                                  StructField(N_COLUMN, IntegerType(), False), *self.outputs.fields])

    def table(self, bound: BoundJournal) -> tuple[Any, str]:
        """``(filesystem, folder)`` of the question's table (every output schema's folder is in it)."""
        assert isinstance(bound.store, DirectoryStore)
        fs, root = bound.store.fs
        return fs, table_dir(f"{root}/{bound.manifest.digest}")

    # ------------------------------------------------------------------ in a task
    def open_view(self, bound: BoundJournal, partition: int, attempt: str, encode: Any, rebuild: Any) -> TableView:
        """This task's view; its folder is known at its first batch (:meth:`start`)."""
        store = bound.store
        assert isinstance(store, DirectoryStore)
        task = store.task(bound.manifest, partition, None, attempt)  # no table_shape: Spark's join read it
        task.table_route = True
        self.bound, self.attempt = bound, attempt
        view = self.view = TableView(task, bound.keep_errors, self.to_table, encode, rebuild,
                                     recent=2 * self.capacity + 16,
                                     from_output=self.from_output).load()
        if (self.runs_allowed and self.part is not None and not self.prior_files and not view.fetches_by_row
                and not bound.keep_errors and encode is None and rebuild is None):
            view.key_runs(SettledCalls(self.keys))  # nothing to find per row: one row per run of equal keys
        return view

    def locate(self, bound: BoundJournal, part: int) -> None:
        """Before the task's view opens: its rows are those of hash partition ``part`` of the key
        (Spark's ``partitionId`` is not: a DataFrame used twice in one plan numbers the second
        use's tasks after the first's); list what earlier attempts and uses wrote in its folder."""
        fs, table = self.table(bound)
        assert isinstance(bound.store, DirectoryStore)
        self.part = part
        self.prior_files = bound.store.guarded("cannot read its outcomes", lambda: table_files(
            fs, table, f"{self.shape}/{self.run}/{part}"))

    def start(self) -> None:
        """At the task's first rows (after :meth:`locate`): what earlier attempts wrote is read as
        the rows come (:meth:`advance`), and the task writes in its folder."""
        bound, view, part = self.bound, self.view, self.part
        assert part is not None
        fs, table = self.table(bound)
        self.prior = bound.store.guarded("cannot read its outcomes", lambda: PriorOutcomes(
            fs, self.prior_files, bound.manifest.key, self.nulls))
        view.writer = TableWriter(fs, f"{table}/{self.shape}", self.run, part, self.attempt)

    def advance(self, last: SortKey, todo: int) -> None:
        """Before a batch whose last key is ``last`` (``todo`` rows of it to call): hand the view
        what earlier attempts recorded for the keys up to it, and forget the windows its
        operator is done with. A window is kept while fewer than ``2 x capacity`` rows to call
        came after it plus the biggest batch: the operator admits a batch's rows (and asks the
        view) up to ``capacity`` rows after the batch was read."""
        prior, view, windows = self.prior, self.view, self.windows
        assert prior is not None and view is not None  # start() came first
        found = self.bound.store.guarded("cannot read its outcomes", lambda: prior.upto(last))
        view.known.update(found)
        windows.append((todo, list(found)))
        self.biggest = max(self.biggest, todo)
        later = sum(rows for rows, _ in windows) - windows[0][0]
        while len(windows) > 1 and later - windows[-1][0] > 2 * self.capacity + self.biggest:
            _, identities = windows.popleft()
            for identity in identities:
                view.known.pop(identity, None)
            later -= windows[0][0]

    def to_table(self, entries: list[TableEntry]) -> pa.Table | None:
        """Calls as the table's rows (in no order: a retry sorts what it reads). A call whose outputs do not fit the declared
        schema (NOT NULL kept) is left out: it is its row's error (error-row mode emits that, and
        the next run calls it again), never an answer a rerun would serve unchecked."""
        converter = RowConverter(self.declared, self.what)
        try:
            return self._table(entries, converter)
        except OutputSchemaError:
            pass
        fitting = []
        for entry in entries:
            try:
                converter.to_batch([r for r in entry[2] if r is not None])
            except OutputSchemaError:
                continue
            fitting.append(entry)
        return self._table(fitting, converter) if fitting else None

    def _table(self, entries: list[TableEntry], converter: RowConverter) -> pa.Table:
        # the writer thread's work for every call: C-level passes (map, itemgetter) where it can
        results = list(map(_ITEM2, entries))
        empty: list[Any] = []  # the calls that gave no row: one row of NULLs each, last
        if set(map(len, results)) == {1} and not any(map(op.is_, map(_ITEM0, results), itertools.repeat(None))):
            values = list(map(_ITEM1, entries))  # one row per call: the common case
            rows = list(map(_ITEM0, results))
            numbers: Any = [0] * len(rows)
        else:
            values, rows, numbers = [], [], []
            for entry, outputs in zip(entries, results):
                outputs = [r for r in outputs if r is not None]
                if not outputs:
                    empty.append(entry[1])
                    continue
                values += [entry[1]] * len(outputs)
                rows += outputs
                numbers += range(len(outputs))
            values += empty
            numbers += [NO_ROW] * len(empty)
        out = converter.to_batch(rows)
        keys = [list(map(op.itemgetter(k), values)) for k in self.keys]
        return self._assemble(keys, numbers, out.columns, len(empty))

    def from_output(self, taken: Taken, batch: pa.RecordBatch | None) -> pa.Table:
        """The table's rows of calls taken from an output batch (:meth:`TableView.output`): their
        outputs are ``batch``'s rows, which the lane converted with the declared schema, as
        :meth:`to_table` would (in a task of key runs a failed call or an output that does not
        fit fails the task)."""
        if batch is None:
            columns: list[Any] = [pa.array([], f.type) for f in self.output_fields]
        elif taken.index is None:
            columns = batch.columns
        else:
            columns = batch.take(pa.array(taken.index, pa.int64())).columns
        rows = len(taken.keys[0]) - taken.empty
        numbers: Any = taken.numbers if taken.numbers is not None else [0] * rows
        if taken.empty:
            numbers = [*numbers, *[NO_ROW] * taken.empty]
        return self._assemble(taken.keys, numbers, columns, taken.empty)

    def _assemble(self, keys: list[list[Any]], numbers: list[int], columns: list[Any], empty: int) -> pa.Table:
        """The table of rows with these key columns' values, ``numbers`` and output ``columns``
        (then ``empty`` calls that gave no row: NULL outputs)."""
        # key columns of plain types (JOIN_TYPES): Arrow takes their Python values exactly
        arrays = [pa.array(values, type=t) for values, t in zip(keys, self.key_types)]
        if empty:
            columns = [pa.concat_arrays([c, pa.nulls(empty, c.type)]) for c in columns]
        names = [f.name for f in self.declared.fields]
        return pa.Table.from_arrays([*arrays, pa.array(numbers, pa.int32()), *columns], names=self.schema.fieldNames(),
                                    metadata={OUTPUT_NAMES: json.dumps(names)})


_ITEM0, _ITEM1, _ITEM2 = op.itemgetter(0), op.itemgetter(1), op.itemgetter(2)


def shape_of(schema: StructType) -> str:
    """16 hex digits of a schema's names, types and nullability (not its comments)."""
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if k != "metadata"}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value
    text = json.dumps(plain(schema.jsonValue()), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Served:
    """Recorded rows of one input batch, already the task's output (an Arrow batch): emitted as
    they are, never through the operator (``direct=`` of :func:`aiospark.runtime.run_partition`)."""

    __slots__ = ("batch",)

    def __init__(self, batch: pa.RecordBatch):
        self.batch = batch


class TableSplit:
    """Each joined batch split into its recorded rows' outputs (:class:`Served`) and the input rows
    still to call (picklable; made by :func:`routed`, used by the operator's lane)."""

    def __init__(self, target: TableTarget, inputs: Sequence[str], outputs: Sequence[str], out_schema: pa.Schema):
        self.target = target
        self.started = False
        self.inputs = list(inputs)
        self.outputs = list(outputs)  # the stored output columns, in declared order
        self.out_schema = out_schema

    def located(self, batches: Iterator[pa.RecordBatch], bound: BoundJournal) -> Iterator[pa.RecordBatch]:
        """``batches`` from the first one with rows, read now: the task's partition, the one its
        first row's join columns hash to (:mod:`.key_hash`, as ``repartition`` hashed every row),
        is found from it (:meth:`TableTarget.locate`) before the task's view opens, which decides
        on key runs."""
        for batch in batches:
            if batch.num_rows:
                first = [batch.column(name)[0] for name in self.target.join_names]
                self.target.locate(bound, key_partition(first, bound.buckets))
                return itertools.chain([batch], batches)
        return iter(())

    def chunks(self, batches: Iterator[pa.RecordBatch]) -> Iterator[Any]:
        """The task's chunks: each batch's recorded outputs (:class:`Served`), then its rows to
        call: each one, or, in a task of key runs, the first row of each run (:mod:`.table_runs`)."""
        runs = None
        for batch in batches:
            served, todo = self(batch)
            if served is not None and served.batch.num_rows:
                yield served
            if runs is None and self.started and self.target.view.records_only:
                target = self.target
                runs = KeyRuns(target.view, target.join_names, self.inputs, target.nulls)
            if todo.num_rows:
                rows = to_python(todo.select(self.inputs)) if runs is None else runs.take(todo)
                if rows:
                    yield rows
        if runs is not None:
            last = runs.end()
            if last:
                yield last

    def __call__(self, batch: pa.RecordBatch) -> tuple[Served | None, pa.RecordBatch]:
        """The batch's recorded outputs, and its rows to call (every column: the join columns too)."""
        if not batch.num_rows:
            return None, batch
        target = self.target
        if not self.started:
            self.started = True
            target.start()
        if N_COLUMN not in batch.schema.names:  # nothing was recorded when the run was defined
            target.advance(self.last_key(batch), batch.num_rows)
            return None, batch
        n = batch.column(N_COLUMN)
        recorded = pc.is_valid(n)
        todo = batch.filter(pc.invert(recorded))
        target.advance(self.last_key(batch), todo.num_rows)
        if todo.num_rows == batch.num_rows:
            return None, todo
        rows = batch.filter(pc.and_(recorded, pc.not_equal(n, NO_ROW)))
        arrays = []
        for i, field in enumerate(self.out_schema):
            if i < len(self.outputs):
                column = rows.column(self.outputs[i])
                arrays.append(column if column.type == field.type else column.cast(field.type))
            else:  # an error-row column: NULL on a recorded result
                arrays.append(pa.nulls(rows.num_rows, field.type))
        return Served(pa.RecordBatch.from_arrays(arrays, schema=self.out_schema)), todo

    def last_key(self, batch: pa.RecordBatch) -> SortKey:
        """The sort key of the batch's last row (the input is sorted by the join columns)."""
        return sort_key([batch.column(name)[-1].as_py() for name in self.target.join_names])


def served_rows(values: list[Any]) -> int:
    """The rows a list of emitted values stands for (``count=`` of the lane's task plan)."""
    return values[0].batch.num_rows if len(values) == 1 and type(values[0]) is Served else len(values)


def _join_columns(columns: list[Any], types: list[Any], nulls: bool, prefix: str) -> tuple[list[Any], list[str]]:
    """The columns a side joins on, and their names: each key itself or, where NULLs are values
    (the default key), ``coalesce(key, <a value of its type>)`` and ``isnull(key)``, so plain
    equality (under a hash partitioning both sides share) is the NULL-safe one."""
    out, names = [], []
    for i, (column, data_type) in enumerate(zip(columns, types)):
        name = f"{prefix}{i}"
        if not nulls:
            out.append(column.alias(name))
            names.append(name)
            continue
        # the filler a retry sorts the table's files with (table_prior.filler): one definition for both
        value = filler(arrow_schema(StructType([StructField("k", data_type)])).field(0).type)
        out += [F.coalesce(column, F.lit(value).cast(data_type)).alias(name), column.isNull().alias(f"{name}_null")]
        names += [name, f"{name}_null"]
    return out, names


def routed(given: Any, runner: Any, durable: Durable, table: TableTarget, out_schema: StructType) -> Any:
    """The DataFrame of the table route (see the module docstring)."""
    bound = durable.bound
    assert bound is not None and isinstance(bound.store, DirectoryStore)
    assert bound.table_shape is not None  # set with the journal by the entry point
    # this schema's files and those of a schema differing in nullability alone whose answers fit
    fs, tabled = table.table(bound)
    found = fitting_files(fs, tabled, bound.table_shape)
    files = found.paths
    types = [f.dataType for f in table.stored_keys.fields]
    inputs = list(given.columns)
    left = given.select(*[F.col(quoted(c)) for c in inputs])
    if table.nulls:
        left_keys, left_names = _join_columns([F.col(quoted(k)) for k in table.keys], types, True, "_aiospark_l")
        left = left.select("*", *left_keys)
    else:  # the key columns themselves: nothing more to shuffle
        left_names = list(table.keys)
    left_columns = [F.col(quoted(n)) for n in left_names]
    # a task finds its hash partition from its first row (TableSplit.located): no column for it
    left = left.repartition(bound.buckets, *left_columns)
    stored_outputs = table.outputs.fieldNames()
    if files:
        rights = table.stored_keys.fieldNames()
        window = found.mixed or may_repeat_keys(found.infos, tabled)  # one answer per key: the first file's
        parts = []
        for check in (False, True):  # the files served whole, then those checked a call at a time
            paths = [p for p in files if (p in found.checked) == check]
            if not paths:
                continue
            part = given.sparkSession.read.schema(table.schema).parquet(*[f"file://{p}" for p in paths])
            if window or check:
                part = part.withColumn(_FILE, F.col("_metadata.file_path"))
            parts.append(fitting_calls(part, table.declared, rights, _FILE, keep_file=window) if check else part)
        stored = functools.reduce(lambda a, b: a.unionByName(b), parts)
        if window:  # a window costs a sort
            stored = stored.withColumn(_FIRST, F.min(_FILE).over(Window.partitionBy(*rights)))
            stored = stored.where(F.col(_FILE) == F.col(_FIRST))
        right_keys, right_names = _join_columns([F.col(r) for r in rights], types, table.nulls, "_aiospark_r")
        right = stored.select(*right_keys, F.col(N_COLUMN),
                              *[F.col(o) for o in stored_outputs])
        right = right.repartition(bound.buckets, *right_names)
        condition = functools.reduce(op.and_, [left[quoted(a)] == right[b] for a, b in zip(left_names, right_names)])
        joined = left.join(right, condition, "left_outer")
    else:
        joined = left
    table.join_names = left_names
    runner.table_split = TableSplit(table, inputs, stored_outputs, RowConverter(out_schema).arrow_schema)
    return map_in_arrow(joined.sortWithinPartitions(*left_columns), runner, out_schema)
