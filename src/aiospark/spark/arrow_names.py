"""``mapInArrow`` over columns of any name.

PySpark's ``mapInArrow`` looks every input column up with ``df[name]``, which reads ``a.b`` as field
``b`` of a struct ``a`` and cannot spell a backtick (UNRESOLVED_COLUMN / PARSE_SYNTAX_ERROR): a
frame holding such a column fails before any task runs. :func:`map_in_arrow` gives such a frame's
columns plain positional names for the trip through ``mapInArrow`` and hands the function batches
under the frame's own names, so the function, row identities and ``_input`` error rows see exactly
the names the user wrote. Output batches are the function's, named by the output schema as before.

Example::

    out = map_in_arrow(df, runner, out_schema)   # df may hold "a.b" or "x`y"
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

__all__ = ["map_in_arrow", "quoted"]

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

ArrowFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def quoted(name: str) -> str:
    """``name`` as a Spark column reference that means exactly it (``a.b`` is not field ``b`` of ``a``).

    Example::

        quoted("a.b")   # '`a.b`'
    """
    return "`" + name.replace("`", "``") + "`"


def map_in_arrow(df: Any, function: ArrowFunction, schema: Any) -> Any:
    """``df.mapInArrow(function, schema)``, for a frame whose columns may have any names."""
    names = list(df.columns)
    if all(_PLAIN.match(n) for n in names):
        return df.mapInArrow(function, schema)
    positional = [f"_{i}" for i in range(len(names))]  # plain and distinct: only mapInArrow sees them
    return df.toDF(*positional).mapInArrow(_Named(function, names), schema)


class _Named:
    """``function`` given batches under ``names`` (picklable: it travels to the tasks)."""

    def __init__(self, function: ArrowFunction, names: Sequence[str]):
        self.function = function
        self.names = list(names)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return self.function(pa.RecordBatch.from_arrays(batch.columns, names=self.names) for batch in batches)
