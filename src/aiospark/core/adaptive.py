"""Adaptive concurrency: find how many calls in flight a service can take, and stay there.

A delay-and-loss limit in the style of TCP Vegas and Netflix's concurrency-limits (Gradient2),
updated once per round trip:

* **Windows.** Successes are averaged over a window of about one round trip (and at least
  ``MIN_WINDOW_SAMPLES`` answers); the limit changes when a window closes, not per call, so the
  noise of single latencies does not steer it.
* **Delay (the service queues).** ``gradient = clamp(tolerance * baseline / window_rtt, 0.5, 1)``
  and ``limit += smoothing * (limit * (gradient - 1) + sqrt(limit))``: while the round trip stays
  within ``latency_tolerance`` times the no-load baseline, the limit grows by ``smoothing * sqrt(limit)``
  per round trip (the queue allowance); when the service queues, it settles where the gradient
  balances the allowance, a bounded queue above the knee, instead of growing until something fails.
* **Loss (the service rejects).** An overload (timeout, HTTP 429 or 503) cuts the limit to
  ``limit * backoff`` -- at most once per congestion event: an overload from an attempt that
  started less than one round trip after the last cut is the same event (the calls sent before
  the cut were still being served), so a burst of 429s is one cut, not one per rejected call.
* **Baseline.** The no-load round trip is the lowest window average seen. It is re-learnt upwards
  only on evidence that the service itself got slower: the limit halved (or reached
  ``min_limit``) during a run of slow windows and the round trip did not improve. Our own queueing improves when we send less, so it
  never raises the baseline (no drift towards "slow is normal").
* **Start.** Slow start, as TCP: the limit doubles per round trip -- but never past twice what
  the service really served (answers per second times the round trip, Little's law), so a client
  that cannot fill its limit does not build a burst -- until the first sign of congestion (an
  overload, or a window slower than tolerated). Then it drops to what was served in the last good
  window (at most half the limit), not to half of the overshoot.
* **Baseline probes.** A task that starts while the service already queues for others never sees it
  unloaded. So every ``BASELINE_PROBE_PERIOD`` seconds, at instants common to all tasks (wall-clock
  multiples of the period), each limiter drops to a few calls for about one round trip: the service
  drains, every task samples the unloaded round trip, and the limit goes back to where it was.
  Skipped by a limiter that was cut on overload within the period (a service that rejects bounds
  the limit by rejections, not by latency).

Everything is O(1) per call, one clock read, no allocation, no timer: the caller reports outcomes.

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
from collections.abc import Callable
from typing import Any

__all__ = ["AdaptiveConcurrency", "is_overload"]

#: HTTP statuses that mean "too much load": Too Many Requests, Service Unavailable.
OVERLOAD_STATUSES = frozenset((429, 503))
#: A window closes after one smoothed round trip and at least this many answers: fewer would let
#: one slow answer (a GC pause, a busy CPU) look like queueing.
MIN_WINDOW_SAMPLES = 8
#: The limit grows only when at least this fraction of it was in flight during the window
#: (an application that sends less than the limit tells nothing about the service).
USED_FRACTION = 0.5
#: For this many windows after a cut on overload, while the limit is within ``PROBE_ZONE`` of the
#: level that was rejected, it grows by ``smoothing`` (not ``smoothing * sqrt(limit)``) per window:
#: it probes gently just below that level, so rejections stay rare. Further below (latency made it
#: shrink), or later (the service may have grown), it grows at the normal pace.
PROBE_WINDOWS = 50
PROBE_ZONE = 0.8
#: The gradient never cuts more than this per window: a latency spike shrinks the limit, gently.
MIN_GRADIENT = 0.5
#: Latencies below this (seconds) are treated as this, so a service answering in microseconds
#: does not make every normal wobble look like a slowdown.
LATENCY_FLOOR = 1e-4
#: Re-learn a slower baseline when a run of slow windows has shrunk the limit to this fraction of
#: where it began while the round trip stayed above ``RELEARN_NO_BETTER`` of what it was then.
RELEARN_FRACTION = 0.5
RELEARN_NO_BETTER = 0.9
#: Baseline probes: every this many seconds, at wall-clock multiples of it (common to all tasks
#: and processes of a machine), the limit drops to ``limit * BASELINE_PROBE_SHARE`` (at least
#: ``min_limit``, at most ``MIN_WINDOW_SAMPLES``) until one window of answers sent after the drop
#: is in. (Not to be confused with ``PROBE_WINDOWS``: probing upwards near a rejected level.)
BASELINE_PROBE_PERIOD = 5.0
BASELINE_PROBE_SHARE = 0.25


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
    """A concurrency limit between ``min_limit`` and ``max_limit`` that follows the service.

    Args:
        max_limit: the hard ceiling (e.g. the operator's ``capacity``), int >= 1.
        initial: starting limit, default ``min(max_limit, 8)`` (raised to ``min_limit`` if lower).
        min_limit: the floor, int >= 1 and <= ``max_limit``.
        backoff: multiplicative decrease on an overload, in (0, 1): ``limit = limit * backoff``,
            once per congestion event. 0.9 (default) keeps throughput high; lower backs off harder.
        latency_tolerance: a round trip up to this times the no-load baseline is not queueing
            (> 1). Lower keeps latency closer to the baseline, higher keeps more calls in flight.
        smoothing: in (0, 1], how much of the computed change is applied per round trip.
        slow_start: double the limit per round trip until the first sign of congestion (default);
            ``False`` grows by the queue allowance from the start.
        clock: seconds on the caller's monotonic timeline (default :func:`time.monotonic`, the
            clock of asyncio loops).

    ``limit`` is the number of calls that may be in flight now. Report every attempt's outcome
    with :meth:`on_success` or :meth:`on_failure` (or :meth:`on_overload` directly).

    Example::

        ac = AdaptiveConcurrency(max_limit=400)
        aiospark.unordered_wait(df, fetch, "id LONG", capacity=ac, retry=retry)  # one limit per task
    """

    __slots__ = ("max_limit", "min_limit", "backoff", "latency_tolerance", "smoothing", "_clock",
                 "_limit", "_int_limit", "_baseline", "_rtt", "_slow_start",
                 "_w_start", "_w_count", "_w_sum", "_w_used",
                 "_cut_at", "_cut_rtt", "_cut_level", "_since_cut", "_streak_limit", "_streak_rtt",
                 "_w_answers", "_good", "_w_need", "_next_probe", "_probe_saved",
                 "decreases", "windows", "probes")

    def __init__(self, max_limit: int, *, initial: int | None = None, min_limit: int = 1,
                 backoff: float = 0.9, latency_tolerance: float = 1.4, smoothing: float = 0.2,
                 slow_start: bool = True, clock: Callable[[], float] | None = None):
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
        if not isinstance(slow_start, bool):
            raise TypeError(f"slow_start must be True or False, got {slow_start!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning seconds, got {type(clock).__name__}")
        self._clock = clock or time.monotonic
        self._limit = float(initial)
        self._int_limit = initial
        self._slow_start = slow_start
        self._baseline = 0.0       # no-load round trip: lowest window average; 0.0 = none yet
        self._rtt = 0.0            # smoothed round trip (window averages): the window length
        self._w_start = -math.inf  # the current window: start time (-inf: not begun) ...
        self._w_count = 0          # ... successes in it ...
        self._w_sum = 0.0          # ... their summed latency ...
        self._w_used = 0           # ... and the most calls in flight seen in it
        self._cut_at = -math.inf   # time of the last decrease on overload ...
        self._cut_rtt = 0.0        # ... and the round trip then: the same event lasts that long
        self._cut_level = 0.0      # the limit the last cut on overload started from
        self._since_cut = PROBE_WINDOWS  # windows closed since the last cut on overload
        self._streak_limit = 0.0   # limit when the current run of slow windows began (0: none)
        self._streak_rtt = 0.0     # round trip of the first slow window of that run
        self._w_answers = 0        # all answers since the window began (calls sent before it too)
        self._good = 0.0           # calls the service served for us in the last good slow-start window
        self._w_need = MIN_WINDOW_SAMPLES  # answers that close a window (fewer during a probe)
        self._next_probe = -math.inf  # clock time of the next baseline probe (-inf: not scheduled)
        self._probe_saved = 0.0    # the limit before the current probe (0: not probing)
        self.decreases = 0         # decreases on overload so far (for metrics / tests)
        self.windows = 0           # windows closed so far (limit updates from latency)
        self.probes = 0            # baseline probes so far

    is_overload = staticmethod(is_overload)

    @property
    def limit(self) -> int:
        """How many calls may be in flight now (an int in ``[min_limit, max_limit]``)."""
        return self._int_limit

    @property
    def baseline_latency(self) -> float | None:
        """The no-load round trip (seconds) the gradient compares with, ``None`` before the first
        window closed."""
        return self._baseline or None

    def _set(self, value: float) -> None:
        if value > self.max_limit:
            value = float(self.max_limit)
        elif value < self.min_limit:
            value = float(self.min_limit)
        self._limit = value
        self._int_limit = int(value)

    # ------------------------------------------------------------------ outcomes (the hot path)
    def on_success(self, latency_seconds: float, inflight: int) -> None:
        """A successful attempt took ``latency_seconds``; ``inflight`` calls were in flight when it
        finished, itself included. O(1); the limit changes only when a window closes."""
        if not latency_seconds >= 0.0:
            raise ValueError(f"latency_seconds must be >= 0, got {latency_seconds!r}")
        now = self._clock()
        if now >= self._next_probe:
            self._probe(now)
        self._w_answers += 1
        if now - latency_seconds < self._w_start:
            return  # sent before the last update: it reports on the old limit
        self._w_count += 1
        self._w_sum += latency_seconds if latency_seconds > LATENCY_FLOOR else LATENCY_FLOOR
        if inflight > self._w_used:
            self._w_used = inflight
        if self._w_count >= self._w_need and now - self._w_start >= self._rtt:
            self._close_window(now)

    def on_overload(self, latency_seconds: float | None = None) -> bool:
        """The service said "too much" (timeout, 429, 503): ``limit = limit * backoff`` (half of
        it in slow start), once per congestion event. Returns whether the limit was cut.

        ``latency_seconds``: how long the overloaded attempt ran. An attempt that started less
        than one round trip after the last cut belongs to the same event (the calls sent before
        it were still being served) and is ignored. Not given: ignored for two round trips after
        the last cut.
        """
        now = self._clock()
        if latency_seconds is not None:
            if not latency_seconds >= 0.0:
                raise ValueError(f"latency_seconds must be >= 0, got {latency_seconds!r}")
            started = now - latency_seconds
        else:
            started = now - max(self._rtt, self._cut_rtt)
        if started < self._cut_at + self._cut_rtt:
            return False
        if self._probe_saved:
            self._end_probe()
        if self._slow_start:
            self._slow_start = False
            value = self._slow_start_exit()
        else:
            value = self._limit * self.backoff
        if value >= self._limit - 1.0:  # a small limit still drops by one call
            value = self._limit - 1.0
        self._cut_level = self._limit
        self._set(value)
        self._cut_at = now
        self._cut_rtt = self._rtt if self._rtt > LATENCY_FLOOR else LATENCY_FLOOR
        self.decreases += 1
        self._since_cut = 0
        self._new_window(now)
        return True

    def on_failure(self, exc: BaseException, latency_seconds: float | None = None) -> bool:
        """A failed attempt (after ``latency_seconds``, if known): an overload (:func:`is_overload`)
        goes to :meth:`on_overload`; any other error changes nothing. Returns whether the limit
        was cut."""
        if is_overload(exc):
            return self.on_overload(latency_seconds)
        return False

    # ------------------------------------------------------------------ once per round trip
    def _new_window(self, now: float) -> None:
        self._w_start = now
        self._w_count = 0
        self._w_sum = 0.0
        self._w_used = 0
        self._w_answers = 0

    def _slow_start_exit(self) -> float:
        """The limit after slow start: what the service served in the last good window, at most
        half the limit (the overshoot itself says nothing about the service)."""
        half = self._limit * 0.5
        return self._good if 0.0 < self._good < half else half

    # ------------------------------------------------------------------ baseline probes
    def _probe(self, now: float) -> None:
        """A probe instant has come (or the first answer: schedule the first instant)."""
        first = self._next_probe == -math.inf
        # wall-clock multiples of the period on time.monotonic's timeline; a custom clock is its
        # own timeline (limiters sharing it probe together)
        offset = time.time() - now if self._clock is time.monotonic else 0.0
        period = BASELINE_PROBE_PERIOD
        self._next_probe = (math.floor((now + offset) / period) + 1.0) * period - offset
        if first or self._probe_saved or self._baseline == 0.0 or now - self._cut_at < period \
                or self._rtt * 4.0 > period:
            # nothing learnt yet; a service that rejects (its rejections bound the limit); or round
            # trips too long to spend one every period
            return
        floor = self._limit * BASELINE_PROBE_SHARE
        if floor > MIN_WINDOW_SAMPLES:
            floor = float(MIN_WINDOW_SAMPLES)
        if floor < self.min_limit:
            floor = float(self.min_limit)
        if int(floor) >= self._int_limit:
            return  # too few calls to drain anything
        self._probe_saved = self._limit
        self._set(floor)
        self._w_need = max(1, int(floor))
        self._new_window(now)
        self.probes += 1

    def _end_probe(self) -> None:
        self._set(self._probe_saved)
        self._probe_saved = 0.0
        self._w_need = MIN_WINDOW_SAMPLES

    def _close_window(self, now: float) -> None:
        """One round trip's answers are in: update the baseline and the limit from their average."""
        rtt = self._w_sum / self._w_count
        if self._probe_saved:
            # a probe window: answers to calls sent while (nearly) every task had drained
            self._new_window(now)
            if rtt < self._baseline:
                self._baseline = rtt
            self._end_probe()
            return
        in_use = self._w_used
        used = in_use >= USED_FRACTION * self._limit
        elapsed = now - self._w_start
        served = self._w_answers * rtt / elapsed if elapsed < math.inf else float(in_use)
        self._new_window(now)
        self.windows += 1
        self._rtt = rtt if self._rtt == 0.0 else self._rtt + 0.25 * (rtt - self._rtt)
        baseline = self._baseline
        if baseline == 0.0 or rtt < baseline:
            self._baseline = baseline = rtt
        limit = self._limit
        gradient = self.latency_tolerance * baseline / rtt
        if gradient >= 1.0:
            self._streak_limit = 0.0
            if not used:
                return  # the application sends less than the limit: no news about the service
            if self._slow_start:
                # double, but never past twice what was really in flight, nor twice what the
                # service really served (answers per second x round trip): a client that cannot
                # fill its limit (busy CPU, slow input, retries sleeping in back-off) must not build
                # a burst it then sends at once
                good = min(limit, in_use, served)
                if good < 1.0:
                    good = 1.0
                self._good = good
                self._set(good * 2.0)
            elif self._since_cut < PROBE_WINDOWS and limit >= PROBE_ZONE * self._cut_level:
                self._since_cut += 1
                self._set(limit + self.smoothing)
            else:
                self._set(limit + self.smoothing * math.sqrt(limit))
            return
        # slower than tolerated: the service queues (or got slower for everyone)
        if self._slow_start:
            self._slow_start = False
            self._set(self._slow_start_exit())
            return
        if self._streak_limit == 0.0:
            self._streak_limit, self._streak_rtt = limit, rtt
        elif (limit <= RELEARN_FRACTION * self._streak_limit or limit <= self.min_limit) \
                and rtt >= RELEARN_NO_BETTER * self._streak_rtt:
            # half the calls and no faster: not (only) our queue, the service itself is slower.
            # Re-learn to the edge of tolerance, not to ``rtt``: the limit stops shrinking and
            # grows again only while the round trip does not climb -- and when the cause was a
            # neighbour with a higher baseline, this evens the two out instead of overshooting.
            self._baseline = rtt / self.latency_tolerance
            self._streak_limit = 0.0
            return
        if gradient < MIN_GRADIENT:
            gradient = MIN_GRADIENT
        self._set(limit + self.smoothing * (limit * (gradient - 1.0) + math.sqrt(limit)))

    def __repr__(self) -> str:
        return (f"AdaptiveConcurrency(limit={self._int_limit}, min_limit={self.min_limit}, "
                f"max_limit={self.max_limit}, baseline={self._baseline * 1000:.3g}ms)")
