"""``ordered_wait`` / ``unordered_wait``: a DataFrame -> DataFrame async map (0..n rows per row).

Each Spark task runs the rows of its partition through an :class:`~aiospark.core.AsyncWaitOperator`
on the worker's event loop, inside ``mapInArrow``: rows reach the function as dicts (one bulk
``to_pylist`` per Arrow batch) and results go back to Arrow in bulk.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType

from ..core import AsyncFunction, RetryStrategy
from ..core.durable import RecordedError
from ..core.errors import error_line
from ..core.function import describe_function
from ..journal.table_shapes import TableShape
from ..journal.table_task import RECORD_SECONDS
from .arrow_lane import PYARROW, ROWS, Settle, run_lane
from .arrow_names import map_in_arrow
from .budget import Budget
from .checked import Output, OutputChecks, tag_outputs
from .compat import DataFrameLike, DataFrameT
from .dedup import check_dedup, shuffled, use_dedup, without_part
from .journaled import Durable, check_journal, planning
from .metrics import Metrics
from .options import AsyncCallable, CallOptions, Capacity, ProgressLike, RateLimitLike
from .plan import count_run
from .plan_cost import prompt_estimate, with_costs
from .progress import check_progress
from .progress_live import watch
from .reach import check_reach
from .row_key import row_key
from .schema import (
    OutputSchemaError,
    RowConverter,
    arrow_schema,
    check_unique_names,
    none_among_rows,
    parse_schema,
    to_python,
)
from .table_route import Served, TableSplit, routed, served_rows, shape_of, table_target
from .task import TaskPlan, run_task

if TYPE_CHECKING:
    from ..journal import Journal

ON_ERROR = ("fail", "row")

#: Rows per output Arrow batch (Spark's default ``maxRecordsPerBatch``).
OUTPUT_BATCH_ROWS = 10_000

class ErrorRow:
    """What a failed input becomes under ``on_error="row"``: its input and the error text."""

    __slots__ = ("input", "error")

    def __init__(self, input: dict[str, Any], error: str):
        self.input = input
        self.error = error


def error_text(exc: BaseException) -> str:
    """What an error row's ``_error`` says for ``exc``."""
    if isinstance(exc, RecordedError):
        return str(exc)  # a journal's kept error: the text the error row showed when it was recorded
    return error_line(exc)


