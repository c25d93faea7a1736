"""Definition-time checks of the operator's settings: each error says what to change.

Example::

    check_timeout(5)          # -> 5.0
    check_timeout(0)          # -> None (no timeout)
    check_capacity("auto")    # -> (1000, AdaptiveConcurrency(1000))
    check_retry("3 times")    # TypeError: retry must be an aiospark.RetryStrategy ...
"""
from __future__ import annotations

import math
from typing import Any

from .adaptive import AdaptiveConcurrency
from .queues import _check_capacity
from .retry import RetryStrategy

#: ``capacity="auto"`` adapts up to this many calls in flight.
AUTO_MAX_CAPACITY = 1000


def check_timeout(timeout: Any) -> float | None:
    """``None`` or ``<= 0`` means no timeout; anything else must be a number of seconds."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout):
        raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
    return float(timeout) if timeout > 0 else None


def check_capacity(capacity: Any) -> tuple[int, AdaptiveConcurrency | None]:
    """``capacity``: an int >= 1, ``"auto"`` (adaptive up to 1000) or an AdaptiveConcurrency.

    Returns the queue capacity and the adaptive limit (None for a fixed capacity).
    """
    if isinstance(capacity, str):
        if capacity != "auto":
            raise ValueError(f"capacity must be an int >= 1, 'auto' or an AdaptiveConcurrency, got {capacity!r}")
        capacity = AdaptiveConcurrency(AUTO_MAX_CAPACITY)
    if isinstance(capacity, AdaptiveConcurrency):
        return capacity.max_limit, capacity
    return _check_capacity(capacity), None


def check_retry(retry: Any) -> RetryStrategy | None:
    if retry is not None and not isinstance(retry, RetryStrategy):
        raise TypeError("retry must be an aiospark.RetryStrategy (e.g. RetryStrategy.fixed_delay(3, 0.1)) "
                        f"or None, got {type(retry).__name__}")
    return retry
