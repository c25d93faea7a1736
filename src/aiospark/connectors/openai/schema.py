"""Structured output for :class:`~aiospark.connectors.openai.OpenAIChat`: one Spark ``StructType``
is the single source of both the JSON Schema sent to the endpoint (OpenAI's strict mode) and the
check that turns the answer back into a Spark value.

``response_struct`` (:mod:`.response_format`) takes what users pass as ``response_format`` (a DDL
string, a ``StructType`` or a pydantic v2 model class) and refuses, naming the field path, any type
JSON cannot carry exactly. ``json_schema`` (here) writes the strict schema: every object has
``additionalProperties: false`` and lists all its properties in ``required``; a nullable field is
``"type": [T, "null"]``. ``read_answer`` (:mod:`.answer_values`) parses the answer text and raises
:class:`AnswerError` (with the path) for anything that is not JSON of that shape: not JSON, a missing
or extra field, a wrong type, a null in a NOT NULL field, an integer out of its type's range, a date
or timestamp that is not written exactly as asked.

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

import re
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
    StructType,
    TimestampType,
)

from .answer_values import AnswerError, read_answer
from .choices import CHARS as _CHARS
from .choices import ENUM
from .choices import NTZ as _NTZ
from .choices import RANGES as _RANGES
from .response_format import response_struct

# AnswerError, read_answer and response_struct live in their own modules; they are named here too,
# where the connector, its tests and users import them from
__all__ = ["ENUM", "AnswerError", "json_schema", "read_answer", "response_struct", "schema_name"]

_NTZ_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?$"
_NAME = re.compile(r"[^a-zA-Z0-9_-]")


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
