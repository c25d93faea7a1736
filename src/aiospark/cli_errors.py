"""Deprecated: moved to :mod:`aiospark.app.cli_errors`."""

from ._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.app.cli_errors")
