"""Credentials: :class:`Secret` (never shown by ``repr``/``str``) and where one comes from.

Example::

    >>> Secret("s3cret")
    '***'
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["Secret", "resolve_secret"]


class Secret:
    """A credential that never shows in ``repr``/``str``; ``reveal()`` returns the value."""

    __module__ = "aiospark.connectors"  # its public home (reprs, pickles)
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __getstate__(self) -> str:
        return self._value

    def __setstate__(self, state: str) -> None:
        self._value = state


def resolve_secret(value: Any, env: str | None) -> Secret | None:
    """An explicit ``value`` wins; else the environment variable ``env`` (if set)."""
    if isinstance(value, Secret):
        return value
    if value is not None:
        if not isinstance(value, str):
            raise TypeError("credentials must be strings")
        return Secret(value)
    if env:
        found = os.environ.get(env)
        if found:
            return Secret(found)
    return None
