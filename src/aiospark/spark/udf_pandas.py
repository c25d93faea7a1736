"""``async_udf`` on PySpark < 4.1: a pandas *iterator* UDF around the same operator.

PySpark 4.1 added Arrow iterator UDFs (``SQL_SCALAR_ARROW_ITER_UDF``); 3.5 and 4.0 have the pandas
flavour (``SQL_SCALAR_PANDAS_ITER_UDF``, ``Iterator[pd.Series] -> Iterator[pd.Series]``), which also
sees the whole partition in one call, so calls stay in flight across batches exactly as on 4.1+.
Only the edges differ: arguments arrive as pandas made them and results leave as pandas.

What the function sees on these versions (as in any pandas UDF there): NULL is ``None``; an
integer column arrives as ``float`` in a batch that holds a NULL (pandas has no NULL integers);
arrays arrive as lists, structs as dicts, timestamps as naive ``datetime`` in the session time zone.
A NaN argument stays NaN: pandas has one marker for NULL and NaN, so each argument travels with its
``isnull`` column (added by :class:`~aiospark.spark.udf.AsyncUDF` when applied to columns) and
:func:`unmasked` puts the NULLs back. A floating-point result goes back as an Arrow-backed Series
(Spark reads NaN in any other Series as NULL); a NaN below the top of a result is refused
(:func:`lost_nan`), as Spark would make it NULL, and so is ``None`` for a STRUCT result (a pandas
UDF returns structs as a DataFrame, which has no NULL row: Spark got made-up values).

Example::

    runner = PandasUdfRunner(options, "fail", LongType(), 1, "async_udf 'f'")
    for out in runner(iter([pd.Series([1, 2])])):   # what Spark does in every task
        ...                                          # pd.Series([f(1), f(2)])
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from ..core import AsyncFunction
from .schema import arrow_type
from .udf_runner import UdfRunner, ValueConverter


def plain(value: Any) -> Any:
    """A pandas/numpy cell as the Python value an Arrow UDF would get (NaN/NaT -> None).

    Example::

        plain(np.array([1, 2]))   # [1, 2]
    """
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy arrays and scalars
        return plain_list(value.tolist()) if hasattr(value, "shape") and value.shape else value.tolist()
    if isinstance(value, list):
        return plain_list(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def plain_list(values: list[Any]) -> list[Any]:
    """``plain`` for every element of a list."""
    return [plain(v) for v in values]


def series_values(data: Any) -> list[Any]:
    """The cells of a Series (or, for a struct column, the rows of a DataFrame as dicts).

    Example::

        series_values(pd.Series([1.0, float("nan")]))   # [1.0, None]
    """
    if isinstance(data, pd.DataFrame):
        return [plain(row) for row in data.to_dict("records")]
    return plain_list(data.tolist())


class PandasUdfRunner(UdfRunner):
    """The picklable function each task runs: iterator of pandas Series in, iterator of Series out."""

    def converter(self) -> ValueConverter:
        """This task's converter, refusing what Spark would change on the way back from pandas: a NULL
        STRUCT, a NaN it would read as NULL (:func:`lost_nan`)."""
        made = super().converter()
        made.extra_check = _returnable
        return made

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        pa_type = arrow_type(self.return_type)
        wrap_single = self.arity != 1 and not isinstance(self.options.function, AsyncFunction)

        masked = self.masked

        def to_values(batch: Any) -> list:
            # several argument columns arrive as a tuple of Series, one as a Series
            if masked:  # the arguments, then whether each is NULL (so a NaN is told from a NULL)
                half = len(batch) // 2
                columns = [unmasked(s, m) for s, m in zip(batch[:half], batch[half:])]
                if len(columns) == 1:
                    return [(v,) for v in columns[0]] if wrap_single else columns[0]
                return list(zip(*columns))
            if isinstance(batch, (tuple, list)):
                return list(zip(*[series_values(s) for s in batch]))
            values = series_values(batch)
            return [(v,) for v in values] if wrap_single else values

        convert = self.converter()
        for values in self.results(convert.fed(to_values(batch) for batch in batches)):
            # Arrow checks every value against the return type, with the same errors as on 4.1+
            array = convert(values, pa_type)
            if isinstance(self.return_type, StructType):  # pandas UDFs return structs as DataFrames
                yield pd.DataFrame({f.name: _objects(array.field(i)) for i, f in enumerate(self.return_type.fields)})
            else:
                # object cells keep exact values (no int -> float for NULLs, no lost big integers); pandas
                # UDFs take maps as dicts
                yield _objects(array)


def _returnable(array: Any) -> str | None:
    """Why a pandas UDF cannot hand ``array`` to Spark unchanged (None: it can)."""
    if pa.types.is_struct(array.type) and array.null_count:
        return ("None for a STRUCT, which a pandas UDF (PySpark < 4.1) cannot return: Spark would get a struct of "
                "made-up values (a DataFrame has no NULL row); return a dict of NULLs, or use PySpark >= 4.1")
    if lost_nan(array):
        return ("a NaN inside an array, a map or a nested struct, which Spark reads back as NULL from a pandas "
                "UDF (PySpark < 4.1): return None for a missing value, or use PySpark >= 4.1")
    return None


def unmasked(series: Any, nulls: Any) -> list[Any]:
    """The cells of an argument's Series, NULL exactly where ``nulls`` (the argument's ``isnull``)
    says so: a NaN stays NaN (pandas has one marker for both in a float column), and a NULL struct
    is None (pandas hands structs over as a DataFrame, which has no NULL row)."""
    flags = nulls.tolist()
    if isinstance(series, pd.DataFrame) or series.dtype.kind != "f":
        return [None if null else v for v, null in zip(series_values(series), flags)]
    return [None if null else float(v) for v, null in zip(series.tolist(), flags)]


def _objects(array: Any) -> pd.Series:
    """An Arrow array as a Series of Python objects, maps as dicts (what pandas UDFs return). A
    floating-point array goes as an Arrow-backed Series: Spark takes it as it is, where it reads
    a NaN in any other Series as NULL."""
    if pa.types.is_floating(array.type):
        return pd.Series(pd.arrays.ArrowExtensionArray(array))
    return pd.Series(array.to_pylist(maps_as_pydicts="strict"), dtype=object)


def lost_nan(array: Any, kept: bool = True) -> bool:
    """Whether ``array`` holds a NaN that a pandas UDF's result would make NULL: any below its top
    level (in an array, a map, or a struct inside the result), where Spark reads pandas values
    with NaN as NULL; ``kept``: a NaN at this level is kept (the result itself, or a field of a
    STRUCT result: :func:`_objects` hands those over as Arrow)."""
    t = array.type
    if pa.types.is_floating(t):
        return not kept and bool(pc.any(pc.is_nan(array)).as_py())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return lost_nan(array.flatten(), False)
    if pa.types.is_map(t):
        return lost_nan(array.keys, False) or lost_nan(array.items, False)
    if pa.types.is_struct(t):
        return any(lost_nan(array.field(i), kept and not pa.types.is_struct(t.field(i).type))
                   for i in range(t.num_fields))
    return False
