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

Example::

    struct, model = response_struct(StructType.fromDDL("label STRING NOT NULL, score INT"))
    json_schema(struct)    # {"type": "object", "properties": {...}, "required": ["label", "score"], ...}
    read_answer(struct, '{"label": "pos", "score": 3}')    # {'label': 'pos', 'score': 3}
"""
from __future__ import annotations

import datetime as _dt
import decimal
import enum
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
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["ENUM", "AnswerError", "json_schema", "read_answer", "response_struct", "schema_name", "validated"]

_NTZ = getattr(sys.modules["pyspark.sql.types"], "TimestampNTZType", None)
_CHARS = tuple(t for t in (getattr(sys.modules["pyspark.sql.types"], n, None) for n in ("CharType", "VarcharType"))
               if t is not None)
_RANGES: dict[type, tuple[int, int]] = {ByteType: (-2**7, 2**7 - 1), ShortType: (-2**15, 2**15 - 1), IntegerType: (-2**31, 2**31 - 1),
           LongType: (-2**63, 2**63 - 1)}
_FLOAT_MAX = 3.4028234663852886e38
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"
_TIMESTAMP = re.compile(_TIME + r"(?:(Z)|([+-])(\d{2}):(\d{2}))", re.IGNORECASE)
_TIMESTAMP_NTZ = re.compile(_TIME)
_NTZ_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?$"
_NAME = re.compile(r"[^a-zA-Z0-9_-]")
#: a field's metadata key holding its allowed values (JSON Schema's ``enum``)
ENUM = "enum"
_ENUM_COMMENT = re.compile(r"\s*enum\s*:\s*(.+?)\s*", re.IGNORECASE | re.DOTALL)
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
    return _with_enums(struct, ""), model


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


def _choices(ann: Any, path: str) -> list | None:
    """The allowed values of a ``Literal[...]`` or an ``Enum`` annotation (all strings, or all
    integers), else None."""
    if typing.get_origin(ann) is typing.Literal:
        values = list(typing.get_args(ann))
    elif isinstance(ann, type) and issubclass(ann, enum.Enum):
        values = [member.value for member in ann]
    else:
        return None
    if values and all(isinstance(v, str) for v in values):
        return values
    if values and all(type(v) is int for v in values):
        return values
    raise ValueError(f"response_format field {path!r} allows {values!r}: a Spark column has one type, so the "
                     "values must be all strings or all integers")


def _allowed_of(ann: Any, path: str) -> list | None:
    """The allowed values a field's annotation sets for its value (``Literal``, ``Enum``, within
    ``Optional``/``Annotated``) or for its elements (``list[...]`` of them); None if none."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _allowed_of(args[0], path)
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        rest = [a for a in args if a is not type(None)]
        return _allowed_of(rest[0], path) if len(rest) == 1 else None
    if origin is list and args:
        inner = args[0]
        inner_origin = typing.get_origin(inner)
        if inner_origin is typing.Union or inner_origin is getattr(types, "UnionType", None):
            rest = [a for a in typing.get_args(inner) if a is not type(None)]
            inner = rest[0] if len(rest) == 1 else inner
        if _choices(inner, path) is None and _nested_choices(inner):
            raise ValueError(f"response_format field {path!r}: allowed values (Literal/Enum) are supported on a "
                             "field or on the elements of a list field, not deeper: use a nested model")
        return _choices(inner, path)
    if origin is dict and len(args) == 2 and _nested_choices(args[1]):
        raise ValueError(f"response_format field {path!r}: allowed values (Literal/Enum) are not supported as "
                         "map values: use a list of a key/value model")
    return _choices(ann, path)


def _nested_choices(ann: Any) -> bool:
    """Whether a Literal or an Enum hides somewhere inside ``ann`` (a list of lists, ...)."""
    if typing.get_origin(ann) is typing.Literal or (isinstance(ann, type) and issubclass(ann, enum.Enum)):
        return True
    return any(_nested_choices(a) for a in typing.get_args(ann) if a is not type(None))


def _with_enums(data_type: DataType, path: str) -> DataType:
    """``data_type`` with each field's allowed values checked and kept as ``metadata["enum"]``:
    from that key (a StructType's own), or from a comment ``enum: a, b, c`` (or ``enum: ["a, b",
    "c"]``; the DDL way: ``label STRING NOT NULL COMMENT 'enum: pos, neg'``), which is then the
    values, not a description."""
    if isinstance(data_type, StructType):
        fields = []
        for f in data_type.fields:
            where = f"{path}.{f.name}" if path else f.name
            meta = dict(f.metadata or {})
            comment = meta.get("comment")
            declared = _ENUM_COMMENT.fullmatch(comment) if isinstance(comment, str) else None
            if declared is not None:
                if ENUM in meta:
                    raise ValueError(f"response_format field {where!r} gives its allowed values twice (a comment "
                                     "'enum: ...' and metadata['enum']): keep one")
                meta[ENUM] = _enum_comment(declared.group(1), f.dataType, where)
                del meta["comment"]
            if ENUM in meta:
                meta[ENUM] = _check_enum(meta[ENUM], f.dataType, where)
            fields.append(StructField(f.name, _with_enums(f.dataType, where), f.nullable, meta))
        return StructType(fields)
    if isinstance(data_type, ArrayType):
        return ArrayType(_with_enums(data_type.elementType, f"{path}[]"), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _with_enums(data_type.valueType, f"{path}.value"),
                       data_type.valueContainsNull)
    return data_type


