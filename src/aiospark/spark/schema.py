"""Schemas: parse user schemas on the driver, and turn Python outputs into Arrow with clear errors."""
from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from operator import is_
from typing import Any

import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, MapType, Row, StructType

from ..core.errors import describe_input
from .compat import parse_ddl, to_arrow_schema, to_arrow_type
from .exact import ExactChecks, plan_of, value_problem
from .exact_converted import arrow_suspect, may_be_suspect


class OutputSchemaError(ValueError):
    """A function's output does not fit the declared schema (names the column and the value)."""


def parse_schema(session: Any, schema: str | StructType, what: str = "schema") -> StructType:
    """A ``StructType`` from a DDL string (parsed by ``session``, classic or Connect) or a StructType,
    with no name repeated at any depth (:func:`check_unique_names`)."""
    if isinstance(schema, StructType):
        check_unique_names(schema, what)
        return schema
    if not isinstance(schema, str):
        raise TypeError(f"{what} must be a DDL string like 'id INT, name STRING' or a StructType, "
                        f"got {type(schema).__name__}")
    parsed = parse_type(session, schema, what)
    if not isinstance(parsed, StructType):
        raise ValueError(f"{what} {schema!r} is a single type, not a list of columns: "
                         f"write it as 'name {schema}'")
    check_unique_names(parsed, what)
    return parsed


def check_unique_names(schema: DataType, what: str) -> None:
    """Refuse a schema that repeats a field name at any depth (``'a LONG, a LONG'``, or a struct's
    fields): a row is a dict, which holds one value per name, so one of the two would be lost or
    duplicated. Names differing in case are distinct keys and stay allowed.

    Example::

        check_unique_names(StructType([StructField("a", LongType()), StructField("a", LongType())]), "schema")
        # ValueError: schema repeats the name(s) ['a']: ...
    """
    repeated = repeated_names(schema)
    if repeated:
        raise ValueError(f"{what} repeats the name(s) {repeated}: rows and structs are Python dicts, which hold "
                         "one value per name; rename one of each (e.g. with alias() or withColumnRenamed())")


def repeated_names(data_type: DataType, path: str = "") -> list[str]:
    """The dotted paths of the field names a type repeats, at any depth (structs in arrays and maps too)."""
    if isinstance(data_type, ArrayType):
        return repeated_names(data_type.elementType, path)
    if isinstance(data_type, MapType):
        return repeated_names(data_type.keyType, path) + repeated_names(data_type.valueType, path)
    if not isinstance(data_type, StructType):
        return []
    seen: set[str] = set()
    found: list[str] = []
    for field in data_type.fields:
        if field.name in seen and path + field.name not in found:
            found.append(path + field.name)
        seen.add(field.name)
        found += repeated_names(field.dataType, f"{path}{field.name}.")
    return found


def parse_type(session: Any, ddl: str, what: str = "type") -> DataType:
    """Parse a DDL type string with ``session``; a ValueError that quotes it when it does not parse."""
    if not ddl.strip():
        raise ValueError(f"{what} is empty: give a DDL string like 'id INT, name STRING'")
    try:
        return parse_ddl(session, ddl)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{what} {ddl!r} does not parse as a Spark DDL string "
                         f"(e.g. 'id INT, name STRING'): {first}") from None


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema)


def arrow_type(data_type: DataType) -> pa.DataType:
    return to_arrow_type(data_type)


def to_python(data: pa.Array | pa.ChunkedArray | pa.RecordBatch) -> list[Any]:
    """An Arrow array's values, or a batch's rows as dicts, as Python objects the way PySpark
    hands them to UDFs (a MAP becomes a dict).

    Arrow makes dicts of maps only through ``maps_as_pydicts``, which takes a slower path for every
    value, maps or not (measured: 3.5 -> 18 ms for 10,000 rows of three plain columns), so it is
    asked for only when a MAP is present.

    Example::

        to_python(pa.record_batch({"id": [1, 2]}))   # [{'id': 1}, {'id': 2}]
    """
    data_type = data.type if isinstance(data, (pa.Array, pa.ChunkedArray)) else pa.struct(data.schema)
    if has_map(data_type):
        return data.to_pylist(maps_as_pydicts="lossy")
    return data.to_pylist()


