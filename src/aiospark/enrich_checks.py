"""Deprecated: moved to :mod:`aiospark.app.enrich_checks`."""

from ._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.app.enrich_checks")
