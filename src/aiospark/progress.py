"""Deprecated: moved to :mod:`aiospark.app.progress` (the CLI's block) and :mod:`aiospark.spark.progress`."""

from ._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.app.progress", "aiospark.spark.progress")