def _enum_comment(text: str, data_type: DataType, path: str) -> list:
    text = text.strip()
    if text.startswith("["):
        try:
            values = json.loads(text)
        except ValueError:
            raise ValueError(f"response_format field {path!r}: its comment 'enum: {text}' is not a JSON list; write "
                             "'enum: a, b, c' or 'enum: [\"a, b\", \"c\"]'") from None
        return values if isinstance(values, list) else [values]
    element = data_type.elementType if isinstance(data_type, ArrayType) else data_type
    values = [v.strip() for v in text.split(",")]
    if type(element) in _RANGES:
        try:
            return [int(v) for v in values]
        except ValueError:
            raise ValueError(f"response_format field {path!r} is {element.simpleString()}: its allowed values "
                             f"{values!r} must be integers") from None
    return values


def _check_enum(values: Any, data_type: DataType, path: str) -> list:
    """The allowed values of a field of ``data_type`` (a string or integer type, or an array of
    one), checked: a non-empty list of distinct values of that type."""
    element = data_type.elementType if isinstance(data_type, ArrayType) else data_type
    where = f"response_format field {path!r}"
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{where}: allowed values must be a non-empty list, got {values!r}")
    values = list(values)
    if isinstance(element, (StringType, *_CHARS)):
        if not all(isinstance(v, str) for v in values):
            raise ValueError(f"{where} is {element.simpleString()}: its allowed values must be strings, got {values!r}")
    elif type(element) in _RANGES:
        low, high = _RANGES[type(element)]
        if not all(type(v) is int and low <= v <= high for v in values):
            raise ValueError(f"{where} is {element.simpleString()}: its allowed values must be integers in its "
                             f"range, got {values!r}")
    else:
        raise ValueError(f"{where} is {data_type.simpleString()}: allowed values ('enum') apply to a STRING or "
                         "integer field, or an ARRAY of one")
    if len(set(values)) != len(values):
        raise ValueError(f"{where}: its allowed values repeat one: {values!r}")
    return values


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


def _parse_int(text: str) -> int | decimal.Decimal:
    # a long integer stays a Decimal (linear to parse); the conversions check its size first
    return int(text) if len(text) <= _INT_DIGITS else decimal.Decimal(text)


def read_answer(struct: StructType, text: str) -> dict:
    """The answer text as the struct's value (a dict of Python values Spark takes), or AnswerError.
    Numbers are parsed at a cost linear in their text (``1e1000000`` is 9 characters, not a
    million digits), and their size is checked before any conversion."""
    try:
        value = json.loads(text, parse_float=decimal.Decimal, parse_int=_parse_int, parse_constant=_no_constant)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise AnswerError(f"not JSON ({exc})") from None
    except (ValueError, ArithmeticError) as exc:  # a number Decimal cannot hold
        raise AnswerError(f"not JSON of numbers Python can read ({_short(exc)})") from None
    return _convert(struct, False, value, "")


def validated(model: Any, struct: StructType, value: dict) -> dict:
    """``value`` (read_answer's) validated by the pydantic ``model``: what its validators made of
    it (a ``field_validator`` that trims or lower-cases is what Spark gets), as plain values of
    ``struct`` (an Enum member becomes its value; fields not in the struct are left out)."""
    return _plain(struct, model.model_validate(value).model_dump())


def _plain(data_type: DataType, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(data_type, StructType) and isinstance(value, dict):
        return {f.name: _plain(f.dataType, value.get(f.name)) for f in data_type.fields}
    if isinstance(data_type, ArrayType) and isinstance(value, (list, tuple)):
        return [_plain(data_type.elementType, v) for v in value]
    if isinstance(data_type, MapType) and isinstance(value, dict):
        return {k: _plain(data_type.valueType, v) for k, v in value.items()}
    return value


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
    converted = _convert_value(data_type, nullable, value, path, allowed)
    if allowed is not None and converted is not None and not isinstance(data_type, ArrayType) \
            and converted not in allowed:
        raise AnswerError(f"{path or 'the answer'} is {_kind(converted)}, not one of the allowed values "
                          f"{allowed[:20]}")
    return converted


def _convert_value(data_type: DataType, nullable: bool, value: Any, path: str, allowed: list | None) -> Any:
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
        return value
    if isinstance(data_type, (FloatType, DoubleType)):
        if type(value) not in (int, decimal.Decimal):
            raise wrong("a number")
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
    return value


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
