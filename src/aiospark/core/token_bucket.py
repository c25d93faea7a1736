"""The per-task limiter: a cost-weighted token bucket (GCRA with reservations), and the checks of
the numbers that describe a rate limit.

A bucket holds at most ``burst`` units and refills at ``rate`` units per second. A call of cost
``c`` starts as soon as the bucket holds ``min(c, burst)`` units and takes ``c`` from it -- so a
call costing more than the whole bucket still starts (once the bucket is full) and leaves it in
*debt*: later calls wait until the debt is paid back. Nothing ever deadlocks, and over any window
of ``T`` seconds the costs of the calls that start add up to at most
``rate * T + max(burst, largest single cost)``.

The state is a "theoretical arrival time" (TAT, when the bucket will be full again), written as
the start of the current busy period (``_epoch``) plus the units charged since then
(``_taken / rate``), so unit-cost start times are exact multiples of ``1/rate`` with no
accumulated rounding.
"""
from __future__ import annotations

import asyncio
import math
import numbers
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TokenBucket", "check_rate", "check_burst", "check_cost", "check_per", "default_burst"]

Clock = Callable[[], float]
CostFunction = Callable[[Any], float]


def check_rate(rate: Any, what: str = "rate") -> float:
    """``rate`` as a float; it must be a finite number > 0 (calls, or cost units, per ``per`` s)."""
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
        raise TypeError(f"{what} must be a number of calls per second, or of cost units per `per` "
                        f"seconds (e.g. 50, 0.5, or 90_000 with per=60), got {rate!r}")
    value = float(rate)
    if not (value > 0) or math.isinf(value):
        raise ValueError(f"{what} must be a finite number of calls per second (or of cost units per "
                         f"`per` seconds) > 0, got {value!r}")
    return value


def check_per(per: Any) -> float:
    """``per`` (the window ``rate`` is counted over) as a float of seconds > 0."""
    if isinstance(per, bool) or not isinstance(per, numbers.Real):
        raise TypeError(f"per must be a number of seconds (e.g. per=60 for a limit per minute), got {per!r}")
    seconds = float(per)
    if not (seconds > 0) or math.isinf(seconds):
        raise ValueError(f"per must be a finite number of seconds > 0 (e.g. per=60 for a limit per "
                         f"minute), got {seconds!r}")
    return seconds


def default_burst(rate: float) -> int:
    """A tenth of a ``per`` window's units, at least 1: ``max(1, ceil(rate / 10))``."""
    return max(1, math.ceil(rate / 10))


def check_burst(burst: Any, rate: float) -> int:
    """``burst`` as an int >= 1 (``None`` = :func:`default_burst` of ``rate`` per ``per``)."""
    if burst is None:
        return default_burst(rate)
    if isinstance(burst, bool) or not isinstance(burst, numbers.Integral):
        raise TypeError(f"burst must be an int (calls, or cost units, allowed at once), got {burst!r}")
    if burst < 1:
        raise ValueError(f"burst must be >= 1 (calls, or cost units, allowed at once), got {burst}")
    return int(burst)


def check_cost(cost: Any) -> CostFunction | None:
    """``cost`` must be ``None`` or a function of one call's input returning its cost."""
    if cost is None or (callable(cost) and not isinstance(cost, type)):
        return cost
    raise TypeError("cost must be a function of one call's input (a row) returning a number >= 0, "
                    f"e.g. cost=lambda row: len(row['text']) / 4; got {type(cost).__name__}: {cost!r}"[:300])


def _bad_cost(cost: Any) -> ValueError:
    return ValueError(f"a call's cost must be a finite number >= 0, got {cost!r}")


