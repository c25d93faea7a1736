"""Deprecated: moved to :mod:`aiospark.connectors.postgres.key_convert`."""

from .._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.connectors.postgres.key_convert")
