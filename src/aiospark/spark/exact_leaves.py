"""The leaf checks of :mod:`aiospark.spark.exact`: whether the values of one column of a plain
type (or the values found at one path under nested ones, e.g. ``xs[]``) fit it exactly.

A leaf's kind (:func:`kind_of`) says what Arrow would change without a word in it: a float
truncated in an integer column, a ``datetime``'s time dropped in a DATE, a bool made ``1.0``, bytes
decoded into a STRING, nanoseconds cut, naive and aware datetimes mixed in one TIMESTAMP.
:func:`column_problem` looks at all the values of one kind at once, with one C-level pass over
their types in the usual case.

Example::

    column_problem([1, 2.5], kind_of(IntegerType()), "n", {})
    # (1, 2.5, "2.5 is not a whole number: round it (or declare a DOUBLE column)")
"""
from __future__ import annotations

import datetime as _dt
import decimal
import math
import numbers
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampType,
)

try:
    from pyspark.sql.types import TimestampNTZType
except ImportError:  # pragma: no cover - every supported PySpark has it
    TimestampNTZType = None  # type: ignore[assignment,misc]

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


def kind_of(data_type: DataType, full: bool = False) -> str | None:
    """The leaf check a type needs (None: none). ``full`` adds the checks made only after Arrow
    showed a suspect value (FLOAT overflow)."""
    if isinstance(data_type, _INTEGRAL):
        return "int"
    if TimestampNTZType is not None and isinstance(data_type, TimestampNTZType):
        return "ntz"
    if isinstance(data_type, TimestampType):
        return "ltz"
    if isinstance(data_type, DateType):
        return "date"
    if isinstance(data_type, FloatType):
        return "float" if full else "real"
    if isinstance(data_type, DoubleType):
        return "real"
    if isinstance(data_type, StringType):
        return "string"
    if isinstance(data_type, BinaryType):
        return "binary"
    return None


_INTS = frozenset({int, type(None)})
_DATES = frozenset({_dt.date, type(None)})
_REALS = frozenset({float, int, type(None)})
_STRS = frozenset({str, type(None)})
_BYTES = frozenset({bytes, type(None)})
#: the value types of a leaf kind that fit without a look at each value
PLAIN = {"int": _INTS, "date": _DATES, "real": _REALS, "string": _STRS, "binary": _BYTES}
#: the NumPy dtype kinds whose arrays fit an ARRAY of a leaf kind without a look at each value
NUMPY_KINDS = {"int": "iu", "real": "fiu", "float": "iu"}


def _whole(value: Any) -> bool:
    """Whether Arrow keeps ``value`` as it is in an integer column. Arrow truncates every number
    that is not an integer -- a float, a NumPy float, a ``Decimal``, a ``Fraction`` -- so such a
    number fits only when it is a whole one. Anything else (an integer of any kind, a string) is
    Arrow's to take or refuse."""
    if isinstance(value, numbers.Integral) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        return True
    number: Any = value  # int() takes every one of them (typeshed's numbers.Real declares no __int__)
    try:
        return bool(int(number) == number)
    except (ValueError, OverflowError):  # NaN, infinities
        return False


def _overflows_float(value: Any) -> bool:
    """Whether a number is finite but rounds to an infinity as a FLOAT (what C's cast, and so
    Arrow's, does without a word): from 2**128 - 2**103 on (half a unit above FLOAT's largest)."""
    if not isinstance(value, numbers.Real) or isinstance(value, numbers.Integral):
        return False
    try:
        number = abs(float(value))
    except (TypeError, ValueError, OverflowError):
        return False
    return _FLOAT_LIMIT <= number < math.inf


_FLOAT_LIMIT = 2.0 ** 128 - 2.0 ** 103


def column_problem(values: list[Any], kind: str | None, name: str,
                   aware_seen: dict[str, bool]) -> tuple[int, Any, str] | None:
    """The first of ``values`` (of a column of ``kind``, see :func:`kind_of`) that does not fit
    exactly: its index, the value and why; ``aware_seen`` remembers per column whether its
    datetimes are aware."""
    if kind == "int":
        if set(map(type, values)) <= _INTS:  # the usual case, in one C-level pass
            return None
        for i, v in enumerate(values):
            if type(v) not in _INTS and not _whole(v):
                return i, v, f"{v!r} is not a whole number: round it (or declare a DOUBLE column)"
        return None
    if kind == "date":
        if set(map(type, values)) <= _DATES:
            return None
        for i, v in enumerate(values):
            if isinstance(v, _dt.datetime):
                return i, v, ("a datetime is not a date (its time would be dropped): return .date(), or "
                              "declare a TIMESTAMP")
        return None
    if kind == "real" or kind == "float":
        if kind == "real" and set(map(type, values)) <= _REALS:
            return None
        for i, v in enumerate(values):
            if isinstance(v, (bool, np.bool_)):
                return i, v, "a bool is not a number (Arrow would make it 1.0 or 0.0): return a float"
            if kind == "float" and _overflows_float(v):
                return i, v, (f"{v!r} is beyond FLOAT's range (it would become inf): declare a DOUBLE, or "
                              f"return a smaller number")
        return None
    if kind == "string" or kind == "binary":
        if set(map(type, values)) <= PLAIN[kind]:
            return None
        wrong = (bytes, bytearray, memoryview) if kind == "string" else str
        for i, v in enumerate(values):
            if isinstance(v, wrong):
                return i, v, ("bytes are not a string (Arrow would decode them): decode them yourself, or declare "
                              "BINARY" if kind == "string" else
                              "a str is not bytes (Arrow would encode it): encode it yourself, or declare STRING")
        return None
    if kind is None:
        return None
    for i, v in enumerate(values):
        if not isinstance(v, _dt.datetime):
            continue
        if v is pd.NaT:
            return i, v, "pd.NaT is no time: return None for a NULL"
        if getattr(v, "nanosecond", 0):
            return i, v, ("a pandas Timestamp with nanoseconds (Spark keeps microseconds: they would be cut): "
                          "round it, e.g. .floor('us')")
        aware = v.utcoffset() is not None
        if kind == "ntz":
            if aware:
                return i, v, ("a TIMESTAMP_NTZ column takes naive datetimes; this one has a zone, which would be "
                              "dropped: use .replace(tzinfo=None) or declare TIMESTAMP")
            continue
        if aware_seen.setdefault(name, aware) != aware:
            return i, v, ("naive and aware datetimes mixed in one TIMESTAMP column (a naive one is read as UTC): "
                          "return all of them with a tzinfo, or all without")
    return None
