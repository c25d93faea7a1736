"""Arrow outputs of a columnar function, made to fit the declared schema exactly or refused.

The ``batch_format="pyarrow"`` lane (:mod:`aiospark.spark.arrow_lane`) gets a ``RecordBatch`` or
``Table`` back from the user's function. Its columns are matched to the schema by name and cast
only where no value can change: between integer and floating-point types with Arrow's *safe*
cast (``1.5`` into an INT column, or an overflow, is an error, as it is for Python rows), between
string (or binary) encodings, timestamp units (a timestamp keeps being aware or naive), and
recursively inside lists, structs and maps. A string is never parsed into a number, nor a number
formatted into a string (Arrow's cast would do both). A column the output lacks is NULL (as a key
a Python row lacks); a column that is not in the schema, a NULL in a NOT NULL column, or a value
that does not fit is an :class:`~aiospark.spark.schema.OutputSchemaError` naming the function and
the column.

Example::

    conform = Conform(arrow_schema(StructType.fromDDL("id LONG, score DOUBLE")), "my_fn")
    conform(pa.table({"id": [1, 2], "score": [0.5, 1]}))   # a Table of the schema (score cast)
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .schema import OutputSchemaError

_t = pa.types


def _kind(data_type: pa.DataType) -> str:
    """The family a type belongs to: casts stay inside one."""
    for kind, tests in _KINDS:
        if any(test(data_type) for test in tests):
            return kind
    return str(data_type)  # any other type only matches itself


def _tests(*names: str) -> list[Callable[[pa.DataType], bool]]:
    return [getattr(_t, name) for name in names if hasattr(_t, name)]  # newer types on newer pyarrow


_KINDS = [
    ("number", _tests("is_integer", "is_floating")),
    ("decimal", _tests("is_decimal")),
    ("string", _tests("is_string", "is_large_string", "is_string_view")),
    ("binary", _tests("is_binary", "is_large_binary", "is_binary_view", "is_fixed_size_binary")),
    ("date", _tests("is_date")),
    ("list", _tests("is_list", "is_large_list", "is_fixed_size_list", "is_list_view", "is_large_list_view")),
]


def mismatch(source: pa.DataType, target: pa.DataType) -> str | None:
    """Why a column of ``source`` type cannot become ``target`` without changing a value (None: it can)."""
    if source == target or _t.is_null(source):
        return None
    if _t.is_dictionary(source):
        return mismatch(source.value_type, target)
    if _t.is_timestamp(source) and _t.is_timestamp(target):
        if (source.tz is None) != (target.tz is None):
            return (f"{source} is {'naive' if source.tz is None else 'aware'} but the column is "
                    f"{'naive' if target.tz is None else 'aware'} (TIMESTAMP_NTZ holds naive, TIMESTAMP aware times)")
        return None
    if _t.is_struct(source) and _t.is_struct(target):
        names = [source.field(i).name for i in range(source.num_fields)]
        wanted = [target.field(i).name for i in range(target.num_fields)]
        if names != wanted:
            return f"struct fields {names} are not the schema's {wanted} (same names, same order)"
        for i in range(source.num_fields):
            why = mismatch(source.field(i).type, target.field(i).type)
            if why is not None:
                return f"field {wanted[i]!r}: {why}"
        return None
    if _t.is_map(source) and _t.is_map(target):
        return mismatch(source.key_type, target.key_type) or mismatch(source.item_type, target.item_type)
    kind = _kind(source)
    if kind != _kind(target):
        return f"a {source} column does not become {target} (no conversion between kinds of value)"
    if kind == "list":
        return mismatch(source.value_type, target.value_type)
    return None


class Conform:
    """A callable turning one output (``RecordBatch`` or ``Table``) into a ``Table`` of ``schema``."""

    def __init__(self, schema: pa.Schema, what: str):
        self.schema = schema
        self.what = what
        self._names = set(schema.names)

    def __call__(self, output: Any) -> pa.Table:
        if isinstance(output, pa.RecordBatch):
            output = pa.Table.from_batches([output])
        elif not isinstance(output, pa.Table):
            raise OutputSchemaError(f"{self.what} returned {type(output).__name__}: a batch_format='pyarrow' "
                                    f"function returns a pyarrow.RecordBatch or pyarrow.Table")
        names = output.column_names
        unknown = sorted(set(names) - self._names)
        if unknown:
            raise OutputSchemaError(f"{self.what} returned columns {unknown} that are not columns of the schema "
                                    f"{self.schema.names}: fix the names or add the columns")
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise OutputSchemaError(f"{self.what} returned the columns {twice} more than once")
        return pa.Table.from_arrays([self._column(output, field) for field in self.schema], schema=self.schema)

    def _column(self, output: pa.Table, field: pa.Field) -> Any:
        if field.name not in output.column_names:
            column = pa.nulls(output.num_rows, field.type)
        else:
            column = output.column(field.name)
            why = mismatch(column.type, field.type)
            if why is not None:
                raise self._error(field, why)
            if column.type != field.type:
                try:
                    column = column.cast(field.type, safe=True)
                except (pa.ArrowException, ValueError, TypeError) as exc:
                    raise self._error(field, str(exc).splitlines()[0]) from None
        if not field.nullable and column.null_count:
            raise self._error(field, f"{column.null_count} NULL value(s) in a NOT NULL column"
                              f"{'' if field.name in output.column_names else ' (the output has no such column)'}")
        return column

    def _error(self, field: pa.Field, why: str) -> OutputSchemaError:
        return OutputSchemaError(f"{self.what} returned output column {field.name!r} ({field.type}), "
                                 f"which does not fit exactly: {why}")


__all__ = ["Conform", "mismatch"]