class _PartitionRunner:
    """The picklable function ``mapInArrow`` runs in every task."""

    def __init__(self, options: CallOptions, schema: StructType, on_error: str, error_column: str,
                 input_column: str, output_batch_rows: int, what: str):
        self.options = options
        self.schema = schema
        self.on_error = on_error
        self.error_column = error_column
        self.input_column = input_column
        self.output_batch_rows = output_batch_rows
        self.what = what
        #: the user's schema as declared (NOT NULL kept), which error-row mode checks outputs against
        self.check_schema: StructType | None = None
        #: row identities and the journal (aiospark.spark.journaled)
        self.durable: Durable | None = None
        #: rows come through the dedup shuffle (aiospark.spark.dedup), with its column to drop
        self.shuffled = False
        #: the table route's split of joined batches into recorded outputs and rows to call
        self.table_split: TableSplit | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.options.batch_format == PYARROW:
            settle = Settle(self.schema, self.check_schema or self.schema, self.what,
                            self._error_dict if self.on_error == "row" else None, error_text)
            return run_lane(self.options, batches, settle, self.output_batch_rows)
        return self._rows_lane(batches)

    def _rows_lane(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        converter = RowConverter(self.schema, self.what)
        options = self.options
        error_mode = self.on_error == "row"
        # error-row mode: an output that does not fit becomes its input's error row (outputs carry
        # their input; checked in bulk per output chunk, row by row only when a chunk does not fit)
        checks = OutputChecks(RowConverter(self.check_schema, self.what), ErrorRow) \
            if error_mode and self.check_schema is not None else None
        invoke = None
        if checks is not None:
            invoke = functools.partial(checks.invoke, batch=options.batch_size is not None)
            options = checks.options(options)  # retry predicates see the rows, not their tags
        split = self.table_split
        plan = TaskPlan(options, durable=self.durable, journal_forms=_journal_forms(options.function, checks is not None),
                        on_error=_error_row if error_mode else None, invoke=invoke, out_rows=self.output_batch_rows,
                        count=len if split is None else served_rows, direct=None if split is None else Served,
                        out_seconds=None if split is None else RECORD_SECONDS,
                        recordable=_rows_without_none if isinstance(options.function, AsyncFunction) else None)
        drop = without_part if self.shuffled else _same
        if split is not None:  # one row per run of equal keys, where nothing is asked per row
            split.target.runs_allowed = not error_mode and options.batch_size is None and checks is None \
                and plan.journal_forms == (None, None)
            assert self.durable is not None and self.durable.bound is not None
            batches = split.located(batches, self.durable.bound)
        chunks = (to_python(drop(batch)) for batch in batches) if split is None else split.chunks(batches)
        for values in run_task(plan, chunks):
            if split is not None and type(values[0]) is Served:  # recorded rows: output already
                yield values[0].batch
                continue
            rows = self._rows(checks.settle(values) if checks is not None else values, error_mode)
            batch = converter.to_batch(rows) if rows else None
            if split is not None and split.target.view.records_only:  # key runs: recorded from the batch
                split.target.view.output(values, batch)
            if batch is not None:
                yield batch

    def _rows(self, values: list[Any], error_mode: bool) -> list[Any]:
        rows = [v for v in values if v is not None]  # a plain function's None means "no row"
        if len(rows) != len(values) and not error_mode and isinstance(self.options.function, AsyncFunction):
            # an AsyncFunction's list holds rows (error-row mode makes its input an error row)
            raise OutputSchemaError(none_among_rows(self.what))
        if error_mode:
            rows = [self._error_dict(r.input, r.error) if type(r) is ErrorRow else r for r in rows]
        return rows

    def _error_dict(self, input: dict[str, Any], error: str) -> dict[str, Any]:
        return {self.error_column: error, self.input_column: input}


def _same(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def _error_row(value: Any, exc: BaseException) -> list[Any]:
    return [ErrorRow(value, error_text(exc))]


def _rows_without_none(results: list[Any]) -> bool:
    """Whether an AsyncFunction's results (tagged with their input in error-row mode) hold no None:
    a None is not a row, so that call is no answer to record."""
    return not any((r.row if type(r) is Output else r) is None for r in results)


def _journal_forms(function: Any, tagged: bool) -> tuple[Any, Any]:
    """``(encode, rebuild)`` of a task's journal (see :class:`aiospark.journal.TaskView`), or
    ``(None, None)`` when outputs are stored as they are (:class:`JournalForms`)."""
    rows = getattr(function, "journal_rows", None)
    if rows is None and not tagged:
        return None, None
    forms = JournalForms(rows, tagged)
    return forms.encode, forms.rebuild


class JournalForms:
    """What is stored of a call's outputs, and a row's outputs rebuilt from it and the row itself
    (picklable). A lookup join stores the looked-up columns only (``rows``: its
    ``function.journal_rows``): every output row is rebuilt from the current input row, whatever
    the journal's key. In error-row mode (``tagged``) outputs are tagged with their input: stored
    untagged, tagged again with the row's own input."""

    def __init__(self, rows: Any, tagged: bool):
        self.rows = rows
        self.tagged = tagged

    def encode(self, results: Any) -> Any:
        if self.tagged:
            results = [r.row if type(r) is Output else r for r in results]
        return self.rows.encode(results) if self.rows is not None else results

    def rebuild(self, value: Any, stored: Any) -> Any:
        outputs = self.rows.rebuild(value, stored) if self.rows is not None else list(stored)
        if not self.tagged or outputs == [None]:  # [None]: a plain function's "no row"
            return outputs
        return tag_outputs(value, outputs)


@dataclass(frozen=True)
class WaitCall:
    """The arguments of one wait entry point (``ordered_wait``, ``unordered_wait``,
    ``lookup_join``), as the user gave them: :func:`_wait` validates them (each error says what to
    change) into the :class:`CallOptions` every task gets. ``name``: how errors and metrics name
    the call (default: the entry point's name)."""

    function: AsyncCallable
    schema: str | StructType
    ordered: bool
    timeout: float | None = 60.0
    capacity: Capacity = 100
    retry: RetryStrategy | None = None
    on_error: str = "fail"
    error_column: str = "_error"
    input_column: str = "_input"
    output_batch_rows: int = OUTPUT_BATCH_ROWS
    rate_limit: RateLimitLike = None
    metrics: Metrics | None = None
    name: str | None = None
    batch_size: int | None = None
    batch_delay: float = 0.01
    key: str | Sequence[str] | None = None
    budget: Budget | None = None
    journal: Journal | None = None
    progress: ProgressLike = False
    batch_format: str = ROWS
    dedup: bool | None = None


def _wait(df: DataFrameLike, call: WaitCall) -> Any:
    function, ordered, on_error, budget, journal = call.function, call.ordered, call.on_error, call.budget, call.journal
    error_column, input_column, output_batch_rows = call.error_column, call.input_column, call.output_batch_rows
    name = call.name or ("ordered_wait" if ordered else "unordered_wait")
    progress_options = check_progress(call.progress, name.split(" ")[0])
    if not hasattr(df, "mapInArrow") or not hasattr(df, "sparkSession"):
        raise TypeError(f"{name}() takes a pyspark DataFrame first, got {type(df).__name__}")
    # before anything asks the server: a Connect server elsewhere cannot reach this process's ledger
    check_reach(df.sparkSession, budget=budget, progress=progress_options is not None, what=name.split(" ")[0])
    dedup = check_dedup(call.dedup, name.split(" ")[0])
    order_key = row_key(df, call.key, name) if call.key is not None else None
    options = CallOptions.create(function, ordered=ordered, timeout=call.timeout, capacity=call.capacity,
                                 retry=call.retry, rate_limit=call.rate_limit, metrics=call.metrics, name=name,
                                 batch_size=call.batch_size, batch_delay=call.batch_delay, order_key=order_key,
                                 budget=budget, batch_format=call.batch_format, journal=journal)
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}: 'fail' fails the task, 'row' yields an error "
                         f"row per failed input; got {on_error!r}")
    if isinstance(output_batch_rows, bool) or not isinstance(output_batch_rows, int) or output_batch_rows < 1:
        raise ValueError(f"output_batch_rows must be an int >= 1, got {output_batch_rows!r}")
    check_unique_names(df.schema, f"{name}(): the DataFrame")  # clearer than mapInArrow's AMBIGUOUS_REFERENCE
    out_schema = parse_schema(df.sparkSession, call.schema, f"{name}(): the schema")
    declared = out_schema
    if on_error == "row":
        taken = set(out_schema.fieldNames())
        for col in (error_column, input_column):
            if not isinstance(col, str) or not col:
                raise ValueError(f"error_column/input_column must be non-empty strings, got {col!r}")
            if col in taken:
                raise ValueError(f"the error-row column {col!r} is also a column of the schema: pass "
                                 "error_column=/input_column= with other names")
        if error_column == input_column:
            raise ValueError("error_column and input_column must differ")
        # an error row holds NULL in every schema column: they are nullable in the output
        out_schema = StructType([StructField(f.name, f.dataType, True, f.metadata) for f in out_schema.fields] + [
            StructField(error_column, StringType(), True),
            StructField(input_column, df.schema, True),
        ])
    runner = _PartitionRunner(options, out_schema, on_error, error_column, input_column, output_batch_rows,
                              f"{name} function {describe_function(function)!r}")
    runner.check_schema = declared
    # the question is the schema the user declared: not the columns on_error="row" adds (a lookup
    # join's: the looked-up columns it stores, not the input columns rebuilt from the current row)
    asked = getattr(function, "journal_schema", None) or declared.simpleString()
    # decided before the journal is bound: a refused dedup= leaves the journal untouched
    keys = None if call.key is None else ([call.key] if isinstance(call.key, str) else list(call.key))
    journal = check_journal(journal, name.split(" ")[0])
    identity_columns = [] if journal is None else Durable.identity_columns(journal, list(df.columns), name, function)
    shuffle = use_dedup(dedup, journal is not None, ordered, keys, identity_columns, name)
    durable = runner.durable = Durable.prepare(journal, df, name, function, asked)
    if durable.bound is not None:  # every route reads the tables whose answers fit this schema
        durable.bound.table_shape = TableShape(shape_of(declared), arrow_schema(declared))
    given = df
    table = None if planning() else table_target(
        df, durable, ordered=ordered, order_key=order_key, shuffle=shuffle, batch_format=call.batch_format,
        function=function, declared=declared, what=runner.what)
    if shuffle and table is None:
        df = shuffled(df, durable, name.split(" ")[0])  # equal keys meet in one task: each called once per job
        runner.shuffled = True
    if planning():  # aiospark.plan(): the counts of this run instead of the run
        counted = count_run(given, durable, shuffled=df if shuffle else None, entry=name.split(" ")[0],
                            lookup_on=getattr(function, "null_misses", ()),
                            estimate=prompt_estimate(function, given.columns))
        return with_costs(counted, given, function)
    if table is not None:  # recorded rows served by a Spark join; the others called, sorted by key
        table.capacity = options.max_capacity
        durable.table = table
        out = routed(given, runner, durable, table, out_schema)
    else:
        out = map_in_arrow(df, runner, out_schema)
    # read after the action: print(out.aiospark_metrics); an attribute of aiospark's on Spark's object
    out.aiospark_metrics = options.metrics
    watch(options.metrics, progress_options, label=getattr(options.metrics, "name", name), budget=budget,
          session=df.sparkSession)
    return out


