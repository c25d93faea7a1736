"""Allowed values of a ``response_format`` field (classification): JSON Schema's ``enum``.

From a pydantic annotation (``Literal["pos", "neg"]``, an ``Enum``; on a field or on a list field's
elements), from a ``StructField``'s ``metadata["enum"]``, or -- the DDL way -- from a column comment
``enum: pos, neg`` (``label STRING NOT NULL COMMENT 'enum: pos, neg'``). :func:`with_enums` checks them
(a non-empty list of distinct values of the field's type, a STRING or integer type or an ARRAY of one)
and keeps them as ``metadata["enum"]``, which :mod:`.schema` sends and checks.

Example::

    with_enums(StructType.fromDDL("label STRING COMMENT 'enum: pos, neg'"), "")["label"].metadata
    # {'enum': ['pos', 'neg']}
"""
from __future__ import annotations

import enum
import json
import re
import sys
import types
import typing
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

__all__ = ["CHARS", "ENUM", "NTZ", "RANGES", "allowed_of", "choices_of", "with_enums"]

#: Spark's CHAR/VARCHAR types where this pyspark has them; the integer types' ranges
CHARS = tuple(t for t in (getattr(sys.modules["pyspark.sql.types"], n, None) for n in ("CharType", "VarcharType"))
               if t is not None)
RANGES: dict[type, tuple[int, int]] = {ByteType: (-2**7, 2**7 - 1), ShortType: (-2**15, 2**15 - 1), IntegerType: (-2**31, 2**31 - 1),
           LongType: (-2**63, 2**63 - 1)}
#: Spark's TIMESTAMP_NTZ type where this pyspark has it (else None)
NTZ = getattr(sys.modules["pyspark.sql.types"], "TimestampNTZType", None)
#: a field's metadata key holding its allowed values (JSON Schema's ``enum``)
ENUM = "enum"
_ENUM_COMMENT = re.compile(r"\s*enum\s*:\s*(.+?)\s*", re.IGNORECASE | re.DOTALL)


def choices_of(ann: Any, path: str) -> list | None:
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


def allowed_of(ann: Any, path: str) -> list | None:
    """The allowed values a field's annotation sets for its value (``Literal``, ``Enum``, within
    ``Optional``/``Annotated``) or for its elements (``list[...]`` of them); None if none."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return allowed_of(args[0], path)
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        rest = [a for a in args if a is not type(None)]
        return allowed_of(rest[0], path) if len(rest) == 1 else None
    if origin is list and args:
        inner = args[0]
        inner_origin = typing.get_origin(inner)
        if inner_origin is typing.Union or inner_origin is getattr(types, "UnionType", None):
            rest = [a for a in typing.get_args(inner) if a is not type(None)]
            inner = rest[0] if len(rest) == 1 else inner
        if choices_of(inner, path) is None and _nested_choices(inner):
            raise ValueError(f"response_format field {path!r}: allowed values (Literal/Enum) are supported on a "
                             "field or on the elements of a list field, not deeper: use a nested model")
        return choices_of(inner, path)
    if origin is dict and len(args) == 2 and _nested_choices(args[1]):
        raise ValueError(f"response_format field {path!r}: allowed values (Literal/Enum) are not supported as "
                         "map values: use a list of a key/value model")
    return choices_of(ann, path)


def _nested_choices(ann: Any) -> bool:
    """Whether a Literal or an Enum hides somewhere inside ``ann`` (a list of lists, ...)."""
    if typing.get_origin(ann) is typing.Literal or (isinstance(ann, type) and issubclass(ann, enum.Enum)):
        return True
    return any(_nested_choices(a) for a in typing.get_args(ann) if a is not type(None))


def with_enums(data_type: DataType, path: str) -> DataType:
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
            fields.append(StructField(f.name, with_enums(f.dataType, where), f.nullable, meta))
        return StructType(fields)
    if isinstance(data_type, ArrayType):
        return ArrayType(with_enums(data_type.elementType, f"{path}[]"), data_type.containsNull)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, with_enums(data_type.valueType, f"{path}.value"),
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
    if type(element) in RANGES:
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
    if isinstance(element, (StringType, *CHARS)):
        if not all(isinstance(v, str) for v in values):
            raise ValueError(f"{where} is {element.simpleString()}: its allowed values must be strings, got {values!r}")
    elif type(element) in RANGES:
        low, high = RANGES[type(element)]
        if not all(type(v) is int and low <= v <= high for v in values):
            raise ValueError(f"{where} is {element.simpleString()}: its allowed values must be integers in its "
                             f"range, got {values!r}")
    else:
        raise ValueError(f"{where} is {data_type.simpleString()}: allowed values ('enum') apply to a STRING or "
                         "integer field, or an ARRAY of one")
    if len(set(values)) != len(values):
        raise ValueError(f"{where}: its allowed values repeat one: {values!r}")
    return values
