"""Call-rate limits: at most ``rate`` calls per second, with bursts of up to ``burst`` calls.

Flink's Async I/O has no rate limit (FLINK-28487); aiospark adds one. Three pieces:

* :class:`RateLimit` -- the validated, picklable *spec* users pass as ``rate_limit=`` (a plain
  number works too: :meth:`RateLimit.coerce`). It describes a limit; it holds no state.
* :class:`TokenBucket` -- the per-task limiter that enforces a :class:`RateLimit` on one event
  loop. :meth:`TokenBucket.reserve` is O(1), never awaits and starts no timer: it takes one token
  and returns how long the caller must wait before starting. Reservations queue up FIFO, so N
  callers that reserve at once get start times spaced ``1/rate`` apart.
* :class:`Limiter` / :class:`AsyncLimiter` -- the two shapes a limiter can have. A synchronous
  limiter has ``reserve() -> float``; an asynchronous or shared one (e.g.
  :class:`aiospark.connectors.redis_ratelimit.RedisRateLimit`, one limit for a whole cluster)
  has ``async acquire()``. :func:`make_limiter` turns whatever the user passed into one of them.

The bucket is a GCRA (generic cell rate algorithm), i.e. a token bucket of ``burst`` tokens
refilled at ``rate`` per second, written as a "theoretical arrival time". It is exact over long
windows: in any window of ``T`` seconds at most ``rate * T + burst`` calls start.

Example::

    bucket = RateLimit(100, burst=10).bucket()          # a fresh per-task limiter
    delay = bucket.reserve()                            # 0.0 while tokens are left
    if delay:
        loop.call_at(loop.time() + delay, start_call)   # scheduled start, no sleeping task
    else:
        start_call()

    await bucket.acquire()                              # the same, for code that can await
"""
from __future__ import annotations

import asyncio
import math
import numbers
import time
from typing import Any, Callable, Optional, Protocol, Union, runtime_checkable

__all__ = ["AsyncLimiter", "Limiter", "RateLimit", "TokenBucket", "make_limiter"]

Clock = Callable[[], float]


def check_rate(rate: Any, what: str = "rate") -> float:
    """``rate`` as a float of calls per second; it must be a finite number > 0."""
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
        raise TypeError(f"{what} must be a number of calls per second (e.g. 50 or 0.5), got {rate!r}")
    rate = float(rate)
    if not (rate > 0) or math.isinf(rate):
        raise ValueError(f"{what} must be a finite number of calls per second > 0, got {rate!r}")
    return rate


def default_burst(rate: float) -> int:
    """One tenth of a second's worth of calls, at least 1: ``max(1, ceil(rate / 10))``."""
    return max(1, math.ceil(rate / 10))


def check_burst(burst: Any, rate: float) -> int:
    """``burst`` as an int >= 1 (``None`` = :func:`default_burst`)."""
    if burst is None:
        return default_burst(rate)
    if isinstance(burst, bool) or not isinstance(burst, numbers.Integral):
        raise TypeError(f"burst must be an int (calls allowed at once), got {burst!r}")
    if burst < 1:
        raise ValueError(f"burst must be >= 1 (calls allowed at once), got {burst}")
    return int(burst)


class RateLimit:
    """At most ``rate`` calls per second, with bursts of at most ``burst`` calls.

    ``rate``: calls per second, a finite number > 0 (``0.5`` = one call every two seconds).
    ``burst``: how many calls may start at once after an idle period, an int >= 1; default
    ``max(1, ceil(rate / 10))``. A spec only (no state): immutable, hashable, picklable, compares
    by value. Enforce it with :meth:`bucket`.
    """

    __slots__ = ("rate", "burst")

    def __init__(self, rate: float, burst: Optional[int] = None):
        rate = check_rate(rate)
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "burst", check_burst(burst, rate))

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """What the entry points do with ``rate_limit=``.

        A number -> ``RateLimit(number)``; a :class:`RateLimit` -> itself; ``None`` -> ``None``;
        an object that already is a limiter (has ``reserve()`` or ``acquire()``, e.g. a
        ``RedisRateLimit`` shared by the whole cluster) -> itself. Anything else raises
        ``TypeError`` saying what to pass.
        """
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return cls(value)
        if not isinstance(value, type) and (callable(getattr(value, "reserve", None))
                                            or callable(getattr(value, "acquire", None))):
            return value
        raise TypeError(
            "rate_limit must be a number of calls per second (e.g. rate_limit=50), "
            "aiospark.RateLimit(rate, burst=...), a shared limiter such as RedisRateLimit(...), "
            f"or None; got {type(value).__name__}: {value!r}"[:300])

    def bucket(self, *, clock: Optional[Clock] = None) -> "TokenBucket":
        """A fresh :class:`TokenBucket` enforcing this limit (one per task / event loop)."""
        return TokenBucket(self.rate, self.burst, clock=clock)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("RateLimit is immutable; create a new one")

    def __reduce__(self) -> Any:
        return (RateLimit, (self.rate, self.burst))

    def __eq__(self, other: Any) -> bool:
        if type(other) is not RateLimit:
            return NotImplemented
        return self.rate == other.rate and self.burst == other.burst

    def __hash__(self) -> int:
        return hash((RateLimit, self.rate, self.burst))

    def __repr__(self) -> str:
        rate = int(self.rate) if self.rate.is_integer() else self.rate
        return f"RateLimit({rate!r}, burst={self.burst})"


