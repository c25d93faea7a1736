"""Deprecated: the connectors' shared pieces moved to modules named for what they hold."""

from .._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.connectors.errors", "aiospark.connectors.secrets",
                             "aiospark.connectors.keys", "aiospark.connectors.checks",
                             "aiospark.connectors.redaction")
