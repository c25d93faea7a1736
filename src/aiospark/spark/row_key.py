"""``key=`` of ``unordered_wait``: the key of a row, from one or more of its columns.

Rows reach the function as dicts, so the key is read from the dict. Column values that Python
cannot hash (an ARRAY column arrives as a list, a STRUCT as a dict, a MAP as a list of pairs)
are turned into equal-comparing tuples, so equal Spark values give equal keys.

Example::

    key_of = row_key(df, ["tenant", "account"], "unordered_wait")
    key_of({"tenant": "t1", "account": 7, "amount": 3})    # ('t1', 7)
"""
from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any


class RowKey:
    """``row -> key`` for the given columns (picklable; one column gives its value, several a tuple)."""

    def __init__(self, columns: Sequence[str]):
        self.columns = tuple(columns)
        self._get = itemgetter(*self.columns)

    def __call__(self, row: Any) -> Any:
        key = self._get(row)
        try:
            hash(key)
        except TypeError:
            return _hashable(key)
        return key

    def __reduce__(self) -> Any:
        return RowKey, (self.columns,)

    def __repr__(self) -> str:
        return f"RowKey({list(self.columns)!r})"


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def row_key(df: Any, key: str | Sequence[str], what: str) -> RowKey:
    """Validate ``key`` (a column name or a list of them) against ``df``'s columns."""
    columns = [key] if isinstance(key, str) else key
    if not isinstance(columns, (list, tuple)) or not columns or \
            not all(isinstance(c, str) and c for c in columns):
        raise TypeError(f"{what}(key=...) takes a column name or a non-empty list of column names, got {key!r}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"{what}(key=...) names a column twice: {list(columns)!r}")
    available = list(df.columns)
    missing = [c for c in columns if c not in available]
    if missing:
        raise ValueError(f"{what}(key=...): {', '.join(map(repr, missing))} is not a column of the DataFrame "
                         f"(its columns: {', '.join(available)})")
    return RowKey(columns)
