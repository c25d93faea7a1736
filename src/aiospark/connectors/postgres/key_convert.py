"""Key values as PostgreSQL key column types, and the values no row of that type can hold.

:func:`key_converter` gives, for a column type's name, the conversion of a Spark key value by
Spark SQL's cast rules (:mod:`aiospark.lookup.keys`). It raises
:class:`~aiospark.lookup.keys.KeyMismatch` -- a miss decided before any query -- only for a value
no row can equal: no conversion, a NUL character or a lone surrogate in text (PostgreSQL text holds
neither), an integer beyond the column's range, a number beyond numeric's or real's range. Values
asyncpg would otherwise have to refuse (or, for numeric, would encode wrongly) are never sent.

Example::

    >>> key_converter("int4")("007"), key_converter("text")(42)
    (7, '42')
    >>> key_converter("numeric")("9e999999")
    Traceback (most recent call last):
      ...
    aiospark.lookup.keys.KeyMismatch: '9e999999' is beyond PostgreSQL numeric's range
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Callable
from typing import Any

from ...lookup import keys as keyconv

__all__ = ["key_converter"]

_TEXT = {"text", "varchar", "bpchar", "name", "citext"}
_INT_BITS = {"int2": 16, "int4": 32, "int8": 64}
#: PostgreSQL numeric: at most 131072 digits before the decimal point, 16383 after it
_NUMERIC_INT_DIGITS, _NUMERIC_SCALE = 131072, 16383


def _text_key(value: Any) -> str:
    text = keyconv.to_text(value)
    if "\x00" in text:  # PostgreSQL text cannot hold NUL: no row has such a key
        raise keyconv.KeyMismatch("text with a NUL character")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: not a character, no text holds it
            raise keyconv.KeyMismatch("text with a lone surrogate (not valid Unicode)") from None
    return text


def _numeric_key(value: Any) -> decimal.Decimal:
    """A Decimal numeric can hold, or KeyMismatch: beyond numeric's range no row can equal it."""
    d = keyconv.to_decimal(value)
    sign, digits, exp = d.as_tuple()
    if not any(digits):
        return decimal.Decimal(0)
    assert isinstance(exp, int)  # finite: to_decimal refuses NaN and infinities
    if exp < -_NUMERIC_SCALE:  # trailing zeros after the point do not change the value (1.50 = 1.5)
        text = "".join(map(str, digits))
        drop = min(-exp, len(text) - len(text.rstrip("0")))
        digits, exp = tuple(int(c) for c in text[:len(text) - drop]), exp + drop
        d = decimal.Decimal((sign, digits, exp))
    if exp < -_NUMERIC_SCALE or len(digits) + exp > _NUMERIC_INT_DIGITS:
        raise keyconv.KeyMismatch(f"{value!r} is beyond PostgreSQL numeric's range")
    return d


def _float4_key(value: Any) -> float:
    f = keyconv.to_float(value)
    try:
        struct.pack("!f", f)  # rounds as asyncpg's float4 encoding does
    except OverflowError:
        raise keyconv.KeyMismatch(f"{value!r} is beyond PostgreSQL real's range") from None
    return f


def key_converter(typ: str) -> Callable[[Any], Any]:
    """The conversion of a key value to the PostgreSQL type named ``typ`` (see the module doc)."""
    if typ in _TEXT:
        return _text_key
    if typ in _INT_BITS:
        return keyconv.converter("int", _INT_BITS[typ])
    if typ == "float4":
        return _float4_key
    if typ == "float8":
        return keyconv.to_float
    if typ == "numeric":
        return _numeric_key
    return keyconv.converter({"uuid": "uuid", "bool": "bool"}.get(typ, typ))
