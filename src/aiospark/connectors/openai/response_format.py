"""What users pass as ``response_format`` -> the answer's ``StructType`` (:mod:`.schema`).

``response_struct`` takes a DDL string, a ``StructType`` or a pydantic v2 model class, and refuses,
naming the field path, any type JSON cannot carry exactly (the mapping: :mod:`.schema`): BINARY,
intervals, VOID, VARIANT, TIME, user-defined types, MAP with non-string keys, a union, a model
containing itself. The allowed values a field declares (``Literal``, ``Enum``, ``enum: a, b``) are
checked and kept in its metadata (:mod:`.choices`).

Example::

    class Review(BaseModel):
        label: Literal["pos", "neg"]
        score: Optional[int]

    struct, model = response_struct(Review)   # label STRING NOT NULL (enum pos, neg), score BIGINT
"""
from __future__ import annotations

import datetime as _dt
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
from .choices import NTZ as _NTZ
from .choices import RANGES as _RANGES
from .choices import allowed_of as _allowed_of
from .choices import choices_of as _choices
from .choices import with_enums as _with_enums

__all__ = ["response_struct"]


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
