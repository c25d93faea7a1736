"""Schemas: parse user schemas on the driver, and turn Python outputs into Arrow with clear errors."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Union

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import DataType, Row, StructType


class OutputSchemaError(ValueError):
    """A function's output does not fit the declared schema (names the column and the value)."""


def parse_schema(session: Any, schema: Union[str, StructType], what: str = "schema") -> StructType:
    """A ``StructType`` from a DDL string (parsed by ``session``, classic or Connect) or a StructType."""
    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str):
        raise TypeError(f"{what} must be a DDL string like 'id INT, name STRING' or a StructType, "
                        f"got {type(schema).__name__}")
    parsed = parse_type(session, schema, what)
    if not isinstance(parsed, StructType):
        raise ValueError(f"{what} {schema!r} is a single type, not a list of columns: "
                         f"write it as 'name {schema}'")
    return parsed


def parse_type(session: Any, ddl: str, what: str = "type") -> DataType:
    """Parse a DDL type string with ``session``; a ValueError that quotes it when it does not parse."""
    if not ddl.strip():
        raise ValueError(f"{what} is empty: give a DDL string like 'id INT, name STRING'")
    try:
        return session._parse_ddl(ddl)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{what} {ddl!r} does not parse as a Spark DDL string "
                         f"(e.g. 'id INT, name STRING'): {first}") from None


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def arrow_type(data_type: DataType) -> pa.DataType:
    return to_arrow_type(data_type, timezone="UTC")


def to_python(data: Union[pa.Array, pa.RecordBatch]) -> List[Any]:
    """An Arrow array's values, or a batch's rows as dicts, as Python objects the way PySpark
    hands them to UDFs (a MAP becomes a dict).

    Arrow makes dicts of maps only through ``maps_as_pydicts``, which takes a slower path for every
    value, maps or not (measured: 3.5 -> 18 ms for 10,000 rows of three plain columns), so it is
    asked for only when a MAP is present.

    Example::

        to_python(pa.record_batch({"id": [1, 2]}))   # [{'id': 1}, {'id': 2}]
    """
    data_type = data.type if isinstance(data, pa.Array) else pa.struct(data.schema)
    if _has_map(data_type):
        return data.to_pylist(maps_as_pydicts="lossy")
    return data.to_pylist()


def _has_map(data_type: pa.DataType) -> bool:
    if pa.types.is_map(data_type):
        return True
    if pa.types.is_dictionary(data_type):
        return _has_map(data_type.value_type)
    return any(_has_map(data_type.field(i).type) for i in range(data_type.num_fields))


class RowConverter:
    """Python rows (dict / tuple / Row) -> one Arrow RecordBatch of ``schema``, in bulk.

    The fast path hands a list of dicts to Arrow's C converter; only when that fails does it look
    for the column and value to blame.
    """

    def __init__(self, schema: StructType, what: str = "the function"):
        self.schema = schema
        self.arrow_schema = arrow_schema(schema)
        self.names = schema.fieldNames()
        self._name_set = frozenset(self.names)
        self.what = what

    def to_batch(self, rows: List[Any]) -> pa.RecordBatch:
        if not rows:
            return pa.RecordBatch.from_pylist([], schema=self.arrow_schema)
        first = rows[0]
        if type(first) is not dict or not all(type(r) is dict for r in rows):
            rows = [self._as_dict(r) for r in rows]
        else:
            extra = first.keys() - self._name_set
            if extra:
                self._unknown_keys(extra)
        try:
            return pa.RecordBatch.from_pylist(rows, schema=self.arrow_schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise self._blame(rows, exc) from None

    def _as_dict(self, row: Any) -> Dict[str, Any]:
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
                    f"{self.what} returned a tuple of {len(row)} values {_short(row)} but the schema has "
                    f"{len(self.names)} columns {self.names}: return one value per column, in order")
            return dict(zip(self.names, row))
        raise OutputSchemaError(f"{self.what} returned {type(row).__name__} {_short(row)}: return a dict "
                                f"(column -> value), a tuple or a pyspark.sql.Row for columns {self.names}")

    def _unknown_keys(self, extra: Any) -> None:
        raise OutputSchemaError(f"{self.what} returned keys {sorted(map(str, extra))} that are not columns of "
                                f"the schema {self.names}: fix the key names or add the columns")

    def _blame(self, rows: List[Dict[str, Any]], exc: BaseException) -> OutputSchemaError:
        for field, arrow_field in zip(self.schema.fields, self.arrow_schema):
            column = [r.get(field.name) for r in rows]
            try:
                pa.array(column, type=arrow_field.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                for value in column:
                    try:
                        pa.array([value], type=arrow_field.type)
                    except (pa.ArrowException, TypeError, ValueError, OverflowError) as cell_exc:
                        return OutputSchemaError(
                            f"output column {field.name!r} ({field.dataType.simpleString()}) cannot hold "
                            f"the value {_short(value)} of type {type(value).__name__} returned by "
                            f"{self.what}: {cell_exc}")
        return OutputSchemaError(f"the output of {self.what} does not fit the schema {self.schema.simpleString()}: {exc}")


def values_to_array(values: Sequence[Any], data_type: DataType, pa_type: pa.DataType, what: str) -> pa.Array:
    """Scalar UDF outputs -> one Arrow array, naming the offending value on failure."""
    try:
        return pa.array(values, type=pa_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        for value in values:
            try:
                pa.array([value], type=pa_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise OutputSchemaError(f"{what} returned {_short(value)} of type {type(value).__name__}, which "
                                        f"does not fit its return type {data_type.simpleString()}: {exc}") from None
        raise


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
