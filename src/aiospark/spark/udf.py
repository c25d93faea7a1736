"""``async_udf``: an ``async def`` as a Spark column function (select / withColumn / SQL).

Runs as a scalar Arrow *iterator* UDF: one operator per task sees the whole partition, so calls
stay in flight across Arrow batches, and output order is input order (the operator is ordered).
The decorator touches no session: the Spark UDF object is built when the function is first applied
(or registered), for whichever kind of session (classic or Connect) that is.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from pyspark.sql.types import DataType, StructType

from ..core import AsyncFunction, RetryStrategy
from ..core.function import describe_function
from ..journal import IdempotencyKey, Journal, Manifest, ValuesIdentity
from .budget import Budget
from .journal_location import check_location
from .journaled import Durable, check_journal, shuffle_partitions
from .metrics import Metrics
from .options import AsyncCallable, CallOptions, Capacity, ProgressLike, RateLimitLike
from .progress import check_progress
from .progress_live import watch
from .reach import check_reach
from .schema import check_unique_names
from .udf_runner import UdfRunner

ON_ERROR = ("fail", "null")

try:
    from pyspark.util import PythonEvalType
except ImportError:  # PySpark 3.5 keeps it in pyspark.rdd
    from pyspark.rdd import PythonEvalType  # type: ignore[no-redef,import-not-found,unused-ignore]  # per version

#: Arrow iterator UDFs (PySpark >= 4.1) hand Arrow arrays over as they are; older versions get a
#: pandas iterator UDF (spark/udf_pandas.py), which also keeps calls in flight across batches.
ARROW_ITER = getattr(PythonEvalType, "SQL_SCALAR_ARROW_ITER_UDF", None)
_EVAL_TYPE = ARROW_ITER if ARROW_ITER is not None else PythonEvalType.SQL_SCALAR_PANDAS_ITER_UDF


class AsyncUDF:
    """A column function made by :func:`async_udf`. Call it with columns, or register it for SQL.

    It quacks like a PySpark UDF (``func``, ``returnType``, ``evalType``, ``deterministic``,
    ``asNondeterministic``) so ``spark.udf.register(name, f)`` accepts it on classic and Connect.
    """

    def __init__(self, function: Callable[..., Any] | AsyncFunction, return_type: str | DataType, options: CallOptions,
                 on_error: str, deterministic: bool = True, name: str | None = None):
        self._function = function
        self._return_type = return_type
        self._options = options
        self.on_error = on_error
        self.evalType = _EVAL_TYPE
        self.deterministic = deterministic
        self._built: dict[str, Any] = {}
        self.__name__ = name or getattr(function, "__name__", "async_udf")
        self.__doc__ = function.__doc__
        self.__wrapped__ = function
        #: job-level call metrics of every query that used this function (see aiospark.Metrics)
        self.metrics = options.metrics
        #: identities of rows (their argument values) and the journal, if any (set by async_udf)
        self._durable = Durable(ValuesIdentity(True), None,
                                IdempotencyKey.of_function("async_udf", _user_function(function), None,
                                                           ValuesIdentity(True)))

    @property
    def returnType(self) -> DataType:
        """The return type Spark is told (parsed with the active session the first time it is
        needed). Where Spark runs the pandas iterator UDF (PySpark < 4.1), every nested field is
        declared nullable: that path hands Spark struct fields as nullable whatever the type says,
        and Spark 3.5 asserts they match. The declared NOT NULLs are still checked on every value."""
        declared = self._declared_type()
        return declared if ARROW_ITER is not None else _all_nullable(declared)

    def _declared_type(self) -> DataType:
        if not isinstance(self._return_type, DataType):
            from pyspark.sql.types import _parse_datatype_string

            try:
                parsed = _parse_datatype_string(self._return_type)
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ValueError(f"async_udf return type {self._return_type!r} does not parse as a Spark "
                                 f"DDL type (e.g. 'string', 'int', 'struct<a: int>'): {first}") from None
            check_unique_names(parsed, f"async_udf return type {self._return_type!r}")
            self._return_type = parsed
        return self._return_type

    @property
    def func(self) -> UdfRunner:
        """The function Spark runs in every task: what ``spark.udf.register(name, f)`` takes.

        Registered for SQL on PySpark < 4.1 (a pandas UDF), a NaN argument arrives as None: SQL
        calls it with its arguments only, without the ``isnull`` columns that tell a NaN from a
        NULL when it is called as a column function. Registering warns so."""
        if ARROW_ITER is None:
            warnings.warn(f"async_udf {self.__name__!r} registered for SQL on PySpark < 4.1: a NaN argument "
                          "arrives as None there (pandas has one marker for both; called as a column "
                          "function it arrives as NaN). PySpark >= 4.1 keeps NaN in SQL too.",
                          UserWarning, stacklevel=2)
        return self._runner()

    def _runner(self) -> UdfRunner:
        declared = self._declared_type()
        if ARROW_ITER is None and self.on_error == "null" and isinstance(declared, StructType):
            # a pandas UDF returns a struct column as a DataFrame, which has no NULL row: a failed
            # call would come back as a row of made-up values
            raise ValueError(f"async_udf {self.__name__!r}: on_error='null' with a STRUCT return type needs "
                             "PySpark >= 4.1 (on older releases a NULL struct cannot be returned); use "
                             "on_error='fail', or ordered_wait/unordered_wait with on_error='row'")
        runner = UdfRunner if ARROW_ITER is not None else _pandas_runner()
        made = runner(self._options, self.on_error, self._declared_type(), _arity(self._function),
                      f"async_udf {self.__name__!r}")
        made.durable = self._durable
        return made

    def _masked_func(self) -> UdfRunner:
        """:attr:`func` for arguments followed by their ``isnull`` columns (the pandas flavour: a
        NaN argument is told from a NULL one)."""
        made = self._runner()
        made.masked = True
        return made

    def asNondeterministic(self) -> AsyncUDF:
        """A copy that Spark treats as non-deterministic (never merged, re-ordered or repeated)."""
        copy = AsyncUDF(self._function, self._return_type, self._options, self.on_error, deterministic=False,
                        name=self.__name__)
        copy._durable = self._durable
        return copy

    def __call__(self, *cols: Any) -> Any:
        arity = _arity(self._function)
        if arity is not None and len(cols) != arity:
            raise TypeError(f"async_udf {self.__name__!r} takes {arity} column(s), got {len(cols)}")
        if not cols:
            raise TypeError(f"async_udf {self.__name__!r} needs at least one column argument")
        connect = _is_connect(cols)
        if connect:  # here, not at decoration: a UDF is often defined before any session exists
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            active = getattr(ConnectSession, "getActiveSession", lambda: None)()
            check_reach(active, budget=self._options.budget, what=f"async_udf {self.__name__!r}")
        if ARROW_ITER is None:  # pandas makes a NULL and a NaN one value: each argument's isnull goes along
            functions = _functions(connect)
            cols = cols + tuple(functions.isnull(c) for c in cols)
        return self._spark_udf(connect)(*cols)

    def _spark_udf(self, connect: bool) -> Any:
        kind = "connect" if connect else "classic"
        built = self._built.get(kind)
        if built is None:
            if connect:
                from pyspark.sql.connect.udf import _create_udf
            else:
                from pyspark.sql.udf import _create_udf
            func = self._masked_func() if ARROW_ITER is None else self._runner()
            built = _create_udf(func, self.returnType, self.evalType, name=self.__name__,
                                deterministic=self.deterministic)
            self._built[kind] = built
        return built

    def __repr__(self) -> str:
        return f"<async_udf {self.__name__} -> {self._return_type}>"


class OneValue(AsyncFunction):
    """An :class:`AsyncFunction` used as an ``async_udf``: its ``async_invoke`` must give exactly
    one output per input (the column's value); anything else fails that row, naming the count.

    Example::

        embed = aiospark.async_udf("array<float>")(OpenAIEmbeddings("m", base_url=url))
    """

    def __init__(self, function: AsyncFunction):
        self.function = function

    async def open(self) -> None:
        await self.function.open()

    async def close(self) -> None:
        await self.function.close()

    async def async_invoke(self, value: Any) -> Any:
        return self._one(await self.function.async_invoke(value))

    def timeout(self, value: Any) -> Any:
        results = self.function.timeout(value)
        return self._one_later(results) if inspect.iscoroutine(results) else self._one(results)

    async def _one_later(self, results: Any) -> Any:
        return self._one(await results)

    def _one(self, results: Any) -> Any:
        if isinstance(results, (list, tuple)) and len(results) == 1:
            return results
        count = len(results) if isinstance(results, (list, tuple)) else type(results).__name__
        raise TypeError(f"{type(self.function).__qualname__} used as an async_udf must return a list of exactly "
                        f"one value per input (the column's value), got {count}")

    def __repr__(self) -> str:
        return repr(self.function)


def _pandas_runner() -> type:
    from .udf_pandas import PandasUdfRunner  # imports pandas: only on PySpark < 4.1

    return PandasUdfRunner


def _arity(function: Callable[..., Any] | AsyncFunction) -> int | None:
    if isinstance(function, AsyncFunction):
        return None
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.default is p.empty)


def _functions(connect: bool) -> Any:
    """``pyspark.sql.functions`` for the kind of session (Connect's own module on PySpark 3.5)."""
    if connect:
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def _is_connect(cols: tuple) -> bool:
    for col in cols:
        if type(col).__module__.startswith("pyspark.sql.connect"):
            return True
        if not isinstance(col, str):
            return False
    from pyspark.sql.utils import is_remote

    return is_remote()


def async_udf(return_type: str | DataType, *, timeout: float | None = 60.0, capacity: Capacity = 100,
              retry: RetryStrategy | None = None, on_error: str = "fail", deterministic: bool = True,
              rate_limit: RateLimitLike = None, metrics: Metrics | None = None, batch_size: int | None = None,
              batch_delay: float = 0.01, budget: Budget | None = None,
              journal: Journal | None = None, progress: ProgressLike = False) -> Callable[[AsyncCallable], AsyncUDF]:
    """Decorate ``async def f(*column_values) -> value`` into a Spark column function.

    Output order is input order; ``capacity`` calls are in flight per task, across Arrow batches.
    ``timeout`` is seconds per call, retries included (``None`` or ``<= 0``: no timeout). A value
    that does not fit ``return_type`` exactly (``1.5`` for ``int``) is an ``OutputSchemaError``.
    ``on_error="null"`` turns a failed call (after retries and timeout) into NULL. Like Spark's own
    UDFs it is deterministic by default; pass ``deterministic=False`` for calls that must never be
    merged or repeated by the optimizer (Spark then refuses it inside aggregates). ``capacity``,
    ``rate_limit`` and ``metrics`` work as for :func:`aiospark.ordered_wait`; the metrics of every
    query using the function add up in ``f.metrics``. ``batch_size=n`` calls the function with one
    list per argument column (up to ``n`` rows, waiting at most ``batch_delay`` seconds for a batch
    to fill); it returns a list with one value per row, in order. A failing batch is split in
    halves until the failing row is alone (NULL under ``on_error="null"``). ``journal`` (an
    :class:`aiospark.Journal` without ``key=``: a row is identified by its argument values) records
    each call's value; a rerun calls only the rows not recorded. ``progress=True`` shows the
    progress of every query using the function while it runs (as for :func:`aiospark.ordered_wait`).

    Batched example::

        @aiospark.async_udf("array<float>", batch_size=64, capacity=256)
        async def embed(texts):                      # a list of up to 64 strings
            return await embeddings_api(texts)       # one vector per text, in order

    Example::

        @aiospark.async_udf("string", capacity=200, timeout=5)
        async def country(ip):
            async with session.get(f"http://127.0.0.1:8080/geo/{ip}") as r:
                return (await r.json())["country"]

        df.withColumn("country", country("ip"))
        spark.udf.register("country", country)   # SELECT country(ip) FROM logs
    """
    if not isinstance(return_type, (str, DataType)):
        raise TypeError(f"async_udf(return_type) takes a DDL type string like 'string' or a DataType; got "
                        f"{type(return_type).__name__}" + (" (did you write @async_udf without arguments?)"
                                                          if callable(return_type) else ""))
    if isinstance(return_type, DataType):
        check_unique_names(return_type, f"async_udf return type {return_type.simpleString()!r}")
    if isinstance(return_type, str) and not return_type.strip():
        raise ValueError("async_udf return type is empty: give a DDL type such as 'string' or 'int'")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'fail' (fail the task) or 'null' (NULL for a failed call), got {on_error!r}")
    journal = check_journal(journal, "async_udf")
    progress_options = check_progress(progress, "async_udf")
    if journal is not None and journal.key is not None:
        raise ValueError("async_udf(journal=...) identifies a row by the values of the function's arguments: "
                         "pass aiospark.Journal(location) without key=, or pass only the key columns as arguments")

    def decorate(function: AsyncCallable) -> AsyncUDF:
        name = getattr(function, "__name__", None) or describe_function(function)
        if isinstance(function, AsyncFunction):
            if batch_size is not None:
                raise ValueError(f"async_udf(batch_size=...) batches 'async def' functions; {name} is an "
                                 "AsyncFunction: batch inside it (the OpenAI connector does) and drop batch_size")
            function = OneValue(function)
        options = CallOptions.create(function, ordered=True, timeout=timeout, capacity=capacity, retry=retry,
                                     rate_limit=rate_limit, metrics=metrics, what="async_udf function",
                                     name=name, batch_size=batch_size, batch_delay=batch_delay, budget=budget)
        made = AsyncUDF(function, return_type, options, on_error, bool(deterministic), name=name)
        watch(options.metrics, progress_options, label=getattr(options.metrics, "name", name), budget=budget)
        if journal is not None:
            check_location(journal, _active_session(), "async_udf")
            shown = return_type if isinstance(return_type, str) else return_type.simpleString()
            manifest = Manifest.of("async_udf", function.function if isinstance(function, OneValue) else function,
                                   shown, ["<arguments>"], [])
            bound = journal.bind(manifest, default_buckets=shuffle_partitions(_active_session()))
            made._durable = Durable(ValuesIdentity(True), bound, IdempotencyKey(
                f"async_udf:{manifest.function}:{manifest.code}", None, ValuesIdentity(True)))
        if isinstance(function, OneValue):
            return made
        functools.update_wrapper(made, function, updated=())  # the UDF takes the function's name and doc
        return made

    # validate the shared options now, before any function is seen
    CallOptions.create(_probe, ordered=True, timeout=timeout, capacity=capacity, retry=retry,
                       rate_limit=rate_limit, metrics=metrics if metrics is not None else _NO_METRICS,
                       batch_size=batch_size, batch_delay=batch_delay, budget=budget)
    return decorate


_NO_METRICS = Metrics("validation")


def _user_function(function: Any) -> Any:
    """The function the user gave (an AsyncFunction is wrapped in a OneValue)."""
    return function.function if isinstance(function, OneValue) else function


async def _probe(value: Any) -> Any:  # stands in for the function when validating options early
    return value


def _all_nullable(data_type: DataType) -> DataType:
    """``data_type`` with every nested field, element and value nullable."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _all_nullable(f.dataType), True, f.metadata)
                           for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_all_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _all_nullable(data_type.valueType), True)
    return data_type


def _active_session() -> Any:
    """The session an ``async_udf`` will most likely run in (None before any): decorated early."""
    try:
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession()
    except Exception:
        return None
