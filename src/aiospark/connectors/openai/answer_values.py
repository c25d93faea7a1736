"""The answer text -> the value of the answer's ``StructType`` (:mod:`.schema`), or :class:`AnswerError`.

``read_answer`` parses the answer and raises :class:`AnswerError` (with the path) for anything
that is not JSON of that shape: not JSON, a key given twice, a missing or extra field, a wrong
type, a null in a NOT NULL field, an integer out of its type's range, a value not among the
allowed ones, a decimal that needs rounding, a date or timestamp that is not written exactly as
asked (the forms: :mod:`.schema`'s type mapping).

Numbers are parsed at a bounded cost (non-integers as ``Decimal``; Python refuses integers over 4,300 digits)
and their size is checked before any conversion; every conversion error is an AnswerError.

Example::

    struct = StructType([StructField("label", StringType(), False), StructField("score", IntegerType())])
    read_answer(struct, '{"label": "pos", "score": 3}')    # {'label': 'pos', 'score': 3}
    read_answer(struct, '{"label": "pos"}')                # AnswerError: the answer lacks the fields ['score']
"""
from __future__ import annotations

import datetime as _dt
import decimal
import json
import re
import sys
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .choices import CHARS as _CHARS
from .choices import ENUM
from .choices import NTZ as _NTZ
from .choices import RANGES as _RANGES

__all__ = ["AnswerError", "read_answer"]

_FLOAT_MAX = 3.4028234663852886e38
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"
_TIMESTAMP = re.compile(_TIME + r"(?:(Z)|([+-])(\d{2}):(\d{2}))", re.IGNORECASE)
_TIMESTAMP_NTZ = re.compile(_TIME)
#: integers longer than this are kept as Decimal while parsing: converting a huge JSON integer to
#: int (or a float) costs time quadratic in its digits, or raises
_INT_DIGITS = 40


class AnswerError(ValueError):
    """The answer is not JSON of the asked shape (the message names the path and what is wrong)."""


def _no_constant(name: str) -> Any:
    raise AnswerError(f"{name} is not a JSON number")


