"""What a converted Arrow array shows of the values :mod:`aiospark.spark.exact` cannot see in
Python cheaply: an infinity in a FLOAT column (a finite number beyond FLOAT's range, rounded by
Arrow's cast) and a NULL under a NOT NULL field, element or map value, at any depth.

:func:`arrow_suspect` looks for them in the converted array, vectorized; only a column it
suspects has its values walked again (``plan_of(..., full=True)``) to name the row and the path,
and to tell an infinity the function returned itself from one Arrow made.

Example::

    if may_be_suspect(field.dataType) and arrow_suspect(batch.column(i)):
        why = value_problem(values, plan_of(field.dataType, True), field.name, {})
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import ArrayType, DataType, FloatType, MapType, StructType


def may_be_suspect(data_type: DataType) -> bool:
    """Whether a converted array of this type can show a problem :func:`arrow_suspect` looks for."""
    if isinstance(data_type, FloatType):
        return True
    if isinstance(data_type, ArrayType):
        return not data_type.containsNull or may_be_suspect(data_type.elementType)
    if isinstance(data_type, MapType):
        return (not data_type.valueContainsNull or may_be_suspect(data_type.keyType)
                or may_be_suspect(data_type.valueType))
    if isinstance(data_type, StructType):
        return any(not f.nullable or may_be_suspect(f.dataType) for f in data_type.fields)
    return False


def arrow_suspect(array: Any) -> bool:
    """Whether a converted Arrow array holds an infinity in a FLOAT (float32) or a NULL where its
    type says NOT NULL, below its top level (vectorized; a NULL parent's children do not count).
    An infinity may be the function's own: the values are then looked at to tell."""
    if isinstance(array, pa.ChunkedArray):
        return any(arrow_suspect(chunk) for chunk in array.chunks)
    t = array.type
    if pa.types.is_float32(t):
        return bool(pc.any(pc.is_inf(array)).as_py())
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        values = array.flatten()
        return (not t.value_field.nullable and values.null_count > 0) or arrow_suspect(values)
    if pa.types.is_map(t):
        items = array.items.filter(pc.is_valid(array.keys)) if array.null_count else array.items
        return (not t.item_field.nullable and items.null_count > 0) or arrow_suspect(array.keys) or \
            arrow_suspect(items)
    if pa.types.is_struct(t):
        valid = array.is_valid() if array.null_count else None
        for i in range(t.num_fields):
            child = array.field(i)
            if valid is not None:
                child = child.filter(valid)
            if (not t.field(i).nullable and child.null_count) or arrow_suspect(child):
                return True
    return False