def ordered_wait(df: DataFrameT, function: AsyncCallable, schema: str | StructType, *,
                 timeout: float | None = 60.0, capacity: Capacity = 100, retry: RetryStrategy | None = None,
                 on_error: str = "fail", error_column: str = "_error", input_column: str = "_input",
                 rate_limit: RateLimitLike = None, metrics: Metrics | None = None,
                 output_batch_rows: int = OUTPUT_BATCH_ROWS, batch_size: int | None = None,
                 batch_delay: float = 0.01, budget: Budget | None = None, journal: Journal | None = None,
                 progress: ProgressLike = False, batch_format: str = ROWS, dedup: bool | None = None) -> DataFrameT:
    """Call ``function`` for every row, many at once per task; output keeps each partition's order.

    ``function`` is ``async def f(row: dict) -> dict | tuple | Row | None`` (``None`` = no row) or
    an :class:`aiospark.AsyncFunction` whose ``async_invoke`` returns a list of rows. ``schema`` is a
    DDL string or StructType of the output. ``capacity`` is the number of calls in flight per task;
    ``timeout`` (seconds per input, retries included; ``None`` or ``<= 0`` means no timeout) and
    ``retry`` work as in the core operator. Outputs must fit ``schema`` exactly (no float with a
    fraction into an integer column, no NULL in a NOT NULL column, no misspelt key on any row):
    else an ``OutputSchemaError`` names the function, column and value, or, with ``on_error="row"``,
    that input yields its error row.
    ``on_error="row"`` keeps going on failures: each failed input yields one row whose schema
    columns are NULL, ``error_column`` holds the error text and ``input_column`` the input row.
    ``capacity="auto"`` adapts the calls in flight (AIMD, up to 1000; or pass an
    ``AdaptiveConcurrency(max_limit)``); ``rate_limit`` caps calls per second per task (a number
    or ``RateLimit(rate, per=, burst=, cost=)``) or in total (``RedisRateLimit``; retries count too).
    ``metrics`` (an :class:`aiospark.Metrics`, made for you when omitted and reachable as
    ``out.aiospark_metrics``) sums the tasks' call counters and latencies after the action.
    ``batch_size=n`` calls ``function`` with a list of up to ``n`` rows (waiting at most
    ``batch_delay`` seconds for a batch to fill); it returns a list with one result per row, in
    order (an AsyncFunction: one list of rows per row). ``capacity`` still counts rows; timeout,
    retries and rate limit apply per batch; a batch whose error may be a row's (``BadInput``, or
    an error ``retry`` does not retry) is split in halves until the row that fails is alone (its
    neighbours succeed); see ``aiospark.core.splits`` for the rule and the calls it may cost.
    ``batch_format="pyarrow"`` (with ``batch_size``) is the columnar lane: the function gets a
    ``pyarrow.RecordBatch`` of up to ``batch_size`` input rows and returns a ``RecordBatch`` or
    ``Table`` with one row per input row, in order; no Python object is made per row. A batch
    succeeds or fails as a whole (see :mod:`aiospark.spark.arrow_lane`).
    ``budget`` (an :class:`aiospark.Budget`) caps the units of calls started in the whole job,
    retries included; once spent, the rows not started fail with ``BudgetExhausted`` (error rows
    with ``on_error="row"``).
    ``journal`` (an :class:`aiospark.Journal`) records each row's outcome as its call completes: a
    row already recorded (a task retry, a rerun) is not called again but emitted from the record,
    and rows with equal keys in one task are called once. A recorded outcome is found by the row's
    key wherever Spark puts the row (another partitioning, a later micro-batch). ``dedup``: None
    (default) or False here; ``dedup=True`` is refused: the shuffle that pays equal keys once per
    job (:func:`unordered_wait`) would change the order this keeps.
    ``progress=True`` (or an ``aiospark.ProgressOptions``) shows each action's progress while
    it runs: rows, rows/s, in flight, errors, retries, tokens, budget left, tasks done and ETA, in
    place on a terminal or in Jupyter, one plain line every 30 s in a log (``aiospark.spark.progress``).

    Example::

        async def enrich(row):
            async with session.get(f"http://127.0.0.1:8080/item/{row['id']}") as r:
                return {"id": row["id"], "name": (await r.json())["name"]}

        out = aiospark.ordered_wait(df, enrich, "id LONG, name STRING", capacity=200, timeout=5)
    """
    return _wait(df, WaitCall(function, schema, True, timeout, capacity, retry, on_error, error_column, input_column,
                              output_batch_rows, rate_limit, metrics, batch_size=batch_size, batch_delay=batch_delay,
                              budget=budget, journal=journal, progress=progress, batch_format=batch_format,
                              dedup=dedup))


