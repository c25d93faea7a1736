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
