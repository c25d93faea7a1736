"""The columnar lane of the wait functions: ``batch_size=n, batch_format="pyarrow"``.

With ``batch_format="rows"`` (the default) a batch is a list of dicts and its results a list, one
per row: a Python object per row each way. With ``"pyarrow"`` the function gets a slice of the
Arrow batch Spark hands the task (a ``pyarrow.RecordBatch`` of up to ``batch_size`` rows, no copy)
and returns a ``RecordBatch`` or ``Table`` with one row per input row, in order; nothing is made
per row. The life of one such batch, top-down:

1. Each Arrow batch Spark gives the task is cut into slices of ``batch_size`` rows (the last one of
   each may be shorter: the lane never waits for rows to fill a slice, so ``batch_delay`` does
   not apply).
2. A slice is one element of the operator: one queue entry, one call in one real
   ``asyncio.Task``, with the operator's timeout, retries, rate limit and budget applying to the
   call. ``capacity`` still counts rows: ``capacity // batch_size`` calls are in flight.
3. Its output leaves through the operator's one emit path, tagged with its input
   (:class:`Piece`), and off the loop, on the task's thread, is matched to the schema
   (:class:`~aiospark.spark.arrow_conform.Conform`) and checked to have one row per input row.

A slice is what succeeds or fails: a call that fails (after its retries) or times out fails all its
rows -- the task fails naming the slice, or with ``on_error="row"`` each of its rows becomes an
error row carrying the error (:class:`ErrorRows`); an output that does not fit the schema does the
same. Unlike the rows lane, a failed slice is not split to find a bad row: that would re-call the
good ones. A rate limit charges a call 1 (as in the rows lane), a budget charges it its rows.

Example::

    async def score(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = await model.predict(batch.column("text").to_pylist())
        return pa.record_batch({"id": batch.column("id"), "score": pa.array(values)})

    aiospark.ordered_wait(df, score, "id LONG, score DOUBLE", batch_size=512, batch_format="pyarrow")
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..core import AsyncFunction
from ..core.batches import BatchError
from ..core.errors import describe_input
from .arrow_conform import Conform
from .checked import TaggedFunction, untagged_retry
from .schema import OutputSchemaError, RowConverter, arrow_schema, to_python
from .task import TaskPlan, run_task

if TYPE_CHECKING:
    from .options import CallOptions

ROWS = "rows"
PYARROW = "pyarrow"
BATCH_FORMATS = (ROWS, PYARROW)


def check_batch_format(batch_format: Any, *, batch_size: int | None, capacity: Any, rate_limit: Any,
                       budget: Any, journal: Any, name: str) -> str:
    """``batch_format`` validated with the arguments it constrains (on the driver)."""
    if batch_format not in BATCH_FORMATS:
        raise ValueError(f"batch_format must be one of {BATCH_FORMATS}: 'rows' passes a list of dicts, 'pyarrow' "
                         f"a pyarrow.RecordBatch; got {batch_format!r}")
    if batch_format == ROWS:
        return ROWS
    if batch_size is None:
        raise ValueError(f"{name}: batch_format='pyarrow' needs batch_size= (rows per call), e.g. batch_size=256")
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        raise ValueError(f"{name}: batch_format='pyarrow' takes a number for capacity (rows in flight), not "
                         f"{capacity!r}; capacity='auto' adapts calls of single rows (use batch_format='rows')")
    for what, owner in (("rate_limit", rate_limit), ("budget", budget)):
        if getattr(owner, "cost", None) is not None:
            raise ValueError(f"{name}: the {what}'s cost(row) is a function of one row, and batch_format='pyarrow' "
                             f"has no row objects: drop cost= or use batch_format='rows'")
    if journal is not None:
        raise ValueError(f"{name}: a journal records rows one by one, and batch_format='pyarrow' calls slices "
                         f"of rows: drop journal= or use batch_format='rows'")
    return PYARROW


class Piece:
    """A call's input slice and its outputs (a list of RecordBatches or Tables), on their way to
    the check on the task's thread."""

    __slots__ = ("input", "outputs")

    def __init__(self, input: pa.RecordBatch, outputs: list[Any]):
        self.input = input
        self.outputs = outputs


class ErrorRows:
    """Under ``on_error="row"``: every row of a failed slice becomes an error row with ``error``."""

    __slots__ = ("input", "error")

    def __init__(self, input: pa.RecordBatch, error: str):
        self.input = input
        self.error = error


def slices(batch: pa.RecordBatch, size: int) -> list[pa.RecordBatch]:
    """``batch`` cut into slices of ``size`` rows (zero-copy)."""
    return [batch.slice(start, size) for start in range(0, batch.num_rows, size)]


