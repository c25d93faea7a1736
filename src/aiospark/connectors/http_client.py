"""Deprecated: moved to :mod:`aiospark.connectors.http.client`."""

from .._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.connectors.http.client")
