"""A pydantic ``response_format``'s validated answer, checked again against the Spark type.

:func:`validated` runs the model's validators on the answer :func:`.answer_values.read_answer` read, and
returns what they made of it (a ``field_validator`` that trims is what Spark gets). A validator may
return anything: ``12345`` for a ``str`` field, ``"zzz"`` for a ``Literal["a", "b"]`` one (an
after-validator is not checked by pydantic), ``10**30`` for an ``int``. So every value is checked
again against the field's Spark type and allowed values; a value that does not fit is an
:class:`~.answer_values.AnswerError` (the answer's error, quoted by the caller), never a Spark error later.

Example::

    value = validated(Review, struct, read_answer(struct, '{"label": " POSITIVE "}'))
    model_classes(Review)   # [Review, its nested models, its own base models]: what a journal pins
"""
from __future__ import annotations

import datetime as _dt
import enum
import math
import typing
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

from .answer_values import AnswerError, _decimal, _kind
from .choices import CHARS, ENUM, RANGES

__all__ = ["model_classes", "validated"]

_FLOAT_MAX = 3.4028234663852886e38


def validated(model: Any, struct: StructType, value: dict) -> dict:
    """``value`` (read_answer's) validated by the pydantic ``model``: what its validators made of
    it, as plain values of ``struct`` (an Enum member becomes its value; fields not in the struct
    are left out), each checked against its Spark type and allowed values (:class:`AnswerError`)."""
    # warnings=False: a validator's value of another type is checked below, as the answer's error
    plain = _plain(struct, model.model_validate(value).model_dump(warnings=False))
    _check(struct, False, plain, "", None)
    return plain


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


def _check(data_type: DataType, nullable: bool, value: Any, path: str, allowed: list | None) -> None:
    """AnswerError naming the field when a validator's ``value`` is not what ``data_type`` holds."""
    where = path or "the answer"

    def wrong(expected: str) -> AnswerError:
        return AnswerError(f"{where} is {_kind(value)} after the model's validators, not {expected}")

    if value is None:
        if not nullable:
            raise AnswerError(f"{where} is null after the model's validators, but it is NOT NULL")
        return
    if isinstance(data_type, StructType):
        if not isinstance(value, dict):
            raise wrong("an object")
        for f in data_type.fields:
            _check(f.dataType, f.nullable, value.get(f.name), f"{path}.{f.name}" if path else f.name,
                   (f.metadata or {}).get(ENUM))
    elif isinstance(data_type, ArrayType):
        if not isinstance(value, list):
            raise wrong("an array")
        for i, v in enumerate(value):
            _check(data_type.elementType, data_type.containsNull, v, f"{path}[{i}]", allowed)
    elif isinstance(data_type, MapType):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise wrong("an object with string keys")
        for k, v in value.items():
            _check(data_type.valueType, data_type.valueContainsNull, v, f"{path}[{k!r}]", None)
    elif isinstance(data_type, BooleanType):
        if type(value) is not bool:
            raise wrong("a boolean")
    elif type(data_type) in RANGES:
        low, high = RANGES[type(data_type)]
        if type(value) is not int:
            raise wrong("an integer")
        if not low <= value <= high:
            raise AnswerError(f"{where} is {_kind(value)} after the model's validators, out of the range of "
                              f"{data_type.simpleString()} [{low}, {high}]")
    elif isinstance(data_type, (FloatType, DoubleType)):
        if type(value) not in (int, float):
            raise wrong("a number")
        limit = _FLOAT_MAX if isinstance(data_type, FloatType) else float("inf")
        try:
            fits = math.isfinite(float(value)) and -limit <= float(value) <= limit
        except OverflowError:  # an int beyond the float range
            fits = False
        if not fits:
            raise wrong(f"a finite number in the range of {data_type.simpleString()}")
    elif isinstance(data_type, DecimalType):
        if isinstance(value, float):
            raise wrong("a decimal")
        _decimal(data_type, value, where, wrong)
    elif isinstance(data_type, DateType):
        if type(value) is not _dt.date:
            raise wrong("a date")
    elif isinstance(data_type, TimestampType) or type(data_type).__name__ == "TimestampNTZType":
        if not isinstance(value, _dt.datetime):
            raise wrong("a timestamp")
    else:
        if not isinstance(value, str):
            raise wrong("a string")
        if CHARS and isinstance(data_type, CHARS) and len(value) > data_type.length:
            raise AnswerError(f"{where} has {len(value)} characters after the model's validators, more than "
                              f"{data_type.simpleString()} holds")
    if allowed is not None and not isinstance(data_type, (StructType, ArrayType, MapType)) and value not in allowed:
        raise AnswerError(f"{where} is {_kind(value)} after the model's validators, not one of the allowed "
                          f"values {allowed[:20]}")


def model_classes(model: Any) -> list[type]:
    """The classes whose code decides what :func:`validated` makes of an answer: ``model``, the
    models of its fields (nested, in lists, optional, ...) and their base models, each once, in a
    stable order, pydantic's own classes left out. A journal's fingerprint pins their source: a
    validator or a ``Field(le=...)`` edited changes no JSON Schema sent, but the column's values."""
    out: list[type] = []

    def visit(annotation: Any) -> None:
        for arg in typing.get_args(annotation):
            visit(arg)
        if not isinstance(annotation, type) or not hasattr(annotation, "model_fields"):
            return
        for cls in annotation.__mro__:
            if cls in out or not hasattr(cls, "model_fields") or cls.__module__.split(".")[0] == "pydantic":
                continue
            out.append(cls)
            for info in cls.model_fields.values():
                visit(info.annotation)

    if model is not None:
        visit(model)
    return out
