"""Retry strategies (Flink's ``AsyncRetryStrategy``, FLIP-232), with seconds and explicit names.

``max_retries`` counts calls AFTER the first one. ``result_predicate(results) -> bool`` retries on a
result; ``exception_predicate(exc) -> bool`` retries on an exception. With neither given, any
``Exception`` is retried. A strategy holds no per-element state: ``delays()`` returns a fresh
iterator for each element, so one strategy object can be shared by every operator and task.

Example::

    >>> s = RetryStrategy.exponential_backoff(4, 0.1, 0.5, result_predicate=retry_if_empty)
    >>> list(s.delays())
    [0.1, 0.2, 0.4, 0.5]
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

ResultPredicate = Callable[[list[Any]], bool]
ExceptionPredicate = Callable[[BaseException], bool]


def _number(name: str, value: Any, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return float(value)


def _predicate(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a callable or None, got {type(value).__name__}")
    return value


def _default_exception_predicate(exc: BaseException) -> bool:
    return isinstance(exc, Exception)


class RetryStrategy:
    """When to call again, and after how long. Build one with :meth:`fixed_delay` or
    :meth:`exponential_backoff`."""

    __slots__ = ("max_retries", "initial_delay", "max_delay", "multiplier", "jitter",
                 "result_predicate", "exception_predicate")

    def __init__(self, max_retries: int, initial_delay: float, max_delay: float, multiplier: float,
                 jitter: float, result_predicate: ResultPredicate | None,
                 exception_predicate: ExceptionPredicate | None):
        if isinstance(max_retries, bool) or not isinstance(max_retries, int):
            raise TypeError(f"max_retries must be an int (calls after the first), got {max_retries!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0 (calls after the first), got {max_retries}")
        self.max_retries = max_retries
        self.initial_delay = _number("initial_delay", initial_delay)
        self.max_delay = _number("max_delay", max_delay)
        if self.max_delay < self.initial_delay:
            raise ValueError(f"max_delay ({max_delay}) must be >= initial_delay ({initial_delay})")
        self.multiplier = _number("multiplier", multiplier, minimum=1.0)
        self.jitter = _number("jitter", jitter)
        if self.jitter >= 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {jitter!r}")
        self.result_predicate = _predicate("result_predicate", result_predicate)
        if result_predicate is None and exception_predicate is None:
            exception_predicate = _default_exception_predicate
        self.exception_predicate = _predicate("exception_predicate", exception_predicate)

    @classmethod
    def fixed_delay(cls, max_retries: int, delay: float, *,
                    result_predicate: ResultPredicate | None = None,
                    exception_predicate: ExceptionPredicate | None = None) -> RetryStrategy:
        """Retry up to ``max_retries`` times, ``delay`` seconds apart."""
        delay = _number("delay", delay)
        return cls(max_retries, delay, delay, 1.0, 0.0, result_predicate, exception_predicate)

    @classmethod
    def exponential_backoff(cls, max_retries: int, initial_delay: float, max_delay: float,
                            multiplier: float = 2.0, *, jitter: float = 0.0,
                            result_predicate: ResultPredicate | None = None,
                            exception_predicate: ExceptionPredicate | None = None) -> RetryStrategy:
        """Delays ``initial, initial*m, ...`` capped at ``max_delay``; each multiplied by a random
        factor in ``[1-jitter, 1+jitter]``."""
        return cls(max_retries, initial_delay, max_delay, multiplier, jitter,
                   result_predicate, exception_predicate)

    def delays(self) -> Iterator[float]:
        """A fresh iterator of the back-off delays (seconds) of one element: ``max_retries`` items."""
        delay = self.initial_delay
        for _ in range(self.max_retries):
            value = min(delay, self.max_delay)
            if self.jitter:
                value *= random.uniform(1.0 - self.jitter, 1.0 + self.jitter)
            yield value
            delay *= self.multiplier

    def should_retry_result(self, results: list[Any]) -> bool:
        return self.result_predicate is not None and bool(self.result_predicate(results))

    def should_retry_exception(self, exc: BaseException) -> bool:
        return self.exception_predicate is not None and bool(self.exception_predicate(exc))

    def __repr__(self) -> str:
        return (f"RetryStrategy(max_retries={self.max_retries}, initial_delay={self.initial_delay}, "
                f"max_delay={self.max_delay}, multiplier={self.multiplier}, jitter={self.jitter})")


def retry_if_empty(results: list[Any]) -> bool:
    """Result predicate: retry when the call produced no output."""
    return not results


def retry_on(*exception_types: type[BaseException]) -> ExceptionPredicate:
    """Exception predicate: retry only on instances of ``exception_types``.

    Example: ``RetryStrategy.fixed_delay(3, 0.1, exception_predicate=retry_on(ConnectionError))``
    """
    if not exception_types:
        raise ValueError("retry_on() needs at least one exception type")
    for t in exception_types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise TypeError(f"retry_on() takes exception classes, got {t!r}")
    types: tuple[type[BaseException], ...] = tuple(exception_types)

    def predicate(exc: BaseException) -> bool:
        return isinstance(exc, types)

    predicate.__name__ = "retry_on_" + "_".join(t.__name__ for t in types)
    return predicate
