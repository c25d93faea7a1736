"""Deprecated: moved to :mod:`aiospark.connectors.redis.url`."""

from .._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.connectors.redis.url")
