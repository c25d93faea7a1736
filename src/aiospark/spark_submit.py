"""Deprecated: moved to :mod:`aiospark.app.spark_submit`."""

from ._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.app.spark_submit")
