"""Definition-time checks of the operator's settings: each error says what to change.

Example::

    check_timeout(5)          # -> 5.0
    check_timeout(0)          # -> None (no timeout)
    check_capacity("auto")    # -> (1000, AdaptiveConcurrency(1000))
    check_retry("3 times")    # TypeError: retry must be an aiospark.RetryStrategy ...
    check_batching(64, 0.01, capacity=256)   # -> (64, 0.01)
"""
from __future__ import annotations

import math
import numbers
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


def check_batching(batch_size: Any, batch_delay: Any, capacity: int,
                   timeout: float | None = None) -> tuple[int | None, float]:
    """``(batch_size, batch_delay)`` validated: ``None`` batch size means no batching.
    ``timeout`` (checked already; None: no timeout) must leave a batch time for its call."""
    if batch_size is None:
        return None, 0.0
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or int(batch_size) < 1:
        raise ValueError(f"batch_size must be an int >= 1 (inputs per call) or None (one input per call), "
                         f"got {batch_size!r}")
    if isinstance(batch_delay, bool) or not isinstance(batch_delay, numbers.Real) \
            or not 0 <= float(batch_delay) < math.inf:
        raise ValueError(f"batch_delay must be seconds >= 0 to wait for a batch to fill (e.g. 0.01), "
                         f"got {batch_delay!r}")
    if timeout is not None and float(batch_delay) >= timeout:
        raise ValueError(f"batch_delay ({batch_delay} s) must be shorter than timeout ({timeout} s): a batch's "
                         f"deadline counts from its first row, so its rows would time out while it waits to "
                         f"fill, before any call; lower batch_delay (e.g. 0.01) or raise timeout")
    if int(batch_size) > capacity:
        raise ValueError(f"batch_size ({batch_size}) is larger than capacity ({capacity}): a batch could "
                         f"never fill; raise capacity to at least {batch_size} (it counts inputs in flight)")
    return int(batch_size), float(batch_delay)