def has_map(data_type: pa.DataType) -> bool:
    if pa.types.is_map(data_type):
        return True
    if pa.types.is_dictionary(data_type):
        return has_map(data_type.value_type)
    return any(has_map(data_type.field(i).type) for i in range(data_type.num_fields))


_DICT_ONLY = {dict}
_MISSING = object()  # what dict.get gives for a key a row lacks


def _column(rows: list[dict[str, Any]], name: str) -> tuple[list[Any], int]:
    """``name``'s value in every row (None where a row lacks it) and how many rows have it.

    One C-level pass, compared by identity only (a value's own ``__eq__`` is never called: a NumPy
    array's would raise); counting the missing ones is a second pass, made only when there are any.
    """
    column = list(map(dict.get, rows, repeat(name), repeat(_MISSING)))
    if not any(map(is_, column, repeat(_MISSING))):
        return column, len(column)
    missing = list(map(is_, column, repeat(_MISSING))).count(True)
    return [None if v is _MISSING else v for v in column], len(column) - missing


def none_among_rows(what: str) -> str:
    """What an AsyncFunction's list of rows holding a None is told (its call is never recorded)."""
    return (f"{what} returned None among an input's rows: a row is a dict, tuple or Row; return [] for an "
            "input with no row")


class RowConverter:
    """Python rows (dict / tuple / Row) -> one Arrow RecordBatch of ``schema``, in bulk, losing nothing.

    Every row is checked for keys that are not columns (a misspelt key is an error on any row, not
    only the first); values Arrow would change silently (a float with a fraction into an integer
    column, naive and aware datetimes mixed, an aware one into TIMESTAMP_NTZ) and NULLs in NOT NULL
    columns are :class:`OutputSchemaError` naming the function, the column and the value
    (:mod:`aiospark.spark.exact`). The fast path hands the dicts to Arrow's C converter; only when
    that fails does it look for the column and value to blame.

    Example::

        RowConverter(StructType.fromDDL("n INT"), "my_fn").to_batch([{"n": 1}, {"n": 2}])
    """

    def __init__(self, schema: StructType, what: str = "the function"):
        self.schema = schema
        self.arrow_schema = arrow_schema(schema)
        self.names = schema.fieldNames()
        self._name_set = frozenset(self.names)
        self.what = what
        self.exact = ExactChecks(schema)

    def to_batch(self, rows: list[Any]) -> pa.RecordBatch:
        if not rows:
            return pa.RecordBatch.from_pylist([], schema=self.arrow_schema)
        if set(map(type, rows)) != _DICT_ONLY:  # one C-level pass: half a generator's cost
            rows = [self._as_dict(r) for r in rows]
        columns = self._columns(rows)
        if self.exact.columns:
            self._check_exact(columns)
        try:
            # what RecordBatch.from_pylist does, on the columns already taken out for the checks
            batch = pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, self.arrow_schema)],
                                               schema=self.arrow_schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise self._blame(columns, exc) from None
        if self.exact.suspects or self.exact.not_null:
            found = self.exact.converted_problem(batch, columns)
            if found is not None:
                self._raise_exact(found)
        return batch

    def _columns(self, rows: list[dict[str, Any]]) -> list[list[Any]]:
        """Each column's values, in schema order (a key a row lacks is NULL, as in Arrow's
        ``from_pylist``); an :class:`OutputSchemaError` when a row has a key that is no column:
        exactly when the rows hold more keys than the distinct columns found in them."""
        taken = {name: _column(rows, name) for name in dict.fromkeys(self.names)}  # a repeated name once
        if sum(map(len, rows)) != sum(found for _, found in taken.values()):
            self._unknown_keys(set(chain.from_iterable(rows)) - self._name_set)
        return [taken[name][0] for name in self.names]

    def problem(self, row: Any) -> str | None:
        """Why one output row does not fit the schema (the error text), or None when it fits.

        What the error-row mode asks of every output of an input before it is emitted.
        """
        try:
            self.to_batch([row])
        except OutputSchemaError as exc:
            return f"OutputSchemaError: {exc}"
        return None

    def as_dict(self, row: Any) -> dict[str, Any]:
        """One output row (dict, tuple or Row) as a dict of this schema's columns; an
        :class:`OutputSchemaError` when it is none of those or has keys that are not columns."""
        return self._as_dict(row)

    def _check_exact(self, columns: list[list[Any]]) -> None:
        found = self.exact.problem(columns)
        if found is not None:
            self._raise_exact(found)

    def _raise_exact(self, found: tuple[str, Any, str]) -> None:
        column, value, why = found
        raise OutputSchemaError(f"{self.what} returned {_shown(value)} for output column {column!r} "
                                    f"({self.schema[column].dataType.simpleString()}), which does not fit "
                                    f"exactly: {why}")

    def _as_dict(self, row: Any) -> dict[str, Any]:
        if type(row) is dict:
            extra = row.keys() - self._name_set
            if extra:
                self._unknown_keys(extra)
            return row
        if isinstance(row, Row) and hasattr(row, "__fields__"):
            return self._as_dict(row.asDict(recursive=False))
        if isinstance(row, tuple):
            if len(row) != len(self.names):
                raise OutputSchemaError(
                    f"{self.what} returned a tuple of {len(row)} values {_shown(row)} but the schema has "
                    f"{len(self.names)} columns {self.names}: return one value per column, in order")
            return dict(zip(self.names, row))
        raise OutputSchemaError(f"{self.what} returned {type(row).__name__} {_shown(row)}: return a dict "
                                f"(column -> value), a tuple or a pyspark.sql.Row for columns {self.names}")

    def _unknown_keys(self, extra: Any) -> None:
        raise OutputSchemaError(f"{self.what} returned keys {sorted(map(str, extra))} that are not columns of "
                                f"the schema {self.names}: fix the key names or add the columns")

    def _blame(self, columns: list[list[Any]], exc: BaseException) -> OutputSchemaError:
        for field, arrow_field, column in zip(self.schema.fields, self.arrow_schema, columns):
            try:
                pa.array(column, type=arrow_field.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                for value in column:
                    try:
                        pa.array([value], type=arrow_field.type)
                    except (pa.ArrowException, TypeError, ValueError, OverflowError) as cell_exc:
                        return OutputSchemaError(
                            f"output column {field.name!r} ({field.dataType.simpleString()}) cannot hold "
                            f"the value {_shown(value)} of type {type(value).__name__} returned by "
                            f"{self.what}: {cell_exc}")
        return OutputSchemaError(f"the output of {self.what} does not fit the schema {self.schema.simpleString()}: {exc}")


def values_to_array(values: Sequence[Any], data_type: DataType, pa_type: pa.DataType, what: str,
                    aware_seen: dict[str, bool] | None = None) -> pa.Array:
    """Scalar UDF outputs -> one Arrow array, naming the offending value on failure; values Arrow
    would change silently (see :mod:`aiospark.spark.exact`) are an :class:`OutputSchemaError` too.
    ``aware_seen`` carries, across a task's batches, whether its datetimes were aware.

    Example::

        values_to_array([1, 2], IntegerType(), pa.int32(), "async_udf 'f'")
    """
    plan = plan_of(data_type)
    values = values if isinstance(values, list) else list(values)
    if plan is not None:
        found = value_problem(values, plan, "value", {} if aware_seen is None else aware_seen)
        if found is not None:
            raise _not_exact(what, data_type, found)
    try:
        array = pa.array(values, type=pa_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        for row, value in enumerate(values):
            try:
                pa.array([value], type=pa_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise OutputSchemaError(f"{what} returned {_shown(value)} of type {type(value).__name__} (row "
                                        f"{row}), which does not fit its return type "
                                        f"{data_type.simpleString()}: {exc}") from None
        raise
    if may_be_suspect(data_type) and arrow_suspect(array):
        found = value_problem(values, plan_of(data_type, True) or (), "value", {})
        if found is not None:
            raise _not_exact(what, data_type, found)
    return array


def _not_exact(what: str, data_type: DataType, found: tuple[Any, str]) -> OutputSchemaError:
    return OutputSchemaError(f"{what} returned {_shown(found[0])}, which does not fit its return type "
                             f"{data_type.simpleString()} exactly: {found[1]}")


def _shown(value: Any) -> str:
    """A returned value in an error message: its repr, cut at 120 characters (a broken one named)."""
    return describe_input(value, 120)
