"""Adaptive concurrency: find how many calls in flight a service can take (AIMD).

Like TCP congestion control and Netflix's concurrency-limits: the limit grows by about one per
round trip while the service keeps up (latency near its baseline and the limit actually used),
shrinks gently when latency climbs above ``latency_tolerance`` times the baseline, and is cut
multiplicatively (``limit * backoff``) on an overload signal -- a timeout, HTTP 429 or 503 --
at most once per round trip. It stays within ``[min_limit, max_limit]``.

Everything is O(1) per call (one monotonic clock read, no timer): the caller reports outcomes.

Example (how an operator drives it)::

    ac = AdaptiveConcurrency(max_limit=capacity)
    ...                                   # start a call only while inflight < ac.limit
    ac.on_success(latency, inflight)      # after each successful attempt
    ac.on_failure(exc, latency)           # after each failed attempt (overloads cut the limit)
"""
from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Callable, Optional

__all__ = ["AdaptiveConcurrency", "is_overload"]

#: HTTP statuses that mean "too much load": Too Many Requests, Service Unavailable.
OVERLOAD_STATUSES = frozenset((429, 503))
#: The limit grows only when at least this fraction of it was in flight (it is actually used).
USED_FRACTION = 0.75
#: Latencies below this (seconds) are treated as this when setting the baseline, so a service
#: answering in microseconds does not make every normal wobble look like a slowdown.
LATENCY_FLOOR = 1e-4
#: The baseline follows lower latencies with weight ``smoothing`` per sample, and drifts towards
#: higher ones with a time constant of this many seconds, whatever the call rate. (A service that
#: got slower for everyone is re-learnt sooner: when a run of too-slow answers has made the limit
#: shrink to ``RELEARN_FRACTION`` of what it was without the latency recovering.)
BASELINE_DRIFT_SECONDS = 30.0
RELEARN_FRACTION = 0.5
#: Slack (seconds) when comparing an attempt's start with the time of the last cut.
_EPS = 1e-9


