"""What differs between the PySpark versions aiospark supports (3.5 and 4.0-4.3), in one place.

Everything else in ``aiospark.spark`` calls these helpers instead of testing versions itself.

Example::

    from aiospark.spark.compat import SPARK_VERSION, parse_ddl
    if SPARK_VERSION >= (4, 1): ...
    parse_ddl(spark, "id INT, name STRING")   # StructType, classic or Connect, any supported version
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, Union

import pyspark
from pyspark.sql.pandas.types import to_arrow_schema as _to_arrow_schema
from pyspark.sql.pandas.types import to_arrow_type as _to_arrow_type
from pyspark.sql.types import DataType, StructType

if TYPE_CHECKING:
    # For type checkers only: importing Spark Connect's module at run time loads grpc and checks its
    # dependencies, which a classic session never needs.
    from pyspark.sql import DataFrame as _DataFrame
    from pyspark.sql.connect.dataframe import DataFrame as _ConnectDataFrame

#: A DataFrame of a classic or a Spark Connect session, in the entry points' signatures. PySpark 4:
#: ``pyspark.sql.DataFrame`` is the base class of both, so this is that one class; PySpark 3.5:
#: Connect's DataFrame is a class of its own, not a ``pyspark.sql.DataFrame``.
DataFrameLike: TypeAlias = Union["_DataFrame", "_ConnectDataFrame"]
#: What ``ordered_wait(df, ...)`` and its kin return: the same kind of DataFrame they were given.
DataFrameT = TypeVar("DataFrameT", "_DataFrame", "_ConnectDataFrame")

def version_tuple(text: str) -> tuple[int, int]:
    """``"4.1.0.dev1"`` -> ``(4, 1)``.

    Example::

        version_tuple("3.5.9")   # (3, 5)
    """
    parts = [int("".join(c for c in p if c.isdigit()) or 0) for p in text.split(".")[:2]]
    return (parts + [0, 0])[0], (parts + [0, 0])[1]


SPARK_VERSION = version_tuple(pyspark.__version__)

# PySpark >= 4.0 takes the session time zone; 3.5 always makes timestamps tz="UTC" (what we pass)
_TAKES_TIMEZONE = "timezone" in inspect.signature(_to_arrow_type).parameters


def parse_ddl(session: Any, ddl: str) -> DataType:
    """Parse a DDL string with ``session`` (classic or Connect): ``session._parse_ddl`` on 4.x.

    Example::

        parse_ddl(spark, "a INT, b STRING")   # StructType([...])
    """
    if hasattr(session, "_parse_ddl"):
        return session._parse_ddl(ddl)
    if type(session).__module__.startswith("pyspark.sql.connect"):  # Connect on 3.5: ask the server
        parsed = session.client._analyze(method="ddl_parse", ddl_string=ddl).parsed
        if parsed is None:
            raise ValueError(f"the Connect server did not parse {ddl!r}")
        return parsed
    from pyspark.sql.types import _parse_datatype_string  # classic 3.5: the active SparkContext's parser

    return _parse_datatype_string(ddl)


def to_arrow_type(data_type: DataType) -> Any:
    """The Arrow type of a Spark type, timestamps in UTC (the same on every supported version).

    Example::

        to_arrow_type(LongType())   # pa.int64()
    """
    if _TAKES_TIMEZONE:
        return _to_arrow_type(data_type, timezone="UTC")
    return _to_arrow_type(data_type)


def to_arrow_schema(schema: StructType) -> Any:
    """The Arrow schema of a StructType, timestamps in UTC.

    Example::

        to_arrow_schema(StructType([StructField("id", LongType())]))   # id: int64
    """
    if _TAKES_TIMEZONE:
        return _to_arrow_schema(schema, timezone="UTC")
    return _to_arrow_schema(schema)
