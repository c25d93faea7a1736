"""Key conversion: a Spark value as the key type of a source, by Spark SQL's own rules.

A lookup sends the join key to a system whose key column may have another type than the Spark
column (a STRING column joined to an INT key, a BIGINT to a TEXT key). There is one conversion,
used by every connector, and it answers what Spark SQL would:

* to an integer (``bits`` 8/16/32/64): a string converts as ``try_cast(s AS INT)`` does in Spark:
  leading/trailing whitespace and control characters (code points <= 32) are ignored, then an
  optional ``+``/``-`` and ASCII digits only (``'007'`` is 7; ``'١'``, ``'１'``, ``'1_0'``,
  ``'1.0'``, ``'0x10'`` are no integer). Numbers compare by value as Spark's ``=`` does after
  widening: ``1.0`` is 1, ``1.5`` and NaN match no integer. ``True``/``False`` are 1/0. Out of range
  for ``bits``: no match.
* to a float: ASCII decimal or exponent notation, ``NaN``, ``Infinity`` (``'1_0'``, ``'١'`` are none).
* to a decimal: like float, without NaN/Infinity (ASCII digits only, like PostgreSQL's numeric).
* to text (``CAST(x AS STRING)``): ``True`` -> ``'true'``, ``1.0`` -> ``'1.0'``, ``1e20`` ->
  ``'1.0E20'``, decimals keep their scale, dates ``'2024-01-02'``, bytes must be UTF-8.
* to a boolean: ``'true'``/``'t'``/``'yes'``/``'y'``/``'1'`` and their negatives, case and
  surrounding whitespace ignored; a number is true when non-zero.

A value that has no such conversion raises :class:`KeyMismatch`: the key can equal no stored key,
so the lookup is a miss (no call is made for it). Example::

    >>> to_int("007", 32), to_int(" -4 ", 32), to_text(1e20), to_text(True)
    (7, -4, '1.0E20', 'true')
    >>> to_int("１", 32)
    Traceback (most recent call last):
      ...
    aiospark.lookup.keys.KeyMismatch: '１' is not an integer (Spark's try_cast gives NULL)
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["KeyMismatch", "to_int", "to_float", "to_decimal", "to_text", "to_bool", "to_uuid",
           "spark_trim", "UNSUPPORTED_KEY_TYPES"]

#: Spark key column types a lookup refuses at definition time (with what to cast them to):
#: their text form depends on the session (time zone) or on a float32 printing Python lacks.
UNSUPPORTED_KEY_TYPES = {
    "float": "cast it to DOUBLE (exact for every FLOAT) or to STRING",
    "timestamp": "cast it to STRING (or to the source's key type) with the format you need",
    "timestamp_ntz": "cast it to STRING (or to the source's key type) with the format you need",
    "array": "look up one element, or cast it to STRING", "map": "cast it to STRING",
    "struct": "pass its fields as separate key columns", "variant": "cast it to STRING",
}

_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_SPECIAL = {"nan": math.nan, "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf,
            "inf": math.inf, "+inf": math.inf, "-inf": -math.inf}
_TRUE = {"t", "true", "y", "yes", "1"}
_FALSE = {"f", "false", "n", "no", "0"}
_WS = "".join(chr(c) for c in range(33))


class KeyMismatch(ValueError):
    """The key value has no conversion to the source's key type: it matches nothing (a miss)."""


class KeyNotRenderable(TypeError):
    """The key value has no one text form a source could be asked with (a TIMESTAMP prints by
    the session's time zone): an error that says what to change, never a miss."""


def spark_trim(s: str) -> str:
    """Strip what Spark's string casts ignore around a value: code points 0..32."""
    return s.strip(_WS)


