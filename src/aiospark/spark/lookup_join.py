"""``lookup_join``: Flink SQL's async lookup join for DataFrames, and ``lookup_udf`` for Spark SQL.

For every input row the key columns ``on`` are looked up in a :class:`~aiospark.lookup.LookupSource`
(through a per-worker :class:`~aiospark.lookup.Lookuper`: optional :class:`~aiospark.lookup.LookupCache`,
coalescing of concurrent lookups of one key, batching when the source supports it), and the 0..n
rows found are joined onto the input columns. A NULL in any key column is a miss with no lookup.

Key values reach the source as Spark values and are converted to its key types by
:mod:`aiospark.lookup.keys` (Spark SQL's cast rules); key columns whose conversion would depend on
the session (TIMESTAMP, FLOAT, complex types) are refused here, with the cast to write instead.

A ``retry`` with a ``result_predicate`` sees what the source returned for the row's key (a list of
looked-up rows, ``[]`` for a miss), before the join pads a miss for ``how="left"`` -- so
``retry_if_empty`` retries misses in left joins as in inner ones (Flink's FLIP-234 ``lookup_miss``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from ..core import AsyncFunction, RetryStrategy
from ..lookup import LookupCache, Lookuper, LookupSource
from ..lookup.keys import UNSUPPORTED_KEY_TYPES
from .compat import DataFrameLike, DataFrameT
from .schema import parse_schema
from .wait import WaitCall, _wait

if TYPE_CHECKING:
    from ..journal import Journal
    from .budget import Budget
    from .metrics import Metrics
    from .options import ProgressLike, RateLimitLike

HOW = ("left", "inner")


class _LookupJoin(AsyncFunction):
    """Looks each row up and joins what it finds; opened once per worker (shared cache)."""

    def __init__(self, source: LookupSource, on: list[str], columns: list[str], how: str,
                 cache: LookupCache | None, batch: bool, names: Sequence[str] = (),
                 pad_as_tuple: bool = False, journal_schema: str = ""):
        self.lookuper = Lookuper(source, cache=cache, batch=batch)
        self.on = on
        self.columns = columns
        self.left = how == "left"
        #: the output columns, in order (a padded miss is then a tuple, which the retry predicate
        #: wrapper tells apart from the dicts of hits: see _SourceRows)
        self.names = names
        self.pad_as_tuple = pad_as_tuple
        self.source, self.how = source, how
        #: what a journal stores of a row's outputs, and how they are rebuilt (see _JoinedRows)
        self.journal_rows = _JoinedRows(columns, names, pad_as_tuple)
        #: a journal's identity always covers the looked-up key: the answer depends on the ``on``
        #: values, so a row whose ``on`` values changed under the same ``Journal(key=)`` value
        #: (order 100 moved to customer 2) is another question, looked up again
        self.journal_identity_columns = list(on)
        #: a NULL in these is a miss, answered without a call (what aiospark.plan counts apart)
        self.null_misses = list(on)
        #: the schema a journal's manifest pins: the looked-up columns it stores (the input
        #: columns are the current row's: adding or reordering them asks the same question)
        self.journal_schema = journal_schema

    def __aiospark_fingerprint__(self) -> dict[str, Any]:
        """What decides this join's answers (a journal's manifest): the source (its own settings:
        what it reads, never its credentials or connections), the key and the looked-up columns."""
        return {"source": self.source, "on": self.on, "columns": self.columns, "how": self.how}

    async def open(self) -> None:
        await self.lookuper.open()

    async def close(self) -> None:
        await self.lookuper.close()

    async def async_invoke(self, row: dict[str, Any]) -> list[Any]:  # the joined dicts, or a padded tuple
        on = self.on
        key = (row[on[0]],) if len(on) == 1 else tuple([row[name] for name in on])
        found = await self.lookuper.lookup(key)  # [] for a NULL in the key, without a source call
        if not found:
            if not self.left:
                return []
            if self.pad_as_tuple:
                return [tuple(row.get(n) for n in self.names)]
            return [row]
        out = []
        for hit in found:
            joined = row.copy()
            for c in self.columns:
                joined[c] = hit.get(c)
            out.append(joined)
        return out


class _JoinedRows:
    """A lookup join's outputs as a journal keeps them: only the looked-up columns of each row
    found (a dict), or None for a left join's padded miss -- never the input row's own columns.
    A recorded (or shared) outcome is rebuilt onto the current input row, so two rows with equal
    keys (order 1 and order 2 of customer 7) each keep their own columns."""

    def __init__(self, columns: list[str], names: Sequence[str], pad_as_tuple: bool):
        self.columns = columns
        self.names = names
        self.pad_as_tuple = pad_as_tuple

    def encode(self, results: list[Any]) -> list[Any]:
        columns = self.columns
        out: list[Any] = []
        for r in results:
            if type(r) is dict and all(c in r for c in columns) and columns:
                out.append({c: r[c] for c in columns})
            else:  # a padded miss (the input row itself, or its tuple); no looked-up value in it
                out.append(None)
        return out

    def rebuild(self, row: dict[str, Any], stored: list[Any]) -> list[Any]:
        out: list[Any] = []
        for found in stored:
            if found is None:
                out.append(tuple(row.get(n) for n in self.names) if self.pad_as_tuple else row)
            else:
                joined = row.copy()
                joined.update(found)
                out.append(joined)
        return out


class _LookupValues(AsyncFunction):
    """The SQL flavour: key column values in, the array of looked-up structs out."""

    def __init__(self, source: LookupSource, columns: list[str], cache: LookupCache | None, batch: bool):
        self.lookuper = Lookuper(source, cache=cache, batch=batch)
        self.columns = columns

    async def open(self) -> None:
        await self.lookuper.open()

    async def close(self) -> None:
        await self.lookuper.close()

    async def async_invoke(self, key: Any) -> list[Any]:
        key = key if isinstance(key, tuple) else (key,)
        found = [] if None in key else await self.lookuper.lookup(key)
        return [[{c: hit.get(c) for c in self.columns} for hit in found]]


class _SourceRows:
    """A retry ``result_predicate`` applied to what the source returned instead of the join's output.

    Join outputs: dicts for rows found (their looked-up columns are the source's row), a tuple for
    a padded miss of a left join (the source returned nothing); lookup_udf outputs ``[structs]``.
    """

    def __init__(self, predicate: Any, columns: list[str], udf: bool = False):
        self.predicate = predicate
        self.columns = columns
        self.udf = udf

    def __call__(self, results: list[Any]) -> bool:
        if self.udf:
            found = list(results[0]) if results and results[0] is not None else []
        else:
            found = [{c: r.get(c) for c in self.columns} for r in results if type(r) is dict]
        return self.predicate(found)


def _source_retry(retry: RetryStrategy | None, columns: list[str], udf: bool = False) -> RetryStrategy | None:
    """``retry`` whose result predicate sees the source's rows (a new strategy; ``retry`` is unchanged)."""
    if not isinstance(retry, RetryStrategy) or retry.result_predicate is None:
        return retry
    return RetryStrategy(retry.max_retries, retry.initial_delay, retry.max_delay, retry.multiplier, retry.jitter,
                         _SourceRows(retry.result_predicate, columns, udf), retry.exception_predicate)


def _check_key_types(df: DataFrameLike, keys: list[str]) -> None:
    for name in keys:
        typ = df.schema[name].dataType.typeName()
        advice = UNSUPPORTED_KEY_TYPES.get(typ)
        if advice:
            raise TypeError(f"lookup key column {name!r} is {df.schema[name].dataType.simpleString()}, which has no "
                            f"exact conversion to a source's key: {advice}, e.g. "
                            f"df.withColumn({name!r}, F.col({name!r}).cast('string'))")


def _source_schema(session: Any, source: Any) -> StructType:
    if not callable(getattr(source, "lookup", None)):
        raise TypeError(f"source must be an aiospark LookupSource (HttpLookup, RedisLookup, PostgresLookup or a "
                        f"subclass of aiospark.lookup.LookupSource), got {type(source).__name__}")
    return parse_schema(session, getattr(source, "schema", ""), what=f"{type(source).__name__}.schema")


def lookup_join(df: DataFrameT, source: LookupSource, on: str | Sequence[str], *, how: str = "left",
                cache: LookupCache | None = None, capacity: int = 100, timeout: float | None = 60.0,
                retry: RetryStrategy | None = None, ordered: bool = False, batch: bool = True,
                on_error: str = "fail", rate_limit: RateLimitLike = None, metrics: Metrics | None = None,
                budget: Budget | None = None, journal: Journal | None = None,
                progress: ProgressLike = False, dedup: bool | None = None) -> DataFrameT:
    """Enrich ``df`` from ``source``: look up the ``on`` columns of every row, join the rows found.

    ``how="left"`` keeps inputs without a match (lookup columns NULL), ``"inner"`` drops them.
    Lookup columns named like a key column are not repeated; any other name clash is an error.
    ``timeout`` is seconds per row, retries included; ``None`` or ``<= 0`` means no timeout.
    ``retry``'s ``result_predicate`` sees the rows the source returned for the key (``[]`` for a
    miss, also in left joins), so ``retry_if_empty`` retries misses (FLIP-234). Keys are converted
    to the source's key types by Spark SQL's cast rules (:mod:`aiospark.lookup.keys`).
    ``budget`` (an :class:`aiospark.Budget`) caps the lookups started in the whole job (each row's,
    retries included), as for :func:`aiospark.ordered_wait`.
    ``journal`` (an :class:`aiospark.Journal`) records each row's joined rows: a rerun looks up
    only rows not recorded (as for :func:`aiospark.ordered_wait`). ``progress=True`` shows each
    action's progress while it runs (as for :func:`aiospark.ordered_wait`). ``dedup`` (with a
    journal, ``ordered=False``): rows are shuffled by their journal key first, so each key is
    looked up once per job (as for :func:`aiospark.unordered_wait`; None: on where allowed).

    Example::

        customers = RedisLookup("customer:{customer_id}", "name STRING, tier STRING")
        enriched = aiospark.lookup_join(orders, customers, on="customer_id",
                                        cache=LookupCache(max_rows=100_000, expire_after_write=60))
    """
    if not hasattr(df, "mapInArrow"):
        raise TypeError(f"lookup_join() takes a pyspark DataFrame first, got {type(df).__name__}")
    if how not in HOW:
        raise ValueError(f"how must be 'left' (keep rows without a match) or 'inner' (drop them), got {how!r}")
    keys = [on] if isinstance(on, str) else list(on)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"on must be a column name or a list of column names, got {on!r}")
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise ValueError(f"lookup key column(s) {missing} are not columns of the DataFrame {df.columns}")
    _check_key_types(df, keys)
    if cache is not None and not isinstance(cache, LookupCache):
        raise TypeError(f"cache must be an aiospark.lookup.LookupCache or None, got {type(cache).__name__}")
    looked_up = _source_schema(df.sparkSession, source)
    clashes = [f.name for f in looked_up.fields if f.name in df.columns and f.name not in keys]
    if clashes:
        raise ValueError(f"lookup columns {clashes} clash with input columns: rename them in the source schema "
                         "or in the DataFrame before the join")
    added = [f for f in looked_up.fields if f.name not in df.columns]
    out_schema = StructType(df.schema.fields + added)
    columns = [f.name for f in looked_up.fields]
    source_retry = _source_retry(retry, columns)
    function = _LookupJoin(source, keys, [f.name for f in added], how, cache, batch, names=out_schema.fieldNames(),
                           pad_as_tuple=source_retry is not retry,
                           journal_schema=StructType(added).simpleString())
    return _wait(df, WaitCall(function, out_schema, ordered, timeout, capacity, source_retry, on_error,
                              rate_limit=rate_limit, metrics=metrics, name=f"lookup_join {type(source).__name__}",
                              budget=budget, journal=journal, progress=progress, dedup=dedup))


