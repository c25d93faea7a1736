"""Output values that Arrow would change without a word: found before they are converted.

Arrow's conversion from Python refuses most values that do not fit a column (300 into TINYINT, a
string into INT, an int beyond LONG), but it truncates a float into an integer column (``1.5`` ->
``1``), reads a naive ``datetime`` as UTC next to aware ones, drops the zone of an aware one in a
TIMESTAMP_NTZ column, and writes NULL into NOT NULL columns (Spark then fails in the JVM with
"Value at index is null"). :class:`ExactChecks` looks for exactly those, column by column, and
names the first offending value of each check it runs.

Example::

    checks = ExactChecks(StructType.fromDDL("n INT NOT NULL"))
    checks.problem([{"n": 1.5}])    # ("n", 1.5, "1.5 is not a whole number: ...")
    column_problem([1, 2.5], kind_of(IntegerType()), "value", {})   # (2.5, "...")
"""
from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, List, Optional, Tuple

from pyspark.sql.types import (ByteType, DataType, IntegerType, LongType, ShortType, StructType,
                               TimestampType)

try:
    from pyspark.sql.types import TimestampNTZType
except ImportError:  # pragma: no cover - every supported PySpark has it
    TimestampNTZType = None  # type: ignore[assignment,misc]

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)

#: (column, value, why) of a value that does not fit exactly
Problem = Tuple[str, Any, str]


def kind_of(data_type: DataType) -> Optional[str]:
    if isinstance(data_type, _INTEGRAL):
        return "int"
    if TimestampNTZType is not None and isinstance(data_type, TimestampNTZType):
        return "ntz"
    if isinstance(data_type, TimestampType):
        return "ltz"
    return None


class ExactChecks:
    """The checks of one output schema, with what one task has seen so far.

    A TIMESTAMP column takes naive datetimes (as UTC) or aware ones, but not both in one task: the
    first datetime a task returns for the column fixes which (a mix is almost always a bug that
    shifts some values by the UTC offset).
    """

    def __init__(self, schema: StructType):
        self.columns = [(f.name, k) for f in schema.fields if (k := kind_of(f.dataType)) is not None]
        self.not_null = [(i, f.name) for i, f in enumerate(schema.fields) if not f.nullable]
        self.aware: Dict[str, bool] = {}

    def problem(self, rows: List[Dict[str, Any]]) -> Optional[Problem]:
        """The first value of ``rows`` (dicts) that does not fit its column exactly, or None."""
        for name, kind in self.columns:
            why = column_problem([r.get(name) for r in rows], kind, name, self.aware)
            if why is not None:
                return (name, *why)
        for _, name in self.not_null:
            for r in rows:
                if r.get(name) is None:
                    return name, None, "the column is NOT NULL: return a value, or declare it nullable"
        return None

    def nulls_in(self, batch: Any) -> bool:
        """Whether an Arrow batch holds a NULL in a NOT NULL column (a cheap test on the result)."""
        return any(batch.column(i).null_count for i, _ in self.not_null)


def column_problem(values: List[Any], kind: Optional[str], name: str,
                   aware_seen: Dict[str, bool]) -> Optional[Tuple[Any, str]]:
    """The first of ``values`` (of a column of ``kind``, see :func:`kind_of`) that does not fit
    exactly, with why; ``aware_seen`` remembers per column whether its datetimes are aware."""
    if kind == "int":
        for v in values:
            if type(v) is float and not v.is_integer():
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