def _no_repeats(pairs: list) -> dict:
    """A JSON object as a dict; a key given twice is an AnswerError (which one the model meant is
    unknown, and ``json.loads`` would silently keep the last)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set = set()
        for key, _ in pairs:
            if key in seen:
                raise AnswerError(f"the key {key[:40]!r} is repeated in an object")
            seen.add(key)
    return value


def read_answer(struct: StructType, text: str) -> dict:
    """The answer text as the struct's value (a dict of Python values Spark takes), or AnswerError.
    Numbers are parsed at a cost linear in their text (``1e1000000`` is 9 characters, not a
    million digits), and their size is checked before any conversion."""
    try:
        # integers as int: Python refuses those over 4,300 digits (ValueError, below), and the
        # conversions check sizes before converting
        value = json.loads(text, parse_float=decimal.Decimal, parse_constant=_no_constant,
                           object_pairs_hook=_no_repeats)
    except AnswerError:
        raise
    except (json.JSONDecodeError, RecursionError) as exc:
        raise AnswerError(f"not JSON ({exc})") from None
    except (ValueError, ArithmeticError) as exc:  # e.g. an integer of more than 4,300 digits
        raise AnswerError(f"not JSON of numbers Python can read ({_short(exc, 120)})") from None
    return _convert(struct, False, value, "")


def _short(value: Any, limit: int = 40) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, decimal.Decimal)):
        return f"the number {_short(value)}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _convert(data_type: DataType, nullable: bool, value: Any, path: str, allowed: list | None = None) -> Any:
    where = path or "the answer"
    if value is None:
        if nullable:
            return None
        raise AnswerError(f"{where} is null, but it is NOT NULL")

    def wrong(expected: str) -> AnswerError:
        return AnswerError(f"{where} is {_kind(value)}, not {expected}")

    if isinstance(data_type, StructType):
        if not isinstance(value, dict):
            raise wrong("an object")
        names = data_type.fieldNames()
        extra = [k for k in value if k not in names]
        if extra:
            raise AnswerError(f"{where} has fields {extra[:5]} that are not in the schema {names}")
        missing = [n for n in names if n not in value]
        if missing:
            raise AnswerError(f"{where} lacks the fields {missing[:5]}")
        return {f.name: _convert(f.dataType, f.nullable, value[f.name], f"{path}.{f.name}" if path else f.name,
                                 (f.metadata or {}).get(ENUM))
                for f in data_type.fields}
    if isinstance(data_type, ArrayType):
        if not isinstance(value, list):
            raise wrong("an array")
        return [_convert(data_type.elementType, data_type.containsNull, v, f"{path}[{i}]", allowed)
                for i, v in enumerate(value)]
    if isinstance(data_type, MapType):
        if not isinstance(value, list):
            raise wrong("an array of {key, value} pairs")
        out: dict = {}
        pair_type = StructType([StructField("key", StringType(), False),
                                StructField("value", data_type.valueType, data_type.valueContainsNull)])
        for i, pair in enumerate(value):
            pair = _convert(pair_type, False, pair, f"{path}[{i}]")
            if pair["key"] in out:
                raise AnswerError(f"{path}[{i}].key {pair['key']!r} repeats an earlier key")
            out[pair["key"]] = pair["value"]
        return out
    if isinstance(data_type, BooleanType):
        if type(value) is not bool:
            raise wrong("a boolean")
        return value
    if type(data_type) in _RANGES:
        low, high = _RANGES[type(data_type)]
        if isinstance(value, decimal.Decimal) and value.is_finite():
            if value.adjusted() > _INT_DIGITS:  # checked first: int() of 1e1000000 takes seconds
                raise AnswerError(f"{where} is {_short(value)}, out of the range of {data_type.simpleString()} "
                                  f"[{low}, {high}]")
            if value == value.to_integral_value():
                value = int(value)  # 3.0 is an integer in JSON Schema
        if type(value) is not int:
            raise wrong("an integer")
        if not low <= value <= high:
            raise AnswerError(f"{where} is {_short(value)}, out of the range of {data_type.simpleString()} "
                              f"[{low}, {high}]")
        if allowed is not None and value not in allowed:
            raise _not_allowed(where, value, allowed)
        return value
    if isinstance(data_type, (FloatType, DoubleType)):
        if type(value) not in (int, decimal.Decimal):
            raise wrong("a number")
        if type(value) is int and value.bit_length() > 1024:  # float() would raise OverflowError
            raise AnswerError(f"{where} is {_short(value)}, out of the range of {data_type.simpleString()}")
        number = float(value)  # a Decimal goes through its short text: inf when too large, never an error
        limit = _FLOAT_MAX if isinstance(data_type, FloatType) else sys.float_info.max
        if not -limit <= number <= limit:
            raise AnswerError(f"{where} is {_short(value)}, out of the range of {data_type.simpleString()}")
        return number
    if isinstance(data_type, DecimalType):
        return _decimal(data_type, value, where, wrong)
    if not isinstance(value, str):
        raise wrong("a string")
    if isinstance(data_type, DateType):
        return _date(value, where)
    if _NTZ is not None and isinstance(data_type, _NTZ):
        return _timestamp(_TIMESTAMP_NTZ.fullmatch(value), value, where, "YYYY-MM-DDTHH:MM:SS[.ffffff] without a zone")
    if isinstance(data_type, TimestampType):
        return _timestamp(_TIMESTAMP.fullmatch(value), value, where,
                          "RFC 3339, YYYY-MM-DDTHH:MM:SS[.ffffff] with Z or an offset")
    if _CHARS and isinstance(data_type, _CHARS) and len(value) > data_type.length:
        raise AnswerError(f"{where} has {len(value)} characters, more than {data_type.simpleString()} holds")
    if allowed is not None and value not in allowed:
        raise _not_allowed(where, value, allowed)
    return value


def _not_allowed(where: str, value: Any, allowed: list) -> AnswerError:
    return AnswerError(f"{where} is {_kind(value)}, not one of the allowed values {allowed[:20]}")


def _decimal(data_type: DecimalType, value: Any, where: str, wrong: Any) -> decimal.Decimal:
    if type(value) not in (int, decimal.Decimal):
        raise wrong("a number")
    number = decimal.Decimal(value)
    if not number.is_finite():
        raise wrong("a finite number")
    integer_digits = data_type.precision - data_type.scale
    # the size first: quantizing 1e200 to 2 places needs 203 digits (InvalidOperation)
    if number and number.adjusted() >= integer_digits:
        raise AnswerError(f"{where} is {_short(value)}, too large for {data_type.simpleString()}")
    with decimal.localcontext() as ctx:
        ctx.prec = 100  # above DECIMAL's 38 digits: the quantize below is exact or says so
        try:
            exact = number.quantize(decimal.Decimal(1).scaleb(-data_type.scale))
        except ArithmeticError:
            exact = None
        if exact is None or exact != number:
            raise AnswerError(f"{where} is {_short(value)}, which has more than {data_type.scale} digits after the "
                              f"point ({data_type.simpleString()})")
        if abs(exact) >= decimal.Decimal(10) ** integer_digits:  # 99.995 -> 100.00 for DECIMAL(4,2)
            raise AnswerError(f"{where} is {_short(value)}, too large for {data_type.simpleString()}")
    return exact


def _date(value: str, where: str) -> _dt.date:
    if _DATE.fullmatch(value):
        try:
            return _dt.date(int(value[:4]), int(value[5:7]), int(value[8:10]))
        except ValueError as exc:
            raise AnswerError(f"{where} is {value!r}, not a date: {exc}") from None
    raise AnswerError(f"{where} is {value[:40]!r}, not a date written YYYY-MM-DD")


def _timestamp(match: Any, value: str, where: str, form: str) -> _dt.datetime:
    if match is None:
        raise AnswerError(f"{where} is {value[:40]!r}, not a timestamp written {form}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    micros = int((match.group(7) or "").ljust(6, "0"))
    try:
        if len(match.groups()) == 7:  # no zone: TIMESTAMP_NTZ
            return _dt.datetime(year, month, day, hour, minute, second, micros)
        zulu, sign, oh, om = match.groups()[7:]
        offset = _dt.timedelta(0) if zulu else (1 if sign == "+" else -1) * _dt.timedelta(hours=int(oh),
                                                                                           minutes=int(om))
        stamp = _dt.datetime(year, month, day, hour, minute, second, micros, tzinfo=_dt.timezone(offset))
        return stamp.astimezone(_dt.timezone.utc)
    except (ValueError, OverflowError) as exc:
        raise AnswerError(f"{where} is {value!r}, not a valid timestamp: {exc}") from None