def _text_of(v: Any) -> str:
    if isinstance(v, (bytes, bytearray, memoryview)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            raise KeyMismatch(f"{bytes(v)[:40]!r} is not UTF-8 text") from None
    return v


def to_int(v: Any, bits: int = 64) -> int:
    """``v`` as an integer of ``bits`` bits, or :class:`KeyMismatch` (see the module doc)."""
    if type(v) is int:
        out = v
    elif isinstance(v, bool):
        out = int(v)
    elif isinstance(v, int):
        out = int(v)
    elif isinstance(v, float):
        if not v.is_integer():
            raise KeyMismatch(f"{v!r} equals no integer")
        out = int(v)
    elif isinstance(v, decimal.Decimal):
        if not v.is_finite() or v != v.to_integral_value():
            raise KeyMismatch(f"{v!r} equals no integer")
        out = int(v)
    elif isinstance(v, (str, bytes, bytearray, memoryview)):
        s = spark_trim(_text_of(v))
        if not _INT_RE.match(s):
            raise KeyMismatch(f"{v!r} is not an integer (Spark's try_cast gives NULL)")
        out = int(s)
    else:
        raise KeyMismatch(f"a {type(v).__name__} is not an integer")
    limit = 1 << (bits - 1)
    if not -limit <= out < limit:
        raise KeyMismatch(f"{out} is out of range for a {bits}-bit integer")
    return out


def to_float(v: Any) -> float:
    """``v`` as a float, or :class:`KeyMismatch`."""
    if isinstance(v, float):
        return v
    if isinstance(v, (int, decimal.Decimal)):
        return float(v)
    if isinstance(v, (str, bytes, bytearray, memoryview)):
        s = spark_trim(_text_of(v))
        if _FLOAT_RE.match(s):
            return float(s)
        special = _SPECIAL.get(s.lower())
        if special is not None:
            return special
        raise KeyMismatch(f"{v!r} is not a number (Spark's try_cast gives NULL)")
    raise KeyMismatch(f"a {type(v).__name__} is not a number")


def to_decimal(v: Any) -> decimal.Decimal:
    """``v`` as a Decimal (finite, ASCII digits), or :class:`KeyMismatch`."""
    if isinstance(v, decimal.Decimal):
        out = v
    elif isinstance(v, bool):
        out = decimal.Decimal(int(v))
    elif isinstance(v, int):
        out = decimal.Decimal(v)
    elif isinstance(v, float):
        out = decimal.Decimal(repr(v)) if math.isfinite(v) else decimal.Decimal("NaN")
    elif isinstance(v, (str, bytes, bytearray, memoryview)):
        s = spark_trim(_text_of(v))
        if not _FLOAT_RE.match(s):
            raise KeyMismatch(f"{v!r} is not a decimal number")
        out = decimal.Decimal(s)
    else:
        raise KeyMismatch(f"a {type(v).__name__} is not a decimal number")
    if not out.is_finite():
        raise KeyMismatch(f"{v!r} equals no decimal")
    return out


def _java_double(v: float) -> str:
    """Java's ``Double.toString`` (what Spark's CAST(double AS STRING) prints)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0.0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    a = abs(v)
    if 1e-3 <= a < 1e7:
        text = repr(v)
        return text if ("." in text or "e" in text) else text + ".0"
    # repr has the shortest round-tripping digits, as Java's has: re-place the point after the first
    mantissa, _, exp = repr(a).partition("e")
    point = mantissa.index(".") if "." in mantissa else len(mantissa)
    digits = mantissa.replace(".", "")
    stripped = digits.lstrip("0")
    exponent = int(exp or 0) + point - 1 - (len(digits) - len(stripped))
    digits = stripped.rstrip("0") or "0"
    return f"{'-' if v < 0 else ''}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def to_text(v: Any) -> str:
    """``CAST(v AS STRING)`` as Spark prints it; :class:`KeyMismatch` for non-UTF-8 bytes (no text
    equals them), :class:`KeyNotRenderable` for a value with no one text form (a timestamp)."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _java_double(v)
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return _text_of(v)
    if isinstance(v, _dt.datetime):
        raise KeyNotRenderable("a timestamp key has no session-independent text form: cast the key "
                               "column to STRING in Spark first")
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    raise KeyNotRenderable(f"a {type(v).__name__} key has no text form: cast the key column to STRING")


def to_bool(v: Any) -> bool:
    """``v`` as a boolean (Spark's rules), or :class:`KeyMismatch`."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float, decimal.Decimal)):
        if isinstance(v, float) and math.isnan(v):
            raise KeyMismatch("NaN is not a boolean")
        return v != 0
    if isinstance(v, (str, bytes, bytearray, memoryview)):
        s = spark_trim(_text_of(v)).lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    raise KeyMismatch(f"{v!r} is not a boolean")


def to_uuid(v: Any) -> uuid.UUID:
    """``v`` as a UUID (its text forms as PostgreSQL reads them), or :class:`KeyMismatch`."""
    if isinstance(v, uuid.UUID):
        return v
    try:
        return uuid.UUID(spark_trim(to_text(v)))
    except ValueError:
        raise KeyMismatch(f"{v!r} is not a UUID") from None


def converter(kind: str, bits: int = 64) -> Callable[[Any], Any]:
    """The conversion for a key of ``kind`` (``int``, ``float``, ``decimal``, ``text``, ``bool``,
    ``uuid``; anything else passes values through)."""
    if kind == "int":
        return lambda v: to_int(v, bits)
    return {"float": to_float, "decimal": to_decimal, "text": to_text, "bool": to_bool,
            "uuid": to_uuid}.get(kind, lambda v: v)
