"""What every part of ``aiospark enrich`` shares: its error for a bad argument or input, and what a
local path is.

Example::

    is_local("file:///data/in.csv"), local_path("file:///data/in.csv")   # (True, '/data/in.csv')
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

from ..spark.arrow_names import quoted

__all__ = ["EnrichError", "is_local", "local_path", "quoted"]


class EnrichError(ValueError):
    """A bad argument or input: the message says what to change (the CLI exits 2)."""


def is_local(path: str) -> bool:
    """A path on this machine (no scheme, or ``file:``)."""
    scheme = urlsplit(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(path: str) -> str:
    return urlsplit(path).path if path.startswith("file:") else path
