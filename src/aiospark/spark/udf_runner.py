"""The function each task of an ``async_udf`` runs, shared by the Arrow and pandas flavours.

:mod:`aiospark.spark.udf` (the decorator, the UDF object) and :mod:`aiospark.spark.udf_pandas`
(PySpark < 4.1) both import it, so neither imports the other at module level.

Example::

    runner = UdfRunner(options, "fail", LongType(), 1, "async_udf 'f'")
    for out in runner(iter([pa.array([1, 2])])):   # what Spark does in every task
        ...                                         # pa.array([f(1), f(2)])
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.types import DataType

from ..core import AsyncFunction
from ..core.errors import describe_input
from ..core.function import describe_function
from .journaled import Durable
from .options import CallOptions
from .schema import OutputSchemaError, arrow_type, to_python, values_to_array
from .task import TaskPlan, run_task

__all__ = ["UdfInvoke", "UdfRunner", "ValueConverter", "batch_call"]


def _null_on_error(value: Any, exc: BaseException) -> list:
    return [None]


class UdfRunner:
    """The picklable function each task runs: iterator of Arrow arrays in, iterator out.

    ``results`` (the operator over a task's chunks of argument values) is what both flavours share:
    this class takes Arrow arrays (PySpark >= 4.1), :class:`~aiospark.spark.udf_pandas.PandasUdfRunner`
    pandas Series (3.5, 4.0).
    """

    def __init__(self, options: CallOptions, on_error: str, return_type: DataType, arity: int, what: str):
        self.options = options
        self.on_error = on_error
        self.return_type = return_type
        self.arity = arity
        self.what = what
        #: row identities (the arguments' values) and the journal (aiospark.spark.journaled)
        self.durable: Durable | None = None
        #: each argument comes with a second column saying whether it is NULL (pandas flavour only)
        self.masked = False

    def __call__(self, arrays: Iterator[Any]) -> Iterator[pa.Array]:
        pa_type = arrow_type(self.return_type)
        wrap_single = self.arity != 1 and not isinstance(self.options.function, AsyncFunction)

        def to_values(batch: Any) -> list:
            # Spark hands one pa.Array for a single column and a tuple of arrays for several
            if isinstance(batch, tuple):
                return list(zip(*[to_python(a) for a in batch]))
            values = to_python(batch)
            return [(v,) for v in values] if wrap_single else values

        convert = self.converter()
        for values in self.results(convert.fed(to_values(batch) for batch in arrays)):
            yield convert(values, pa_type)

    def converter(self) -> ValueConverter:
        """This task's converter of results to Arrow."""
        return ValueConverter(self.return_type, self.what, self.on_error == "null")

    def results(self, chunks: Iterator[list]) -> Iterator[list]:
        """Run chunks of argument values (a tuple per row when the function spreads several) through
        this task's operator; yields lists of results in input order."""
        return run_task(self.plan(), chunks)

    def plan(self) -> TaskPlan:
        """What :func:`~aiospark.spark.task.run_task` does in each task (picklable)."""
        options = self.options
        return TaskPlan(options, durable=self.durable, on_error=_null_on_error if self.on_error == "null" else None,
                        invoke=UdfInvoke(options.batch_size is not None, self.arity != 1), out_rows=1)


class UdfInvoke:
    """The function as an ``async_udf``'s operator calls it (picklable): a batch of rows in, one
    list per argument column out (``batch_call``); a tuple of values spread into arguments
    (``spread``, several argument columns); an AsyncFunction (internal: lookups) as it is."""

    def __init__(self, batched: bool, spread: bool):
        self.batched = batched
        self.spread = spread

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        if self.batched and not isinstance(function, AsyncFunction):
            return batch_call(function, self.spread)
        if not self.spread or isinstance(function, AsyncFunction):
            return function  # an AsyncFunction (internal: lookups) takes the tuple of values

        async def call(args: tuple) -> Any:
            return await function(*args)

        call.__qualname__ = describe_function(function)  # warnings and errors name the user's function
        return call


class ValueConverter:
    """One task's results -> Arrow arrays of the return type, exactly (:func:`values_to_array`).

    A result that does not fit is that row's failure, like a failed call: under ``on_error="null"``
    it becomes NULL (the others of its chunk are kept), else the task fails naming the row's
    arguments (the task's inputs are kept in order until their results are converted: one result
    per input, in input order). Whether the task's datetimes are naive or aware is fixed by its
    first one, across all its chunks.
    """

    def __init__(self, return_type: DataType, what: str, null_on_error: bool):
        self.return_type = return_type
        self.what = what
        self.null_on_error = null_on_error
        self.aware: dict[str, bool] = {}
        self._inputs: deque[Any] = deque()
        #: a check of the converted array (why it cannot be returned, or None)
        self.extra_check: Callable[[pa.Array], str | None] | None = None

    def fed(self, chunks: Iterator[list]) -> Iterator[list]:
        """``chunks`` as they are, their values remembered until their results are converted."""
        for chunk in chunks:
            self._inputs.extend(chunk)
            yield chunk

    def __call__(self, values: list, pa_type: pa.DataType) -> pa.Array:
        inputs = [self._inputs.popleft() for _ in range(min(len(values), len(self._inputs)))]
        try:
            return self._array(values, pa_type)
        except OutputSchemaError:
            pass
        kept = []
        for row, value in enumerate(values):  # only when the chunk does not fit: which rows do not
            try:
                self._array([value], pa_type)
            except OutputSchemaError as exc:
                if not self.null_on_error:
                    shown = describe_input(inputs[row], 200) if row < len(inputs) else f"row {row}"
                    raise OutputSchemaError(f"{exc}; for the input {shown}") from None
                value = None
            kept.append(value)
        return self._array(kept, pa_type)

    def _array(self, values: list, pa_type: pa.DataType) -> pa.Array:
        array = values_to_array(values, self.return_type, pa_type, self.what, self.aware)
        why = self.extra_check(array) if self.extra_check is not None else None
        if why is not None:
            raise OutputSchemaError(f"{self.what} returned {why}")
        return array


def batch_call(function: Callable[..., Any], spread: bool) -> Callable[..., Any]:
    """A batch of rows in, one list per argument column out to ``function``."""
    if spread:
        async def call(rows: list) -> Any:
            return await function(*[list(column) for column in zip(*rows)])
    else:
        async def call(rows: list) -> Any:
            return await function(rows)

    call.__qualname__ = describe_function(function)
    return call