def tagged(function: Any) -> Any:
    """The function as the operator calls it: its outputs tagged with the slice they answer."""
    if isinstance(function, AsyncFunction):
        return TaggedFunction(function, _tag)

    async def call(batch: pa.RecordBatch) -> Piece:
        return Piece(batch, [await function(batch)])

    call.__qualname__ = getattr(function, "__qualname__", "function")  # errors name the user's function
    return call


def untag(results: list[Any]) -> list[Any]:
    """What a retry's result predicate sees: the function's own outputs."""
    return list(chain.from_iterable(r.outputs if type(r) is Piece else [r] for r in results))


def _tag(value: Any, results: Any) -> Any:
    if not isinstance(results, (list, tuple)):
        return results  # the operator reports the broken contract
    return [Piece(value, list(results))]


class Settle:
    """Turns a task's emitted pieces into Arrow tables of the task's output schema, in order."""

    def __init__(self, schema: Any, declared: Any, what: str, error_row: Callable[[Any, str], dict] | None,
                 error_text: Callable[[BaseException], str]):
        self.out_schema = arrow_schema(schema)
        self.conform = Conform(arrow_schema(declared), what, declared)
        self.what = what
        #: ``error_row(input_row, text)``: the error row's dict (None: failures fail the task)
        self.error_row = error_row
        self.error_text = error_text
        self.errors = RowConverter(schema, what) if error_row is not None else None

    def __call__(self, values: list[Any]) -> pa.Table:
        tables = [self._table(v) for v in values]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _table(self, value: Any) -> pa.Table:
        if type(value) is ErrorRows:
            return self._error_table(value.input, value.error)
        try:
            return self._checked(value)
        except (OutputSchemaError, BatchError) as exc:
            if self.error_row is None:  # the task fails naming the input, as a failed call does
                raise type(exc)(f"{exc}; for the batch of {value.input.num_rows} input rows starting with "
                                f"{describe_input(to_python(value.input.slice(0, 1))[:1])}") from None
            return self._error_table(value.input, self.error_text(exc))

    def _checked(self, piece: Piece) -> pa.Table:
        tables = [self.conform(output) for output in piece.outputs]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables) if tables else \
            self.conform.schema.empty_table()
        if table.num_rows != piece.input.num_rows:
            raise BatchError(f"{self.what} returned {table.num_rows} rows for a batch of {piece.input.num_rows} "
                             f"inputs: return exactly one row per input row, in order")
        if self.error_row is None:
            return table
        # the error columns: NULL on a row that succeeded
        nulls = [pa.nulls(table.num_rows, self.out_schema.field(i).type)
                 for i in range(table.num_columns, len(self.out_schema))]
        return pa.Table.from_arrays(table.columns + nulls, schema=self.out_schema)

    def _error_table(self, batch: pa.RecordBatch, text: str) -> pa.Table:
        assert self.error_row is not None and self.errors is not None
        rows = [self.error_row(row, text) for row in to_python(batch)]
        return pa.Table.from_batches([self.errors.to_batch(rows)])


def run_lane(options: CallOptions, batches: Iterator[pa.RecordBatch], settle: Settle,
             output_batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The task's output batches: ``batches`` cut into slices of ``options.batch_size`` rows,
    each one call (:func:`aiospark.spark.task.run_task`), settled into the output schema."""
    size = options.batch_size
    assert size is not None  # check_batch_format: the pyarrow lane needs batch_size
    on_error = ErrorRowsOf(settle.error_text) if settle.error_row is not None else None
    plan = TaskPlan(untagged_retry(options, untag), on_error=on_error, invoke=tagged, units=_num_rows,
                    out_rows=max(1, output_batch_rows // size), post_rows=max(1, 1024 // size), count=_slice_rows)
    for values in run_task(plan, (slices(batch, size) for batch in batches)):
        table = settle(values)
        if table.num_rows:
            yield from table.combine_chunks().to_batches()


class ErrorRowsOf:
    """``on_error`` of the lane under ``on_error="row"`` (picklable): a failed slice's rows all
    become error rows carrying the error's text."""

    def __init__(self, error_text: Callable[[BaseException], str]):
        self.error_text = error_text

    def __call__(self, batch: pa.RecordBatch, exc: BaseException) -> list[Any]:
        return [ErrorRows(batch, self.error_text(exc))]


def _num_rows(batch: pa.RecordBatch) -> int:
    return batch.num_rows


def _slice_rows(values: list[Any]) -> int:
    return sum(v.input.num_rows for v in values)


__all__ = ["BATCH_FORMATS", "PYARROW", "ROWS", "ErrorRows", "ErrorRowsOf", "Piece", "Settle", "check_batch_format", "run_lane",
           "slices", "tagged", "untag"]
