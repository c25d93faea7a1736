"""Stream elements: a :class:`Record` carries a value, a :class:`Watermark` carries event time.

Both are tuples underneath (cheap to create on the hot path) but compare only with their own kind:
``Record(3, None) != (3, None)`` and ``Record(1) != Watermark(1)``.

Example::

    >>> Record(2, 1) == Record(2, 1)
    True
    >>> Record("x").timestamp is None
    True
"""
from __future__ import annotations

from typing import Any, NamedTuple

Timestamp = int | float | None


class Record(NamedTuple):
    """One input or output element: ``value`` plus an optional event ``timestamp``."""

    value: Any
    timestamp: Timestamp = None

    def __eq__(self, other: object) -> bool:
        return type(other) is Record and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:  # defining __eq__ unsets __hash__: keep the tuple's
        return tuple.__hash__(self)


class Watermark(NamedTuple):
    """Event-time progress: no record with a timestamp <= ``timestamp`` is expected after it."""

    timestamp: int | float

    def __eq__(self, other: object) -> bool:
        return type(other) is Watermark and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:  # defining __eq__ unsets __hash__: keep the tuple's
        return tuple.__hash__(self)


StreamElement = Record | Watermark
