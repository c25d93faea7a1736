"""Deprecated: moved to :mod:`aiospark.connectors.http.transports`."""

from .._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.connectors.http.transports", "aiospark.connectors.http.transport",
                             "aiospark.connectors.http.codec", "aiospark.connectors.http._aiohttp")
