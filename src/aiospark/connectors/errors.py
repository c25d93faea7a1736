"""The connectors' errors: :class:`ConnectorError` (``source``, ``retryable``), :class:`ConnectorTimeout`
and the retry predicate :func:`is_retryable`.

Example::

    RetryStrategy.exponential_backoff(3, 0.1, 2.0, exception_predicate=is_retryable)
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConnectorError", "ConnectorTimeout", "is_retryable"]


class ConnectorError(Exception):
    """A lookup against an external system failed.

    Attributes:
        source: which source failed, e.g. ``"RedisLookup(127.0.0.1:6379/0)"``
            (host:port, never credentials).
        retryable: whether trying again later may succeed (connection refused,
            timeouts, 5xx) or not (bad request, unknown table, bad password).
    """

    __module__ = "aiospark.connectors"  # its public home (reprs, pickles), whichever module defines it

    def __init__(self, message: str, *, source: str = "", retryable: bool = False) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source
        self.retryable = retryable
        self._message = message

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self._message, dict(self.__dict__)))


def _rebuild(cls: type[ConnectorError], message: str, state: dict[str, Any]) -> ConnectorError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, f"{state.get('source')}: {message}" if state.get("source") else message)
    exc.__dict__.update(state)
    return exc


class ConnectorTimeout(ConnectorError, TimeoutError):
    """The external system did not answer in time (retryable)."""

    __module__ = "aiospark.connectors"

    def __init__(self, message: str, *, source: str = "", retryable: bool = True) -> None:
        super().__init__(message, source=source, retryable=retryable)


def is_retryable(exc: BaseException) -> bool:
    """Exception predicate for retry strategies: true for errors marked ``retryable``.

    Example: ``RetryStrategy.exponential_backoff(3, 0.1, 2.0, exception_predicate=is_retryable)``
    """
    return bool(getattr(exc, "retryable", False))
