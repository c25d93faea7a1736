"""Spark DDL schemas for lookup sources, and conversion of raw values to them.

A lookup source declares the columns it returns as a Spark DDL string such as
``"name STRING, price DOUBLE"``. This module parses that string (without
importing pyspark) and builds per-column converters used by the connectors to
turn raw values (Redis strings, JSON numbers, ...) into the declared types.

Example::

    >>> fields = parse_schema("id BIGINT, name STRING, tags ARRAY<STRING>")
    >>> [f.name for f in fields]
    ['id', 'name', 'tags']
    >>> RowMapper(fields).row({"id": "7", "name": "x"})
    {'id': 7, 'name': 'x', 'tags': None}
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .ddl import SchemaError, parse_columns

__all__ = ["Field", "RowMapper", "SchemaError", "parse_schema", "converter_for"]


class Field(NamedTuple):
    """One column of a lookup schema: ``name`` and upper-cased Spark ``type``."""

    name: str
    type: str

    @property
    def base_type(self) -> str:
        """The type without parameters: ``DECIMAL(10,2)`` -> ``DECIMAL``."""
        return re.split(r"[(<\s]", self.type, maxsplit=1)[0]


def parse_schema(ddl: str) -> list[Field]:
    """Parse a Spark DDL column list such as ``"a INT, b STRING NOT NULL"``.

    Strict (:mod:`aiospark.lookup.ddl`): what it accepts, Spark parses to the same columns; it takes
    backquoted names, ``name: type``, nested ``ARRAY<..>``/``MAP<..>``/``STRUCT<..>``,
    ``DECIMAL(p,s)``, and drops ``NOT NULL`` / ``COMMENT '...'``. Raises :class:`SchemaError`
    (a ``ValueError``) saying what to change, e.g. for a missing comma.
    """
    return [Field(name, typ) for name, typ in parse_columns(ddl)]


# --- converters -------------------------------------------------------------------------


def _to_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8")
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _to_int(v: Any) -> int:
    if isinstance(v, int):
        return int(v)
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("ascii")
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            v = float(v)
    if isinstance(v, (float, decimal.Decimal)) and v == int(v):
        return int(v)
    raise ValueError(f"not an integer: {v!r}")


def _to_float(v: Any) -> float:
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("ascii")
    if isinstance(v, bool):
        raise ValueError(f"not a number: {v!r}")
    return float(v)


_TRUE = {"true", "t", "1", "yes", "y", "on"}
_FALSE = {"false", "f", "0", "no", "n", "off"}


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("ascii")
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    elif isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise ValueError(f"not a boolean: {v!r}")


def _to_decimal(v: Any) -> decimal.Decimal:
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("ascii")
    if isinstance(v, bool):
        raise ValueError(f"not a decimal: {v!r}")
    return decimal.Decimal(str(v).strip())


def _to_date(v: Any) -> _dt.date:
    if isinstance(v, _dt.datetime):
        return v.date()
    if isinstance(v, _dt.date):
        return v
    return _dt.date.fromisoformat(_to_str(v).strip()[:10])


def _to_datetime(v: Any) -> _dt.datetime:
    if isinstance(v, _dt.datetime):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _dt.datetime.fromtimestamp(v, _dt.timezone.utc)
    s = _to_str(v).strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    return _dt.datetime.fromisoformat(s)


def _to_bytes(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    return _to_str(v).encode("utf-8")


def _to_complex(v: Any) -> Any:
    if isinstance(v, (str, bytes, bytearray)):
        return json.loads(v)
    return v


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "STRING": _to_str, "VARCHAR": _to_str, "CHAR": _to_str,
    "TINYINT": _to_int, "BYTE": _to_int, "SMALLINT": _to_int, "SHORT": _to_int,
    "INT": _to_int, "INTEGER": _to_int, "BIGINT": _to_int, "LONG": _to_int,
    "FLOAT": _to_float, "REAL": _to_float, "DOUBLE": _to_float,
    "BOOLEAN": _to_bool, "BOOL": _to_bool,
    "DECIMAL": _to_decimal, "DEC": _to_decimal, "NUMERIC": _to_decimal,
    "DATE": _to_date, "TIMESTAMP": _to_datetime, "TIMESTAMP_NTZ": _to_datetime,
    "TIMESTAMP_LTZ": _to_datetime, "BINARY": _to_bytes,
    "ARRAY": _to_complex, "MAP": _to_complex, "STRUCT": _to_complex,
}


#: The Python type each converter returns unchanged (a value already of it skips the call)
_KEPT: dict[Callable[[Any], Any], type] = {_to_str: str, _to_int: int, _to_float: float, _to_bool: bool}


def converter_for(field: Field) -> Callable[[Any], Any] | None:
    """Return a function converting a raw value to ``field``'s type (None: keep as is)."""
    return _CONVERTERS.get(field.base_type)


class RowMapper:
    """Maps raw records (any ``Mapping``) to dicts holding exactly the schema's columns.

    Missing fields become ``None``; extra fields are dropped; values are converted
    to the declared types when ``convert`` is true. A value that cannot be
    converted raises ``ValueError`` naming the column and type.
    """

    __slots__ = ("fields", "names", "_plan")

    def __init__(self, fields: Sequence[Field], convert: bool = True) -> None:
        self.fields = list(fields)
        self.names = [f.name for f in self.fields]
        #: (name, converter, type, the type a value keeps as is or None); None converter: keep everything
        self._plan = []
        for f in self.fields:
            conv = converter_for(f) if convert else None
            self._plan.append((f.name, conv, f.type, _KEPT.get(conv) if conv is not None else None))

    def convert(self, name: str, conv: Callable[[Any], Any] | None, typ: str, value: Any) -> Any:
        if value is None or conv is None:
            return value
        try:
            return conv(value)
        except (ValueError, TypeError, ArithmeticError, UnicodeDecodeError) as exc:
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise ValueError(f"column {name!r}: cannot convert {shown} to {typ} ({exc})") from None

    def row(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Return one output row built from ``record``."""
        get = record.get
        out = {}
        for name, conv, typ, kept in self._plan:
            v = get(name)
            out[name] = v if (v is None or conv is None or type(v) is kept) else self.convert(name, conv, typ, v)
        return out

    def single(self, value: Any) -> dict[str, Any]:
        """Row for a one-column schema from a bare value."""
        name, conv, typ, _ = self._plan[0]
        return {name: self.convert(name, conv, typ, value)}
