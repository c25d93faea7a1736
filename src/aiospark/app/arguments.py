"""Argument types of the ``aiospark`` command's options: a bad value is refused by argparse with
what to change, before anything starts.

Example::

    parser.add_argument("--rows", type=positive_int, default=1000)   # "--rows 0": must be >= 1, got 0
"""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def count(text: str) -> int:
    """An int >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def seconds(text: str) -> float:
    """A number of seconds >= 0 (NaN refused)."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


_PER = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
        "hour": 3600.0}


def rate(text: str) -> tuple[float, float]:
    """``R``, ``R/s``, ``R/min`` or ``R/h``: (R, the window in seconds); R a finite number > 0.

    Example::

        rate("600/min")   # (600.0, 60.0)
    """
    number, _, unit = text.partition("/")
    per = _PER.get(unit.strip().lower() or "s")
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if per is None or not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"takes calls per second, minute or hour such as 10/s, 600/min or 2.5, "
                                         f"got {text!r}")
    return value, per


def budget(text: str) -> int:
    """A number of calls >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a whole number of calls >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number of calls >= 1, got {value}")
    return value
