"""Rate limits: at most ``rate`` calls -- or cost units -- per ``per`` seconds, with bursts.

Flink's Async I/O has no rate limit (FLINK-28487); aiospark adds one. The pieces:

* :class:`RateLimit` -- the validated, picklable *spec* users pass as ``rate_limit=`` (a plain
  number works too: :meth:`RateLimit.coerce`). It describes a limit; it holds no state.
  ``RateLimit(100)`` is 100 calls per second; ``RateLimit(90_000, per=60, cost=lambda row:
  len(row["text"]) / 4)`` is 90k (estimated) tokens per minute, each call charging its cost.
* :class:`~aiospark.core.token_bucket.TokenBucket` -- the per-task limiter that enforces a
  :class:`RateLimit` on one event loop. ``reserve(cost)`` is O(1), never awaits and starts no
  timer: it charges the units and returns how long the caller must wait before starting.
  Reservations queue up FIFO, so N unit-cost callers that reserve at once get start times spaced
  ``per/rate`` apart.
* :class:`Limiter` / :class:`AsyncLimiter` -- the two shapes a limiter can have. A synchronous
  limiter has ``reserve(cost) -> float``; an asynchronous or shared one (e.g.
  :class:`aiospark.connectors.redis.RedisRateLimit`, one limit for a whole cluster)
  has ``async acquire(cost)``. Both have ``cost`` (the cost function or ``None``) and
  ``pause(seconds)`` (a ``Retry-After``: start nothing for that long). :func:`make_limiter`
  turns whatever the user passed into one of them. The caller computes each call's cost with
  the limiter's ``cost`` (:class:`aiospark.core.call_limits.CallLimits`).

Over any window of ``T`` seconds the calls that start cost at most
``rate / per * T + max(burst, largest single cost)`` in total.

Example::

    bucket = RateLimit(100, burst=10).bucket()          # a fresh per-task limiter
    delay = bucket.reserve()                            # 0.0 while tokens are left
    if delay:
        loop.call_at(loop.time() + delay, start_call)   # scheduled start, no sleeping task
    else:
        start_call()

    await bucket.acquire(cost=3.5)                      # the same, for code that can await
"""
from __future__ import annotations

import numbers
from typing import Any, Protocol, cast, runtime_checkable

from .token_bucket import (
    Clock,
    CostFunction,
    TokenBucket,
    check_burst,
    check_cost,
    check_per,
    check_rate,
    default_burst,
)

__all__ = ["AsyncLimiter", "Limiter", "RateLimit", "TokenBucket", "check_burst", "check_cost",
           "check_per", "check_rate", "cost_name", "default_burst", "make_limiter"]

def cost_name(cost: Any) -> str:
    """How errors name a cost function: its qualified name (``module.func``), else its repr."""
    name = getattr(cost, "__qualname__", None) or getattr(type(cost), "__qualname__", None)
    module = getattr(cost, "__module__", None)
    return f"{module}.{name}" if module and name else repr(cost)[:100]


