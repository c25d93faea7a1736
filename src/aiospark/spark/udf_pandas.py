"""``async_udf`` on PySpark < 4.1: a pandas *iterator* UDF around the same operator.

PySpark 4.1 added Arrow iterator UDFs (``SQL_SCALAR_ARROW_ITER_UDF``); 3.5 and 4.0 have the pandas
flavour (``SQL_SCALAR_PANDAS_ITER_UDF``, ``Iterator[pd.Series] -> Iterator[pd.Series]``), which also
sees the whole partition in one call, so calls stay in flight across batches exactly as on 4.1+.
Only the edges differ: arguments arrive as pandas made them and results leave as pandas.

What the function sees on these versions (as in any pandas UDF there): NULL is ``None``; an
integer column arrives as ``float`` in a batch that holds a NULL (pandas has no NULL integers);
arrays arrive as lists, structs as dicts, timestamps as naive ``datetime`` in the session time zone.

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
from pyspark.sql.types import StructType

from ..core import AsyncFunction
from .schema import arrow_type, values_to_array
from .udf_runner import UdfRunner


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

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        pa_type = arrow_type(self.return_type)
        wrap_single = self.arity != 1 and not isinstance(self.options.function, AsyncFunction)

        def to_values(batch: Any) -> list:
            # several argument columns arrive as a tuple of Series, one as a Series
            if isinstance(batch, (tuple, list)):
                return list(zip(*[series_values(s) for s in batch]))
            values = series_values(batch)
            return [(v,) for v in values] if wrap_single else values

        for values in self.results(to_values(batch) for batch in batches):
            # Arrow checks every value against the return type, with the same errors as on 4.1+
            array = values_to_array(values, self.return_type, pa_type, self.what)
            if isinstance(self.return_type, StructType):  # pandas UDFs return structs as DataFrames
                yield pd.DataFrame({f.name: _objects(array.field(i)) for i, f in enumerate(self.return_type.fields)})
            else:
                # object cells keep exact values (no int -> float for NULLs, no lost big integers); pandas
                # UDFs take maps as dicts
                yield _objects(array)


def _objects(array: Any) -> pd.Series:
    """An Arrow array as a Series of Python objects, maps as dicts (what pandas UDFs return)."""
    return pd.Series(array.to_pylist(maps_as_pydicts="strict"), dtype=object)