def is_overload(exc: BaseException) -> bool:
    """True when ``exc`` says the service is overloaded: a timeout (``TimeoutError``, which covers
    ``asyncio.TimeoutError``, ``aiospark.AsyncTimeoutError`` and connector timeouts) or an error
    whose ``status`` (or ``status_code``) is 429 or 503, e.g. ``aiospark.connectors.HttpStatusError``.
    Duck-typed: no connector is imported."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return True
    status = getattr(exc, "status", None)
    if status is None:
        status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status in OVERLOAD_STATUSES


def _int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _real(name: str, value: Any, lo: float, hi: float, lo_open: bool, hi_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        left, right = "(" if lo_open else "[", ")" if hi_open else "]"
        raise ValueError(f"{name} must be in {left}{lo}, {hi}{right}, got {value!r}")
    return float(value)


class AdaptiveConcurrency:
    """An AIMD concurrency limit between ``min_limit`` and ``max_limit``.

    Args:
        max_limit: the hard ceiling (e.g. the operator's ``capacity``), int >= 1.
        initial: starting limit, default ``min(max_limit, 8)`` (raised to ``min_limit`` if lower).
        min_limit: the floor, int >= 1 and <= ``max_limit``.
        backoff: multiplicative decrease on overload, in (0, 1): ``limit = floor(limit * backoff)``.
        latency_tolerance: a success slower than this times the baseline latency counts as
            "the service is queueing" (> 1).
        smoothing: weight in (0, 1] of a new sample in the baseline (smoothed minimum) latency.
        clock: seconds on the caller's monotonic timeline (default :func:`time.monotonic`, the
            clock of asyncio loops); used to tell which round trip an outcome belongs to.

    ``limit`` is the number of calls that may be in flight now. Report every attempt's outcome
    with :meth:`on_success` or :meth:`on_failure` (or :meth:`on_overload` directly).

    Latency is the soft signal, overloads the hard one: under sustained saturation the baseline
    slowly re-learns higher latencies (so that a service that really got slower for everyone does
    not starve us down to ``min_limit``), which lets the limit creep up until the service answers
    with a timeout, 429 or 503. Use a finite operator timeout so that such a signal exists.

    Round trips: after a multiplicative decrease at time ``t``, outcomes of attempts that started
    before ``t`` (``now - latency < t``) are not acted upon -- they were sent under the old limit,
    so a burst of 503s from one window cuts the limit once, not once per error.
    """

    __slots__ = ("max_limit", "min_limit", "backoff", "latency_tolerance", "smoothing", "_clock",
                 "_limit", "_int_limit", "_baseline", "_sampled_at", "_avg", "_cut_at", "_slow_from",
                 "decreases")

    def __init__(self, max_limit: int, *, initial: Optional[int] = None, min_limit: int = 1,
                 backoff: float = 0.5, latency_tolerance: float = 2.0, smoothing: float = 0.1,
                 clock: Optional[Callable[[], float]] = None):
        self.max_limit = _int("max_limit", max_limit, 1)
        self.min_limit = _int("min_limit", min_limit, 1)
        if self.min_limit > self.max_limit:
            raise ValueError(f"min_limit ({min_limit}) must be <= max_limit ({max_limit})")
        if initial is None:
            initial = max(self.min_limit, min(self.max_limit, 8))
        else:
            initial = _int("initial", initial, 1)
            if not self.min_limit <= initial <= self.max_limit:
                raise ValueError(f"initial ({initial}) must be between min_limit ({self.min_limit}) "
                                 f"and max_limit ({self.max_limit})")
        self.backoff = _real("backoff", backoff, 0.0, 1.0, True, True)
        self.latency_tolerance = _real("latency_tolerance", latency_tolerance, 1.0, math.inf, True, True)
        self.smoothing = _real("smoothing", smoothing, 0.0, 1.0, True, False)
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning seconds, got {type(clock).__name__}")
        self._clock = clock or time.monotonic
        self._limit = float(initial)
        self._int_limit = initial
        self._baseline = 0.0       # smoothed minimum latency; 0.0 = no sample yet
        self._sampled_at = 0.0     # clock() at the last success
        self._slow_from = 0.0      # limit when the current run of too-slow successes began
        self._avg = 0.0            # smoothed latency of all samples (round-trip estimate)
        self._cut_at = -math.inf   # time of the last multiplicative decrease
        self.decreases = 0         # multiplicative decreases so far (for metrics / tests)

    is_overload = staticmethod(is_overload)

    @property
    def limit(self) -> int:
        """How many calls may be in flight now (an int in ``[min_limit, max_limit]``)."""
        return self._int_limit

    @property
    def baseline_latency(self) -> Optional[float]:
        """The smoothed minimum latency (seconds), ``None`` before the first success."""
        return self._baseline or None

    def _set(self, value: float) -> None:
        if value > self.max_limit:
            value = float(self.max_limit)
        elif value < self.min_limit:
            value = float(self.min_limit)
        self._limit = value
        self._int_limit = int(value)

    def on_success(self, latency_seconds: float, inflight: int) -> None:
        """A successful attempt took ``latency_seconds``; ``inflight`` calls were in flight when it
        finished, itself included.

        Within tolerance and with the limit in use (``inflight >= 0.75 * limit``): grow by
        ``1/limit`` (about +1 per round trip). Slower than ``latency_tolerance * baseline``:
        shrink by ``1/limit`` (about -1 per round trip).
        """
        if not latency_seconds >= 0.0:
            raise ValueError(f"latency_seconds must be >= 0, got {latency_seconds!r}")
        now = self._clock()
        sample = latency_seconds if latency_seconds > LATENCY_FLOOR else LATENCY_FLOOR
        baseline = self._baseline
        if baseline == 0.0:
            self._baseline = self._avg = baseline = sample
        else:
            if sample < baseline:
                self._baseline = baseline + self.smoothing * (sample - baseline)
            else:  # drift up by time, not by sample count (independent of throughput)
                elapsed = now - self._sampled_at
                if elapsed > 0.0:
                    weight = elapsed / BASELINE_DRIFT_SECONDS
                    self._baseline = baseline + (weight if weight < 1.0 else 1.0) * (sample - baseline)
            self._avg += self.smoothing * (sample - self._avg)
        self._sampled_at = now
        if now - latency_seconds < self._cut_at - _EPS:
            return  # started before the last cut: it reports on the old window
        limit = self._limit
        if sample > self.latency_tolerance * baseline:
            streak_from = self._slow_from
            if not streak_from:
                self._slow_from = streak_from = limit
            if limit > self.min_limit:
                self._set(limit - 1.0 / limit)
            if self._limit <= max(self.min_limit, streak_from * RELEARN_FRACTION):
                # slower and slower although we sent ever fewer calls: not our load, the service
                # itself got slower -- take the current latency as the new baseline
                self._baseline = self._avg
                self._slow_from = 0.0
        else:
            self._slow_from = 0.0
            if inflight >= USED_FRACTION * limit and limit < self.max_limit:
                self._set(limit + 1.0 / limit)

    def on_overload(self, latency_seconds: Optional[float] = None) -> bool:
        """The service said "too much" (timeout, 429, 503): ``limit = max(min_limit,
        floor(limit * backoff))``, at most once per round trip. Returns whether the limit was cut.

        ``latency_seconds``: how long the overloaded attempt ran. Given, the signal is ignored
        when that attempt started before the last cut. Not given, it is ignored for one smoothed
        round trip after the last cut.
        """
        now = self._clock()
        if latency_seconds is not None:
            if not latency_seconds >= 0.0:
                raise ValueError(f"latency_seconds must be >= 0, got {latency_seconds!r}")
            if now - latency_seconds < self._cut_at - _EPS:
                return False
            if self._avg:
                self._avg += self.smoothing * (latency_seconds - self._avg)
        elif now <= self._cut_at + max(self._avg, LATENCY_FLOOR):
            return False
        self._set(float(max(self.min_limit, math.floor(self._int_limit * self.backoff))))
        self._cut_at = now
        self.decreases += 1
        return True

    def on_failure(self, exc: BaseException, latency_seconds: Optional[float] = None) -> bool:
        """A failed attempt (after ``latency_seconds``, if known): an overload (:func:`is_overload`)
        goes to :meth:`on_overload`; any other error changes nothing. Returns whether the limit
        was cut."""
        if is_overload(exc):
            return self.on_overload(latency_seconds)
        return False

    def __repr__(self) -> str:
        return (f"AdaptiveConcurrency(limit={self._int_limit}, min_limit={self.min_limit}, "
                f"max_limit={self.max_limit}, baseline={self._baseline * 1000:.3g}ms)")