class TokenBucket:
    """Per-task limiter: ``rate`` units per second, bursts of ``burst`` units.

    For one event loop (no locks). ``clock`` is a function returning seconds on the same
    monotonic timeline as the caller's timers; default :func:`time.monotonic`, which is what
    ``asyncio`` loops use for ``loop.time()`` (pass ``clock=loop.time`` to be explicit).
    ``cost`` is the user's cost function of the :class:`~aiospark.core.ratelimit.RateLimit` this
    bucket enforces (the caller computes each call's cost with it), or ``None``.
    """

    __slots__ = ("rate", "burst", "cost", "_clock", "_epoch", "_taken", "_paused_until")

    def __init__(self, rate: float, burst: int | None = None, *, clock: Clock | None = None,
                 cost: CostFunction | None = None):
        self.rate = check_rate(rate)
        self.burst = check_burst(burst, self.rate)
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning seconds, got {type(clock).__name__}")
        self.cost = check_cost(cost)
        self._clock: Clock = clock or time.monotonic
        self._epoch = -math.inf
        self._taken = 0.0
        self._paused_until = -math.inf

    def reserve(self, cost: float = 1.0) -> float:
        """Charge ``cost`` units; return the seconds to wait before starting (``0.0``: start now).

        The units are charged either way: a caller that gets ``d > 0`` must start at ``now + d``
        (not earlier); later reservations are scheduled after it (FIFO). A cost above ``burst``
        starts once the bucket is full and leaves it in debt. O(1), no awaiting.
        """
        if cost != 1.0 and not (0.0 <= cost < math.inf):  # also refuses NaN
            raise _bad_cost(cost)
        now = self._clock()
        if self._paused_until > now:   # nothing starts before the pause ends
            now, wait = self._paused_until, self._paused_until - now
        else:
            wait = 0.0
        rate, taken = self.rate, self._taken
        tat = self._epoch + taken / rate
        if tat <= now:
            # idle long enough for a full bucket: a new busy period starts now
            self._epoch = now
            self._taken = cost
            return wait
        self._taken = taken + cost
        start = tat - (self.burst - (cost if cost < self.burst else self.burst)) / rate
        return start - now + wait if start > now else wait

    def peek(self, cost: float = 1.0) -> float:
        """The delay :meth:`reserve` would return now, without charging anything."""
        now = self._clock()
        wait = self._paused_until - now if self._paused_until > now else 0.0
        now += wait
        tat = self._epoch + self._taken / self.rate
        if tat <= now:
            return wait
        start = tat - (self.burst - min(cost, self.burst)) / self.rate
        return start - now + wait if start > now else wait

    def pause(self, seconds: float) -> None:
        """Start no call for ``seconds`` from now (e.g. a ``Retry-After``); never raises.

        Later reservations start at the end of the pause at the earliest (a longer pause already
        in place stays). Callers already told to wait should check :meth:`paused_for` when their
        wait is over, and reserve again if it is not 0.
        """
        try:
            seconds = float(seconds)
            if seconds > 0.0 and seconds < math.inf:
                until = self._clock() + seconds
                if until > self._paused_until:
                    self._paused_until = until
        except (TypeError, ValueError):  # no number of seconds (a Retry-After that did not parse):
            pass                         # no pause; raising here would hide the caller's own error

    def paused_for(self) -> float:
        """Seconds until the current pause ends (``0.0``: not paused)."""
        left = self._paused_until - self._clock()
        return left if left > 0.0 else 0.0

    async def acquire(self, cost: float = 1.0) -> float:
        """Reserve ``cost`` units and sleep until their start time; returns the delay (``0.0``: not
        limited). A pause that begins while it sleeps makes it reserve again after the pause."""
        total = 0.0
        while True:
            delay = self.reserve(cost)
            if delay > 0.0:
                await asyncio.sleep(delay)
                total += delay
            if not self.paused_for():
                return total

    def __getstate__(self) -> dict[str, Any]:
        clock = self._clock
        return {"rate": self.rate, "burst": self.burst, "cost": self.cost,
                "clock": None if clock is time.monotonic else clock}

    def __setstate__(self, state: dict[str, Any]) -> None:
        TokenBucket.__init__(self, state["rate"], state["burst"], clock=state["clock"], cost=state.get("cost"))

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self.rate!r}, burst={self.burst})"
