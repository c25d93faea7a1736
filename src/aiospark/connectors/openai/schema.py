"""Structured output for :class:`~aiospark.connectors.openai.OpenAIChat`: one Spark ``StructType``
is the single source of both the JSON Schema sent to the endpoint (OpenAI's strict mode) and the
check that turns the answer back into a Spark value.

``response_struct`` takes what users pass as ``response_format`` (a DDL string, a ``StructType`` or
a pydantic v2 model class) and refuses, naming the field path, any type JSON cannot carry exactly.
``json_schema`` writes the strict schema: every object has ``additionalProperties: false`` and
lists all its properties in ``required``; a nullable field is ``"type": [T, "null"]``.
``read_answer`` parses the answer text and raises :class:`AnswerError` (with the path) for anything
that is not JSON of that shape: not JSON, a missing or extra field, a wrong type, a null in a NOT NULL
field, an integer out of its type's range, a date or timestamp that is not written exactly as asked.

Type mapping (Spark -> JSON Schema -> Python value handed to Spark):

* STRING, CHAR(n), VARCHAR(n) -> ``string`` (n is checked on the way back);
  BOOLEAN -> ``boolean``; TINYINT/SMALLINT/INT/BIGINT -> ``integer`` with the type's
  ``minimum``/``maximum`` (range-checked); FLOAT/DOUBLE -> ``number``.
* DECIMAL(p, s) -> ``number``, read exactly (never through a float); a value that needs rounding
  to ``s`` places or has more than ``p - s`` integer digits is a bad answer.
* DATE -> ``string`` with ``format: date`` (``YYYY-MM-DD``); TIMESTAMP -> ``string`` with
  ``format: date-time`` (RFC 3339 with ``Z`` or an offset, at most microseconds; handed over as an
  aware UTC ``datetime``); TIMESTAMP_NTZ -> ``string`` with a ``pattern`` (no zone).
* ARRAY<T> -> ``array``; STRUCT -> ``object``; MAP<STRING, V> -> an ``array`` of
  ``{key, value}`` objects (strict mode has no free-form objects), handed over as a dict.
* Refused: BINARY, intervals, VOID, VARIANT, TIME, user-defined types, MAP with non-string keys.
* Allowed values (``metadata["enum"]``, from ``Literal``/``Enum`` or a comment ``enum: a, b``,
  :mod:`.choices`) -> ``enum`` (with ``null`` for a nullable field), checked in the answer.

Numbers are parsed at a bounded cost (non-integers as ``Decimal``; Python refuses integers over 4,300 digits)
and their size is checked before any conversion; every conversion error is an AnswerError.

Example::

    struct, model = response_struct(StructType.fromDDL("label STRING NOT NULL, score INT"))
    json_schema(struct)    # {"type": "object", "properties": {...}, "required": ["label", "score"], ...}
    read_answer(struct, '{"label": "pos", "score": 3}')    # {'label': 'pos', 'score': 3}
"""
from __future__ import annotations

import datetime as _dt
import decimal
import json
import re
import sys
import types
import typing
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .choices import CHARS as _CHARS
from .choices import ENUM
from .choices import RANGES as _RANGES
from .choices import allowed_of as _allowed_of
from .choices import choices_of as _choices
from .choices import with_enums as _with_enums

__all__ = ["ENUM", "AnswerError", "json_schema", "read_answer", "response_struct", "schema_name"]

_NTZ = getattr(sys.modules["pyspark.sql.types"], "TimestampNTZType", None)
_FLOAT_MAX = 3.4028234663852886e38
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"
_TIMESTAMP = re.compile(_TIME + r"(?:(Z)|([+-])(\d{2}):(\d{2}))", re.IGNORECASE)
_TIMESTAMP_NTZ = re.compile(_TIME)
_NTZ_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?$"
_NAME = re.compile(r"[^a-zA-Z0-9_-]")
#: integers longer than this are kept as Decimal while parsing: converting a huge JSON integer to
#: int (or a float) costs time quadratic in its digits, or raises
_INT_DIGITS = 40


class AnswerError(ValueError):
    """The answer is not JSON of the asked shape (the message names the path and what is wrong)."""


# --- what users pass -> a StructType --------------------------------------------------------------

