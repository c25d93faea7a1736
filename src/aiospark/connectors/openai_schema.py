"""Deprecated: moved to :mod:`aiospark.connectors.openai.schema`."""

from .._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.connectors.openai.schema")
