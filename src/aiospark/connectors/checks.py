"""Argument checks shared by the connectors (definition time: the error says what to change)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_positive"]


def check_positive(name: str, value: Any, integer: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a positive number (int when ``integer``)."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise ValueError(f"{name} must be a positive {'integer' if integer else 'number'}, got {value!r}")
