"""Which calls kept under another schema folder fit the declared schema, in Spark.

The table route (:mod:`aiospark.spark.table_route`) also reads the files of a schema folder that
differs from the declared schema in nullability alone (:mod:`aiospark.journal.table_shapes`);
where a file's statistics show a NULL in a column holding a NOT NULL, its calls are checked one at
a time here, as the other readers check them in Arrow (``Fitting.misfits``): a call (its key's
rows in its file) with a NULL under a NOT NULL of the declared schema, at any depth, is left out
by an anti join, and its rows are called again.

Example::

    kept = fitting_calls(stored.withColumn("_f", F.col("_metadata.file_path")), declared,
                         ["_aiospark_k0"], "_f", keep_file=False)
"""
from __future__ import annotations

import functools
import operator as op
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StructType

from ..journal.table import N_COLUMN, NO_ROW, output_column

__all__ = ["fitting_calls"]


def fitting_calls(stored: Any, declared: StructType, rights: list[str], file: str, keep_file: bool) -> Any:
    """The rows of ``stored`` (table files of another schema folder, with their file's path in the
    column ``file``; ``rights``: its key columns) but those of calls whose answer has a NULL under
    a NOT NULL of ``declared``: a call's rows are its key's in its file."""
    misfit = functools.reduce(op.or_, [c for j, f in enumerate(declared.fields)
                                       if (c := _null_under(F.col(output_column(j)), f.dataType, f.nullable)) is not None])
    bad = stored.where((F.col(N_COLUMN) != NO_ROW) & F.coalesce(misfit, F.lit(False)))
    bad = bad.select(*[F.col(r).alias(f"_aiospark_b{i}") for i, r in enumerate(rights)],
                     F.col(file).alias("_aiospark_bf")).distinct()
    same = [stored[r].eqNullSafe(bad[f"_aiospark_b{i}"]) for i, r in enumerate(rights)]
    kept = stored.join(bad, functools.reduce(op.and_, same, stored[file] == bad["_aiospark_bf"]), "left_anti")
    return kept if keep_file else kept.drop(file)


def _null_under(column: Any, data_type: Any, nullable: bool) -> Any:
    """A Spark condition: the value of ``column`` holds a NULL where ``data_type`` (and
    ``nullable``) say NOT NULL; None where nothing in it is NOT NULL."""
    conditions = [column.isNull()] if not nullable else []
    if isinstance(data_type, StructType):
        for field in data_type.fields:
            inner = _null_under(column.getField(field.name), field.dataType, field.nullable)
            if inner is not None:
                conditions.append(column.isNotNull() & inner)
    elif isinstance(data_type, (ArrayType, MapType)):
        element, contains_null = ((data_type.elementType, data_type.containsNull) if isinstance(data_type, ArrayType)
                                  else (data_type.valueType, data_type.valueContainsNull))
        if _null_under(F.lit(None), element, contains_null) is not None:
            values = column if isinstance(data_type, ArrayType) else F.map_values(column)
            conditions.append(F.coalesce(F.exists(values, lambda x: F.coalesce(
                _null_under(x, element, contains_null), F.lit(False))), F.lit(False)))
    return functools.reduce(op.or_, conditions) if conditions else None