def response_struct(response_format: Any) -> tuple[StructType, Any]:
    """``(StructType, pydantic model or None)`` for a ``response_format``; ValueError/TypeError
    saying what to change for anything JSON cannot carry exactly."""
    model = None
    if isinstance(response_format, str):
        struct = _parse_ddl(response_format)
    elif isinstance(response_format, StructType):
        struct = response_format
    elif _is_pydantic_model(response_format):
        model = response_format
        struct = _struct_of_model(model, "", set())
    elif isinstance(response_format, DataType):
        raise ValueError(f"response_format must be a StructType (the answer's fields), got "
                         f"{response_format.simpleString()}: wrap it, e.g. 'value {response_format.simpleString()}'")
    else:
        raise TypeError("response_format must be a Spark DDL string ('label STRING, score INT'), a StructType or "
                        f"a pydantic (v2) model class, got {type(response_format).__name__}")
    _check_type(struct, "")
    checked = _with_enums(struct, "")
    assert isinstance(checked, StructType)  # a struct stays a struct
    return checked, model


def _parse_ddl(ddl: str) -> StructType:
    if not ddl.strip():
        raise ValueError("response_format is empty: give the answer's fields, e.g. 'label STRING, score INT'")
    from pyspark.sql.types import _parse_datatype_string

    try:
        parsed = _parse_datatype_string(ddl)  # the active session's own parser (classic or Connect)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if "should be created first" in first or "No active" in first or "active" in first.lower():
            raise ValueError(f"response_format {ddl!r} is a DDL string, which the active Spark session parses: "
                             "create the session first, or pass a StructType / pydantic model") from None
        raise ValueError(f"response_format {ddl!r} does not parse as a Spark DDL string "
                         f"(e.g. 'label STRING, score INT'): {first}") from None
    if not isinstance(parsed, StructType):
        raise ValueError(f"response_format {ddl!r} is a single type, not the answer's fields: write it as "
                         f"'value {ddl.strip()}'")
    return parsed


def _is_pydantic_model(obj: Any) -> bool:
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(obj, type):
        return False
    if issubclass(obj, pydantic.BaseModel):
        return True
    v1 = getattr(getattr(pydantic, "v1", None), "BaseModel", None)
    if v1 is not None and issubclass(obj, v1):
        raise TypeError(f"response_format {obj.__name__} is a pydantic v1 model: use a pydantic v2 BaseModel")
    return False


def _struct_of_model(model: Any, path: str, seen: set) -> StructType:
    if model in seen:
        raise ValueError(f"response_format field {path or model.__name__!r}: the model {model.__name__} contains "
                         "itself, which no Spark type can hold: cut the recursion")
    seen = seen | {model}
    fields = []
    for name, info in model.model_fields.items():
        where = f"{path}.{name}" if path else name
        if info.alias is not None and info.alias != name:
            raise ValueError(f"response_format field {where!r} has the alias {info.alias!r}: the answer's JSON and "
                             "the Spark column use the field name; rename the field instead")
        data_type, nullable = _from_annotation(info.annotation, where, seen)
        meta: dict[str, Any] = {"comment": info.description} if info.description else {}
        allowed = _allowed_of(info.annotation, where)
        if allowed is not None:
            meta[ENUM] = allowed
        fields.append(StructField(name, data_type, nullable, meta))
    if not fields:
        raise ValueError(f"response_format {model.__name__} has no fields: a STRUCT needs at least one")
    return StructType(fields)