def lookup_udf(source: LookupSource, *, cache: LookupCache | None = None, capacity: int = 100,
               timeout: float | None = 60.0, retry: RetryStrategy | None = None, batch: bool = True,
               on_error: str = "fail", rate_limit: RateLimitLike = None, metrics: Metrics | None = None,
               budget: Budget | None = None) -> Any:
    """A column function ``f(*key_columns) -> array<struct<looked-up columns>>`` for SQL lookups.

    ``timeout``: seconds per row, retries included (``None`` or ``<= 0``: no timeout). ``retry``'s
    ``result_predicate`` sees the source's rows for the key (``[]`` for a miss).

    Register it and join with ``inline`` (inner) or ``inline_outer`` (left)::

        spark.udf.register("customer", aiospark.lookup_udf(customers))
        spark.sql("SELECT o.*, c.* FROM orders o, LATERAL inline_outer(customer(o.customer_id)) c")
    """
    from .options import CallOptions
    from .udf import AsyncUDF

    if cache is not None and not isinstance(cache, LookupCache):
        raise TypeError(f"cache must be an aiospark.lookup.LookupCache or None, got {type(cache).__name__}")
    if on_error not in ("fail", "null"):
        raise ValueError(f"on_error must be 'fail' or 'null', got {on_error!r}")
    if not callable(getattr(source, "lookup", None)):
        raise TypeError(f"source must be an aiospark LookupSource, got {type(source).__name__}")
    from ..lookup.schema import parse_schema as parse_ddl_columns

    columns = [f.name for f in parse_ddl_columns(source.schema)]
    function = _LookupValues(source, columns, cache, batch)
    options = CallOptions.create(function, ordered=True, timeout=timeout, capacity=capacity,
                                 retry=_source_retry(retry, columns, udf=True),
                                 rate_limit=rate_limit, metrics=metrics, name=f"lookup {type(source).__name__}",
                                 budget=budget)
    return_type = f"array<struct<{source.schema}>>"
    return AsyncUDF(function, return_type, options, on_error, name=f"lookup_{type(source).__name__}")