def unordered_wait(df: DataFrameT, function: AsyncCallable, schema: str | StructType, *,
                   timeout: float | None = 60.0, capacity: Capacity = 100, retry: RetryStrategy | None = None,
                   on_error: str = "fail", error_column: str = "_error", input_column: str = "_input",
                   rate_limit: RateLimitLike = None, metrics: Metrics | None = None,
                   output_batch_rows: int = OUTPUT_BATCH_ROWS, batch_size: int | None = None,
                   batch_delay: float = 0.01, key: str | Sequence[str] | None = None,
                   budget: Budget | None = None, journal: Journal | None = None, progress: ProgressLike = False,
                   batch_format: str = ROWS, dedup: bool | None = None) -> DataFrameT:
    """Like :func:`ordered_wait`, but rows are emitted as their calls complete (higher throughput
    when latencies vary: a slow call does not hold back the others).

    ``key`` (a column name or a list of them) keeps per-key order, as for a change stream: calls
    for rows with equal keys run one at a time, in input order, and so are emitted; different
    keys run concurrently. Order holds within a Spark partition: partition the input by key
    (as a Kafka topic keyed by it is) for order across the whole job.

    ``dedup`` (with a ``journal``): rows are first shuffled by their journal key
    (:mod:`aiospark.spark.dedup`), so each distinct key is called once per job, its outcome given
    to every row holding it. None (default): on when a journal is given and no order is kept
    (no ``key=``, or a ``key=`` covering the journal's key columns); False: no shuffle (equal
    keys shared within a task only); True: on, or a ValueError saying why it cannot be.

    Example::

        df.transform(aiospark.unordered_wait, enrich, "id LONG, name STRING", capacity=500)
        aiospark.unordered_wait(changes, apply_change, "account LONG, balance LONG", key="account")
    """
    return _wait(df, WaitCall(function, schema, False, timeout, capacity, retry, on_error, error_column, input_column,
                              output_batch_rows, rate_limit, metrics, batch_size=batch_size, batch_delay=batch_delay,
                              key=key, budget=budget, journal=journal, progress=progress, batch_format=batch_format,
                              dedup=dedup))
