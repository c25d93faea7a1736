"""Deprecated: moved to :mod:`aiospark.connectors.http.response`."""

from .._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.connectors.http.response")