class TokenBucket:
    """Per-task limiter: ``rate`` calls per second, bursts of ``burst`` (GCRA with reservations).

    For one event loop (no locks). ``clock`` is a function returning seconds on the same
    monotonic timeline as the caller's timers; default :func:`time.monotonic`, which is what
    ``asyncio`` loops use for ``loop.time()`` (pass ``clock=loop.time`` to be explicit).

    State is the start time of the current busy period (``_epoch``) and the number of tokens
    taken since then (``_taken``); the theoretical arrival time is ``epoch + taken / rate``, so
    start times are exact multiples of ``1/rate`` with no accumulated rounding.
    """

    __slots__ = ("rate", "burst", "_clock", "_epoch", "_taken", "_slack")

    def __init__(self, rate: float, burst: Optional[int] = None, *, clock: Optional[Clock] = None):
        self.rate = check_rate(rate)
        self.burst = check_burst(burst, self.rate)
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning seconds, got {type(clock).__name__}")
        self._clock: Clock = clock or time.monotonic
        self._slack = self.burst - 1   # tokens that may be taken ahead of the steady schedule
        self._epoch = -math.inf
        self._taken = 0

    def reserve(self) -> float:
        """Take one token; return the seconds to wait before starting (``0.0``: start now).

        The token is taken either way: a caller that gets ``d > 0`` must start at ``now + d``
        (not earlier); later reservations are scheduled after it (FIFO). O(1), no awaiting.
        """
        now = self._clock()
        taken = self._taken
        if self._epoch + taken / self.rate <= now:
            # idle long enough for a full bucket: a new busy period starts now
            self._epoch = now
            self._taken = 1
            return 0.0
        self._taken = taken + 1
        start = self._epoch + (taken - self._slack) / self.rate
        return start - now if start > now else 0.0

    def peek(self) -> float:
        """The delay :meth:`reserve` would return now, without taking a token."""
        now = self._clock()
        if self._epoch + self._taken / self.rate <= now:
            return 0.0
        start = self._epoch + (self._taken - self._slack) / self.rate
        return start - now if start > now else 0.0

    async def acquire(self) -> float:
        """Reserve a token and sleep until its start time; returns the delay (``0.0``: not limited)."""
        delay = self.reserve()
        if delay > 0.0:
            await asyncio.sleep(delay)
        return delay

    def __getstate__(self) -> dict:
        clock = self._clock
        return {"rate": self.rate, "burst": self.burst,
                "clock": None if clock is time.monotonic else clock}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["rate"], state["burst"], clock=state["clock"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self.rate!r}, burst={self.burst})"


@runtime_checkable
class Limiter(Protocol):
    """A synchronous limiter, driven by the operator without any awaiting.

    ``reserve()`` takes one permit and returns the seconds the caller must wait before starting
    the call (``0.0`` = now). It must be O(1) and must not block; the operator schedules the
    delayed start itself (``loop.call_at``). :class:`TokenBucket` is one.

    Having a ``reserve`` attribute is what marks a limiter as synchronous (it wins over
    ``acquire``), so an asynchronous limiter must not define one.
    """

    def reserve(self) -> float: ...


@runtime_checkable
class AsyncLimiter(Protocol):
    """An asynchronous limiter, e.g. one shared by many processes through a server.

    ``await acquire()`` returns when the caller may start one call. It may return the seconds the
    limit made the caller wait (a truthy value = "this call was rate limited", for metrics) or
    ``None``. It raises when the limiter cannot
    decide (e.g. its server is unreachable); the call then fails like any other attempt. Such a
    limiter may also have ``async open()`` / ``async close()``, which the owner of the event loop
    calls around its use. How it plugs into the operator: the attempt becomes
    ``await limiter.acquire(); return await function(value)``, run in the attempt's task, so the
    operator's timeout and cancellation cover the wait too.
    """

    async def acquire(self) -> Optional[float]: ...


AnyLimiter = Union[Limiter, AsyncLimiter]


def make_limiter(value: Any, *, clock: Optional[Clock] = None) -> Optional[AnyLimiter]:
    """The limiter an operator (one task, one loop) uses for ``rate_limit=value``.

    ``None`` -> ``None``; a number or :class:`RateLimit` -> a fresh :class:`TokenBucket`; a
    limiter object (``reserve()`` or ``acquire()``) -> itself. Anything else: ``TypeError``.
    """
    spec = RateLimit.coerce(value)
    if isinstance(spec, RateLimit):
        return spec.bucket(clock=clock)
    return spec