class RateLimit:
    """At most ``rate`` units per ``per`` seconds, with bursts of at most ``burst`` units.

    ``rate``: a finite number > 0 of units per ``per`` seconds (``RateLimit(0.5)`` = one call
    every two seconds). ``per``: the window in seconds, a finite number > 0 (default 1).
    ``cost``: a function of one call's input (a row) returning the units that call charges, e.g.
    ``lambda row: len(row["text"]) / 4`` for tokens; default ``None``: every call costs 1.
    ``burst``: how many units may start at once after an idle period, an int >= 1; default a tenth
    of a ``per`` window's units, ``max(1, ceil(rate / 10))``. A call that costs more than
    ``burst`` still starts, once the bucket is full, and leaves it in debt (later calls wait).

    A spec only (no state): immutable, hashable, picklable (a ``cost`` lambda pickles with
    cloudpickle, as Spark does), compares by value (``cost`` by identity). Enforce it with
    :meth:`bucket`.
    """

    __slots__ = ("rate", "per", "burst", "cost")
    rate: float
    per: float
    burst: int
    cost: CostFunction | None

    def __init__(self, rate: float, *, per: float = 1.0, burst: int | None = None,
                 cost: CostFunction | None = None):
        rate = check_rate(rate)
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "per", check_per(per))
        object.__setattr__(self, "burst", check_burst(burst, rate))
        object.__setattr__(self, "cost", check_cost(cost))

    @property
    def per_second(self) -> float:
        """Units per second: ``rate / per``."""
        return self.rate / self.per

    @classmethod
    def coerce(cls, value: Any) -> RateLimit | AnyLimiter | None:
        """What the entry points do with ``rate_limit=``.

        A number -> ``RateLimit(number)``; a :class:`RateLimit` -> itself; ``None`` -> ``None``;
        an object that already is a limiter (has ``reserve()`` or ``acquire()``, e.g. a
        ``RedisRateLimit`` shared by the whole cluster) -> itself. Anything else raises
        ``TypeError`` saying what to pass.
        """
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return cls(float(value))
        if not isinstance(value, type) and (callable(getattr(value, "reserve", None))
                                            or callable(getattr(value, "acquire", None))):
            return cast("AnyLimiter", value)  # duck-typed: it has reserve() or acquire()
        raise TypeError(
            "rate_limit must be a number of calls per second (e.g. rate_limit=50), "
            "aiospark.RateLimit(rate, per=..., burst=..., cost=...), a shared limiter such as "
            f"RedisRateLimit(...), or None; got {type(value).__name__}: {value!r}"[:300])

    def bucket(self, *, clock: Clock | None = None) -> TokenBucket:
        """A fresh :class:`TokenBucket` enforcing this limit (one per task / event loop)."""
        return TokenBucket(self.rate / self.per, self.burst, clock=clock, cost=self.cost)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("RateLimit is immutable; create a new one")

    def __reduce__(self) -> Any:
        return (_rebuild, (self.rate, self.per, self.burst, self.cost))

    def __eq__(self, other: Any) -> bool:
        if type(other) is not RateLimit:
            return NotImplemented
        return (self.rate == other.rate and self.per == other.per and self.burst == other.burst
                and self.cost is other.cost)

    def __hash__(self) -> int:
        return hash((RateLimit, self.rate, self.per, self.burst, id(self.cost)))

    def __repr__(self) -> str:
        def num(x: float) -> Any:
            return int(x) if x.is_integer() else x

        text = f"RateLimit({num(self.rate)!r}"
        if self.per != 1.0:
            text += f", per={num(self.per)!r}"
        text += f", burst={self.burst}"
        if self.cost is not None:
            text += f", cost={cost_name(self.cost)}"
        return text + ")"


def _rebuild(rate: float, per: float, burst: int, cost: CostFunction | None) -> RateLimit:
    return RateLimit(rate, per=per, burst=burst, cost=cost)


@runtime_checkable
class Limiter(Protocol):
    """A synchronous limiter, driven by the operator without any awaiting.

    ``reserve(cost=1.0)`` charges ``cost`` units and returns the seconds the caller must wait
    before starting the call (``0.0`` = now). It must be O(1) and must not block; the operator
    schedules the delayed start itself. :class:`TokenBucket` is one. Limiters made by
    :func:`make_limiter` also have ``cost`` (the cost function, or ``None``), ``pause(seconds)``
    (start nothing for that long; never raises) and ``paused_for()`` (seconds of pause left: a
    caller whose wait is over reserves again while it is not 0); user-made limiters may lack them.

    Having a ``reserve`` attribute is what marks a limiter as synchronous (it wins over
    ``acquire``), so an asynchronous limiter must not define one.
    """

    def reserve(self) -> float: ...


@runtime_checkable
class AsyncLimiter(Protocol):
    """An asynchronous limiter, e.g. one shared by many processes through a server.

    ``await acquire(cost=1.0)`` returns when the caller may start one call of that cost (it honours
    pauses itself). It may return the seconds the limit made the caller wait (a truthy value = "this call was rate limited", for metrics) or
    ``None``. It raises when the limiter cannot
    decide (e.g. its server is unreachable); the call then fails like any other attempt. Such a
    limiter may also have ``async open()`` / ``async close()``, which the owner of the event loop
    calls around its use. How it plugs into the operator: the attempt becomes
    ``await limiter.acquire(); return await function(value)``, run in the attempt's task, so the
    operator's timeout and cancellation cover the wait too. ``cost`` and ``pause(seconds)`` are as
    for :class:`Limiter`.
    """

    async def acquire(self) -> float | None: ...


AnyLimiter = Limiter | AsyncLimiter


def make_limiter(value: Any, *, clock: Clock | None = None) -> AnyLimiter | None:
    """The limiter an operator (one task, one loop) uses for ``rate_limit=value``.

    ``None`` -> ``None``; a number or :class:`RateLimit` -> a fresh :class:`TokenBucket`; a
    limiter object (``reserve()`` or ``acquire()``) -> itself. Anything else: ``TypeError``.
    """
    spec = RateLimit.coerce(value)
    if isinstance(spec, RateLimit):
        return spec.bucket(clock=clock)
    return spec
