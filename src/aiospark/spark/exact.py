"""Output values that Arrow would change without a word: found before they are converted.

Arrow's conversion from Python refuses most values that do not fit a column (300 into TINYINT, a
string into INT, an int beyond LONG), but it truncates a float into an integer column (``1.5`` ->
``1``; so too a NumPy float, a ``Decimal`` or a ``Fraction``), reads a naive ``datetime`` as UTC
next to aware ones, drops the zone of an aware one in a TIMESTAMP_NTZ column, and writes NULL into
NOT NULL columns (Spark then fails in the JVM with "Value at index is null"). :class:`ExactChecks` looks for exactly those, column by column, and
names the first offending value of each check it runs. Values nested in ARRAY, MAP (keys and
values) and STRUCT columns are checked the same way (:func:`plan_of`), and named by their path
(``s.xs[]``, ``m{}``); NULLs are looked for in top-level NOT NULL columns only.

Example::

    checks = ExactChecks(StructType.fromDDL("n INT NOT NULL"))
    checks.problem([[1.5]])    # ("n", 1.5, "1.5 is not a whole number: ...")
    column_problem([1, 2.5], kind_of(IntegerType()), "value", {})   # (2.5, "...")
    value_problem([[1, 2.5]], plan_of(ArrayType(IntegerType())), "xs", {})   # (2.5, "at xs[]: ...")
"""
from __future__ import annotations

import datetime as _dt
import decimal
import numbers
from itertools import repeat
from operator import is_
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    Row,
    ShortType,
    StructType,
    TimestampType,
)

try:
    from pyspark.sql.types import TimestampNTZType
except ImportError:  # pragma: no cover - every supported PySpark has it
    TimestampNTZType = None  # type: ignore[assignment,misc]

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)

#: (column, value, why) of a value that does not fit exactly
Problem = tuple[str, Any, str]


def kind_of(data_type: DataType) -> str | None:
    if isinstance(data_type, _INTEGRAL):
        return "int"
    if TimestampNTZType is not None and isinstance(data_type, TimestampNTZType):
        return "ntz"
    if isinstance(data_type, TimestampType):
        return "ltz"
    return None


#: what to check in a value of a type: ("leaf", kind), ("array", plan), ("map", key plan or None,
#: value plan or None), ("struct", [(field name, index, plan)]); None when nothing in it needs a check
Plan = tuple[Any, ...]


def plan_of(data_type: DataType) -> Plan | None:
    """What :func:`value_problem` must look at in values of ``data_type`` (None: nothing)."""
    kind = kind_of(data_type)
    if kind is not None:
        return ("leaf", kind)
    if isinstance(data_type, ArrayType):
        element = plan_of(data_type.elementType)
        return None if element is None else ("array", element)
    if isinstance(data_type, MapType):
        key, value = plan_of(data_type.keyType), plan_of(data_type.valueType)
        return None if key is None and value is None else ("map", key, value)
    if isinstance(data_type, StructType):
        fields = [(f.name, i, p) for i, f in enumerate(data_type.fields) if (p := plan_of(f.dataType)) is not None]
        return ("struct", fields) if fields else None
    return None


def value_problem(values: list[Any], plan: Plan, name: str,
                  aware_seen: dict[str, bool]) -> tuple[Any, str] | None:
    """The first of ``values`` (of a column named ``name`` checked by ``plan``) that, or a value
    nested in which, does not fit exactly, with why (saying where, for a nested value)."""
    if plan[0] == "leaf":
        return column_problem(values, plan[1], name, aware_seen)
    leaves: dict[str, tuple[str, list[Any]]] = {}  # path -> (kind, values), in order of first sight
    for v in values:
        _collect(v, plan, name, leaves)
    for path, (kind, found) in leaves.items():
        why = column_problem(found, kind, path, aware_seen)
        if why is not None:
            return why[0], f"at {path}: {why[1]}"
    return None


