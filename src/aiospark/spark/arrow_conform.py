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
from pyspark.sql.types import StructType

from ..core.errors import describe_input
from .exact import plan_of, value_problem
from .exact_converted import arrow_suspect, may_be_suspect
from .schema import OutputSchemaError, arrow_type, has_map, to_python

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
        unknown = [n for n in names if n not in wanted]
        if unknown or len(set(names)) != len(names):
            return (f"struct fields {names} are not fields of the schema's struct {wanted} (a field the output "
                    f"lacks is NULL, as a key a Python dict lacks; none may be unknown or repeated)")
        for name in names:
            why = mismatch(source.field(name).type, target.field(name).type)
            if why is not None:
                return f"field {name!r}: {why}"
        return None
    if _t.is_map(source) and _t.is_map(target):
        return mismatch(source.key_type, target.key_type) or mismatch(source.item_type, target.item_type)
    kind = _kind(source)
    if kind != _kind(target):
        return f"a {source} column does not become {target} (no conversion between kinds of value)"
    if kind == "list":
        return mismatch(source.value_type, target.value_type)
    return None


def fit(column: Any, target: pa.DataType) -> Any:
    """``column`` (whose type :func:`mismatch` accepts) as ``target``: Arrow's safe cast, except that
    a struct's fields are taken by name and a field it lacks is NULL (Arrow's cast wants the same
    fields in the same order). A float64 beyond FLOAT's range is left to :func:`arrow_suspect`."""
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([fit(chunk, target) for chunk in column.chunks], type=target)
    source = column.type
    if _t.is_dictionary(source):
        return fit(column.dictionary_decode(), target)
    if _t.is_struct(source) and _t.is_struct(target) and source != target:
        names = {source.field(i).name for i in range(source.num_fields)}
        children = [fit(column.field(f.name), f.type) if f.name in names else pa.nulls(len(column), f.type)
                    for f in target]
        mask = column.is_null() if column.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if (_t.is_list(source) or _t.is_large_list(source)) and (_t.is_list(target) or _t.is_large_list(target)) \
            and _needs_fit(source.value_type, target.value_type):
        values = fit(column.values, target.value_type)
        mask = column.is_null() if column.null_count else None
        made = pa.ListArray if _t.is_list(target) else pa.LargeListArray
        return made.from_arrays(column.offsets, values, type=target, mask=mask)
    return column.cast(target, safe=True)


def _needs_fit(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a struct below this type has other fields than the target's (Arrow's cast cannot)."""
    if _t.is_struct(source) and _t.is_struct(target):
        return [f.name for f in source] != [f.name for f in target] or any(
            _needs_fit(f.type, target.field(f.name).type) for f in source)
    if (_t.is_list(source) or _t.is_large_list(source)) and (_t.is_list(target) or _t.is_large_list(target)):
        return _needs_fit(source.value_type, target.value_type)
    return False


class Conform:
    """A callable turning one output (``RecordBatch`` or ``Table``) into a ``Table`` of ``schema``."""

    def __init__(self, schema: pa.Schema, what: str, declared: StructType | None = None):
        self.schema = schema
        self.what = what
        self._names = set(schema.names)
        #: column -> the plan naming what arrow_suspect finds in it (from the declared Spark schema)
        self._full = {f.name: plan_of(f.dataType, True) for f in declared.fields if may_be_suspect(f.dataType)} \
            if declared is not None else {}
        #: column -> the plan walking its values, for a column with a MAP at any depth
        self._maps = {f.name: plan_of(f.dataType) for f in declared.fields if has_map(arrow_type(f.dataType))} \
            if declared is not None else {}

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
            source = column
            if column.type != field.type:
                try:
                    column = fit(column, field.type)
                except (pa.ArrowException, ValueError, TypeError) as exc:
                    raise self._error(field, str(exc).splitlines()[0]) from None
            full = self._full.get(field.name)
            if full is not None and arrow_suspect(column):  # an overflow into FLOAT, a NULL under NOT NULL
                found = value_problem(to_python(source), full, field.name, {})
                if found is not None:
                    raise self._error(field, f"{describe_input(found[0], 120)} {found[1]}")
            maps = self._maps.get(field.name)
            if maps is not None:  # a key given twice in a map (Arrow keeps both; Spark refuses such maps)
                found = value_problem(column.to_pylist(), maps, field.name, {})  # maps as lists of pairs
                if found is not None:
                    raise self._error(field, f"{describe_input(found[0], 120)} {found[1]}")
        if not field.nullable and column.null_count:
            first = column.is_null().to_pylist().index(True)
            raise self._error(field, f"{column.null_count} NULL value(s) in a NOT NULL column"
                              f"{'' if field.name in output.column_names else ' (the output has no such column)'}, "
                              f"the first in row {first}")
        return column

    def _error(self, field: pa.Field, why: str) -> OutputSchemaError:
        return OutputSchemaError(f"{self.what} returned output column {field.name!r} ({field.type}), "
                                 f"which does not fit exactly: {why}")


__all__ = ["Conform", "fit", "mismatch"]