def _from_annotation(ann: Any, path: str, seen: set) -> tuple[DataType, bool]:
    """A pydantic field's annotation -> (Spark type, nullable)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _from_annotation(args[0], path, seen)
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise ValueError(f"response_format field {path!r} is a union {ann!r}: a Spark column has one type; "
                             "use one type, or Optional[T] for a nullable one")
        return _from_annotation(rest[0], path, seen)[0], True
    allowed = _choices(ann, path)
    if allowed is not None:  # Literal[...] or an Enum: its values' type, checked against them
        return (StringType() if isinstance(allowed[0], str) else LongType()), False
    simple = {str: StringType(), bool: BooleanType(), int: LongType(), float: DoubleType(),
              _dt.datetime: TimestampType(), _dt.date: DateType()}
    for py, spark_type in simple.items():
        if ann is py:
            return spark_type, False
    if origin is list:
        element, element_null = _from_annotation(args[0] if args else Any, f"{path}[]", seen)
        return ArrayType(element, element_null), False
    if origin is dict:
        key = args[0] if args else Any
        if key is not str:
            raise ValueError(f"response_format field {path + '.key'!r}: JSON object keys are strings; use "
                             "dict[str, ...] or a list of a key/value model")
        value, value_null = _from_annotation(args[1], f"{path}.value", seen)
        return MapType(StringType(), value, value_null), False
    if _is_pydantic_model(ann):
        return _struct_of_model(ann, path, seen), False
    raise ValueError(f"response_format field {path!r} has the type {getattr(ann, '__name__', ann)!r}, which has no "
                     "exact Spark type: use str, int, float, bool, datetime.date, datetime.datetime, Optional[...], "
                     "list[...], dict[str, ...] or a nested BaseModel (or pass a StructType, e.g. for DECIMAL)")


def _check_type(data_type: DataType, path: str) -> None:
    """ValueError naming the field path for a type the JSON Schema cannot carry exactly."""
    where = f"response_format field {path!r}"
    if isinstance(data_type, StructType):
        if not data_type.fields:
            raise ValueError(f"{where if path else 'response_format'} is a STRUCT without fields: give it at least one")
        names = [f.name for f in data_type.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"{where if path else 'response_format'} has duplicate field names {names}: rename them")
        for f in data_type.fields:
            _check_type(f.dataType, f"{path}.{f.name}" if path else f.name)
    elif isinstance(data_type, ArrayType):
        _check_type(data_type.elementType, f"{path}[]")
    elif isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise ValueError(f"response_format field {path + '.key'!r} is {data_type.keyType.simpleString()}: JSON "
                             "object keys are strings; use MAP<STRING, ...> or ARRAY<STRUCT<key: ..., value: ...>>")
        _check_type(data_type.valueType, f"{path}.value")
    elif isinstance(data_type, BinaryType):
        raise ValueError(f"{where} is BINARY, which JSON cannot carry: use STRING (e.g. base64 text)")
    elif not isinstance(data_type, (StringType, BooleanType, FloatType, DoubleType, DecimalType, DateType,
                                    TimestampType, *_CHARS, *_RANGES)) and not (_NTZ and isinstance(data_type, _NTZ)):
        raise ValueError(f"{where} is {data_type.simpleString()}, which has no exact JSON form: use STRING, a "
                         "number type (e.g. seconds as DOUBLE for an interval), DATE or TIMESTAMP")


# --- StructType -> OpenAI strict JSON Schema ---------------------------------------------------------

def schema_name(model: Any) -> str:
    """The ``json_schema.name`` (``[a-zA-Z0-9_-]{1,64}``): the model's class name, else ``"response"``."""
    name = _NAME.sub("_", model.__name__)[:64] if model is not None else "response"
    return name or "response"


def json_schema(data_type: DataType, nullable: bool = False, comment: str | None = None,
                allowed: list | None = None) -> dict:
    """The strict-mode JSON Schema of ``data_type`` (see the module doc for the mapping);
    ``allowed``: the value's ``enum`` (for an array: its elements')."""
    schema: dict[str, Any]
    if isinstance(data_type, StructType):
        schema = {"type": "object",
                  "properties": {f.name: json_schema(f.dataType, f.nullable, (f.metadata or {}).get("comment"),
                                                     (f.metadata or {}).get(ENUM))
                                 for f in data_type.fields},
                  "required": [f.name for f in data_type.fields], "additionalProperties": False}
    elif isinstance(data_type, ArrayType):
        schema = {"type": "array", "items": json_schema(data_type.elementType, data_type.containsNull,
                                                        allowed=allowed)}
        allowed = None
    elif isinstance(data_type, MapType):
        pair = {"type": "object", "properties": {"key": {"type": "string"},
                                                  "value": json_schema(data_type.valueType, data_type.valueContainsNull)},
                "required": ["key", "value"], "additionalProperties": False}
        schema = {"type": "array", "items": pair,
                  "description": "a map, as a list of {key, value} pairs with distinct keys"}
    elif isinstance(data_type, BooleanType):
        schema = {"type": "boolean"}
    elif type(data_type) in _RANGES:
        low, high = _RANGES[type(data_type)]
        schema = {"type": "integer", "minimum": low, "maximum": high}
    elif isinstance(data_type, (FloatType, DoubleType)):
        schema = {"type": "number"}
    elif isinstance(data_type, DecimalType):
        schema = {"type": "number", "description": f"at most {data_type.precision - data_type.scale} digits "
                                                   f"before the decimal point and {data_type.scale} after"}
    elif isinstance(data_type, DateType):
        schema = {"type": "string", "format": "date"}
    elif _NTZ is not None and isinstance(data_type, _NTZ):
        schema = {"type": "string", "pattern": _NTZ_PATTERN,
                  "description": "a local date and time without a zone, e.g. 2024-05-01T13:45:00"}
    elif isinstance(data_type, TimestampType):
        schema = {"type": "string", "format": "date-time"}
    elif _CHARS and isinstance(data_type, _CHARS):
        schema = {"type": "string", "description": f"at most {data_type.length} characters"}
    else:  # STRING (what _check_type let through)
        schema = {"type": "string"}
    if comment:
        schema["description"] = f"{comment} ({schema['description']})" if "description" in schema else comment
    if allowed is not None:
        schema["enum"] = list(allowed) + ([None] if nullable else [])  # strict mode lists null too
    if nullable:
        schema["type"] = [schema["type"], "null"]
    return schema


# --- the answer -> a Spark value -----------------------------------------------------------------------

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