def _collect(value: Any, plan: Plan, path: str, leaves: dict[str, tuple[str, list[Any]]]) -> None:
    """Gather the leaf values under ``value`` by path. A value of the wrong shape is left to Arrow,
    which refuses it."""
    if value is None:
        return
    tag = plan[0]
    if tag == "leaf":
        leaves.setdefault(path, (plan[1], []))[1].append(value)
    elif tag == "array":
        if isinstance(value, (list, tuple)):
            for item in value:
                _collect(item, plan[1], path + "[]", leaves)
    elif tag == "map":
        items = value.items() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for pair in items:
            if isinstance(pair, tuple) and len(pair) == 2:
                if plan[1] is not None:
                    _collect(pair[0], plan[1], path + "{key}", leaves)
                if plan[2] is not None:
                    _collect(pair[1], plan[2], path + "{}", leaves)
    else:
        if isinstance(value, Row) and hasattr(value, "__fields__"):
            value = value.asDict(recursive=False)
        for field, index, sub in plan[1]:
            if isinstance(value, dict):
                _collect(value.get(field), sub, f"{path}.{field}", leaves)
            elif isinstance(value, tuple) and index < len(value):
                _collect(value[index], sub, f"{path}.{field}", leaves)


_INTS = frozenset({int, type(None)})


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


class ExactChecks:
    """The checks of one output schema, with what one task has seen so far.

    A TIMESTAMP column takes naive datetimes (as UTC) or aware ones, but not both in one task: the
    first datetime a task returns for the column fixes which (a mix is almost always a bug that
    shifts some values by the UTC offset).
    """

    def __init__(self, schema: StructType):
        #: (index, name, plan) of every column with values to check
        self.columns = [(i, f.name, p) for i, f in enumerate(schema.fields) if (p := plan_of(f.dataType)) is not None]
        self.not_null = [(i, f.name) for i, f in enumerate(schema.fields) if not f.nullable]
        self.aware: dict[str, bool] = {}

    def problem(self, columns: list[list[Any]]) -> Problem | None:
        """The first value of ``columns`` (every column's values, in schema order) that does not
        fit its column exactly, or None."""
        for index, name, plan in self.columns:
            why = value_problem(columns[index], plan, name, self.aware)
            if why is not None:
                return (name, *why)
        for index, name in self.not_null:
            if any(map(is_, columns[index], repeat(None))):  # by identity: a value's __eq__ may raise
                return name, None, "the column is NOT NULL: return a value, or declare it nullable"
        return None

    def nulls_in(self, batch: Any) -> bool:
        """Whether an Arrow batch holds a NULL in a NOT NULL column (a cheap test on the result)."""
        return any(batch.column(i).null_count for i, _ in self.not_null)


def column_problem(values: list[Any], kind: str | None, name: str,
                   aware_seen: dict[str, bool]) -> tuple[Any, str] | None:
    """The first of ``values`` (of a column of ``kind``, see :func:`kind_of`) that does not fit
    exactly, with why; ``aware_seen`` remembers per column whether its datetimes are aware."""
    if kind == "int":
        if set(map(type, values)) <= _INTS:  # the usual case, in one C-level pass
            return None
        for v in values:
            if type(v) not in _INTS and not _whole(v):
                return v, f"{v!r} is not a whole number: round it (or declare a DOUBLE column)"
        return None
    if kind is None:
        return None
    for v in values:
        if not isinstance(v, _dt.datetime):
            continue
        aware = v.utcoffset() is not None
        if kind == "ntz":
            if aware:
                return v, ("a TIMESTAMP_NTZ column takes naive datetimes; this one has a zone, which would be "
                           "dropped: use .replace(tzinfo=None) or declare TIMESTAMP")
            continue
        if aware_seen.setdefault(name, aware) != aware:
            return v, ("naive and aware datetimes mixed in one TIMESTAMP column (a naive one is read as UTC): "
                       "return all of them with a tzinfo, or all without")
    return None
