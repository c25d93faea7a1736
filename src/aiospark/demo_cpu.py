"""Deprecated: moved to :mod:`aiospark.app.demo_cpu`."""

from ._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.app.demo_cpu")
