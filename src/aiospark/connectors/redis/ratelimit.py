"""A rate limit shared by every task, executor and process, kept in Redis.

``RedisRateLimit(500)`` means *500 calls per second in total*, however many Spark tasks run;
``RedisRateLimit(90_000, per=60, cost=lambda row: len(row["text"]) / 4)`` means 90k (estimated)
tokens per minute in total, each call charging its cost. All users of one ``key`` share a global
GCRA schedule (a token bucket written as a "theoretical arrival time") that an atomic Lua script
(:mod:`.ratelimit_script`) advances on the Redis server, using the server's ``TIME`` --
never the clients' clocks.

The script hands out *reservations*: start times in the global schedule (now, or spaced by their
costs in the future). So waiting callers sleep exactly until their start time -- no polling, no
retry storms -- and they are served first come, first served across the cluster.

Unit-cost calls (no ``cost`` function): to keep round trips low, a process reserves up to
``lease`` tokens at once (default ``max(1, units per second // 50)``): as many as callers are
waiting, or -- when this process is busy -- about what it will need while those tokens last, so
an idle process holds nothing back. One round trip is in flight per process at a time; callers
arriving meanwhile are batched into the next one. Tokens go to callers first come, first served,
by one loop timer for the next token; a caller cancelled while waiting leaves its token to the
next caller. A token must be used by its deadline -- its place in the global schedule -- or it is
void and its caller takes the next one (see :mod:`.ratelimit_local`).

Cost-weighted calls (``acquire(cost)`` with a cost other than 1): costs differ, so nothing is
leased; the callers waiting at one moment are reserved together in one round trip, each for its
exact cost, and each sleeps until its own start time. A cost above ``burst`` starts once the
bucket is full and leaves it in debt (later calls wait); it never deadlocks.

Pauses: :meth:`RedisRateLimit.pause` (a ``Retry-After`` seen by one task) stops this process at
once and writes ``<key>:paused_until`` (server time; a longer pause already there stays) in the
background; every reservation made by any process until then starts after the pause, and every
round trip tells its process about the pause, which then drops the tokens it holds for earlier.
A call whose start time was handed out before the pause reached its process may still start.

Because every reservation has one place in the global schedule, and a unit-cost call starts
between its start time and its deadline or not at all, the unit-cost calls that start in any
window of ``T`` seconds number at most ``rate / per * T + burst`` (within half a call: exactly,
whenever ``rate / per * T`` is a whole number), however event loops stall. Cost-weighted calls
add up to at most ``rate / per * T + max(burst, largest cost)`` while loops keep time; one whose
loop stalled past its start still starts (a deadline of zero width would starve a cost above
``burst``).

Example::

    limit = RedisRateLimit(500, key="aiospark:ratelimit:geo-api", url="redis://redis:6379/0")
    await limit.open()
    await limit.acquire()        # returns when this caller may start one call
    ...
    await limit.close()

The object is a picklable spec: it connects in :meth:`open` (or on the first :meth:`acquire`),
on the event loop that uses it. All users of a key must use the same ``rate``, ``per`` and
``burst``.
"""
from __future__ import annotations

import asyncio
import logging
import math
import numbers
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ...core.ratelimit import check_burst, check_cost, check_per, check_rate
from ..checks import check_positive
from ..errors import ConnectorError
from ..secrets import resolve_secret
from .ratelimit_local import LocalCallers
from .ratelimit_script import GCRA_SCRIPT, Reservation, ScheduleConnection
from .url import parse_url

_log = logging.getLogger(__name__)

__all__ = ["RedisRateLimit", "Reservation", "GCRA_SCRIPT"]

class RedisRateLimit(LocalCallers):
    """At most ``rate`` calls (or cost units) per ``per`` seconds in total across all processes
    sharing ``key``.

    Args:
        rate: calls, or cost units, per ``per`` seconds for everyone together (finite, > 0).
        per: the window in seconds (default 1; ``per=60``: ``rate`` is per minute).
        burst: units that may start at once after an idle period (int >= 1; default a tenth of
            a ``per`` window's units, ``max(1, ceil(rate / 10))``).
        cost: a function of one call's input returning its cost in units (default ``None``: 1).
        key: the Redis key holding the schedule; default ``"aiospark:ratelimit:<name>"``.
        url: ``redis://[user:pass@]host:port/db``, ``rediss://...`` or ``unix:///path?db=0``.
        password / password_env / username: credentials (``password=`` wins, then the URL, then
            ``$REDIS_PASSWORD``); never shown in ``repr`` or errors.
        name: names the limit (default key and messages).
        lease: most unit-cost tokens reserved per round trip (int >= 1; default
            ``max(1, units per second // 50)``).
        timeout: connect / round-trip timeout in seconds.

    ``await acquire(cost=1.0)`` and ``pause(seconds)`` are the interface (an
    :class:`aiospark.core.ratelimit.AsyncLimiter`; it has no synchronous ``reserve()``).
    Counters: ``acquired``, ``round_trips`` (reservations), ``tokens_reserved``,
    ``tokens_voided`` (tokens past their deadline, e.g. after a stalled loop), ``pause_checks``
    (round trips that reserve nothing: pause writes, and pause checks of a process that heard
    nothing from Redis for 50 ms before starting a call).
    """

    __module__ = "aiospark.connectors.redis"  # its public home (reprs, pickles)

    def __init__(self, rate: float, *, per: float = 1.0, burst: int | None = None,
                 cost: Callable[[Any], float] | None = None, key: str | None = None,
                 url: str = "redis://127.0.0.1:6379/0", password: str | None = None,
                 password_env: str | None = "REDIS_PASSWORD", username: str | None = None,
                 name: str = "default", lease: int | None = None, timeout: float = 5.0) -> None:
        self.rate = check_rate(rate)
        self.per = check_per(per)
        self.burst = check_burst(burst, self.rate)
        self.cost = check_cost(cost)
        units_per_second = self.rate / self.per
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        if key is None:
            key = f"aiospark:ratelimit:{name}"
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string (the Redis key of the schedule), got {key!r}")
        self.key = key
        self.pause_key = f"{key}:paused_until"
        if lease is None:
            lease = max(1, int(units_per_second // 50))
        if isinstance(lease, bool) or not isinstance(lease, int) or lease < 1:
            raise ValueError(f"lease must be an int >= 1 (tokens reserved per round trip), got {lease!r}")
        self.lease = lease
        check_positive("timeout", timeout)
        self.timeout = float(timeout)
        self._url, self._where, url_user, url_pw = parse_url(url)
        self._password_env = password_env
        self._password = resolve_secret(password, None) or url_pw or resolve_secret(None, password_env)
        self._username = username if username is not None else (url_user.reveal() if url_user else None)
        self._interval_us = 1e6 / units_per_second
        self._interval = 1.0 / units_per_second
        self._source = f"RedisRateLimit({self._where} key={self.key!r})"
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: ScheduleConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Future | None = None
        self._fetcher: asyncio.Task | None = None
        self._callers: deque[asyncio.Future] = deque()  # waiting acquire() calls, FIFO
        # reserved tokens in order: (start time, deadline, when it arrived from Redis), loop.time()
        self._tokens: deque[tuple[float, float, float]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._demand = 0.0      # decaying count of acquire() calls (time constant DEMAND_TAU)
        self._demand_at = 0.0
        self._weighted: deque[tuple[asyncio.Future, float]] = deque()  # cost-weighted callers, FIFO
        self._wfetcher: asyncio.Task | None = None
        self._paused_until = -math.inf  # end of the pause, on the loop's clock (time.monotonic)
        # the end of the last pause() here: passed on by every round trip while it lasts. A pause
        # learnt from Redis is not passed back (re-anchoring it on every round trip would creep)
        self._own_pause_until = -math.inf
        self._replied_at = -math.inf   # when the last round trip's reply came (loop.time())
        self._pause_check: asyncio.Task | None = None
        self.pause_checks = 0
        self._pause_writer: asyncio.Task | None = None
        self.acquired = self.round_trips = self.tokens_reserved = self.tokens_voided = 0

    # ------------------------------------------------------------------ spec behaviour
    _RUNTIME = ("_conn", "_loop", "_opening", "_fetcher", "_callers", "_tokens",
                "_timer", "_timer_at", "_demand", "_demand_at", "_weighted", "_wfetcher",
                "_paused_until", "_own_pause_until", "_pause_writer", "_replied_at", "_pause_check",
                "pause_checks", "acquired", "round_trips", "tokens_reserved", "tokens_voided")

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._RUNTIME}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    def __repr__(self) -> str:
        rate = int(self.rate) if self.rate.is_integer() else self.rate
        per = "" if self.per == 1.0 else f"per={int(self.per) if self.per.is_integer() else self.per!r}, "
        cost = "" if self.cost is None else f"cost={getattr(self.cost, '__qualname__', 'cost')}, "
        return (f"RedisRateLimit({rate!r}, {per}burst={self.burst}, {cost}key={self.key!r}, "
                f"url={self._url!r}, password={'***' if self._password else None})")

    __str__ = __repr__

    # ------------------------------------------------------------------ lifecycle
    async def open(self) -> None:
        """Connect (and PING, and load the script) on the running loop; idempotent."""
        loop = asyncio.get_running_loop()
        if self._conn is not None:
            if self._loop is not loop:
                raise RuntimeError(f"{self._source} is open on another event loop; close() it there "
                                   "first or use a copy (e.g. pickle.loads(pickle.dumps(limit)))")
            return
        if self._opening is not None:
            await asyncio.shield(self._opening)
            return
        self._opening = opening = loop.create_future()
        try:
            await self._connect(loop)
            opening.set_result(None)
        except asyncio.CancelledError:
            opening.cancel()
            raise
        except BaseException as exc:
            opening.set_exception(exc)
            opening.exception()  # retrieved: no "never retrieved" warning if nobody waits
            raise
        finally:
            self._opening = None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._password is None and self._password_env:
            self._password = resolve_secret(None, self._password_env)
        try:
            conn = await ScheduleConnection.connect(
                self._url, password=self._password.reveal() if self._password else None,
                username=self._username, timeout=self.timeout, loop=loop)
        except Exception as exc:
            raise self._error(exc, "PING / SCRIPT LOAD") from None
        self._conn, self._loop = conn, loop

    async def close(self) -> None:
        """Disconnect; callers still waiting for a reservation get an error. Idempotent."""
        for name in ("_fetcher", "_wfetcher", "_pause_writer", "_pause_check"):
            task = getattr(self, name)
            setattr(self, name, None)
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait([task])
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        closed = RuntimeError(f"{self._source} was closed")
        for caller in [*self._callers, *(c for c, _ in self._weighted)]:
            if not caller.done():
                caller.set_exception(closed)
        self._callers.clear()
        self._weighted.clear()
        self._tokens.clear()
        conn, self._conn, self._loop = self._conn, None, None
        if conn is not None:
            await conn.close()

    async def __aenter__(self) -> RedisRateLimit:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ limiting
    async def acquire(self, cost: float = 1.0) -> float:
        """Return when the caller may start one call costing ``cost`` units; returns the seconds
        the rate limit made it wait (``0.0`` when it could start at once; the round trip to Redis
        is not counted).

        Opens the connection first if needed. Raises :class:`ConnectorError` when Redis cannot
        be reached (the caller's call fails like any other attempt). Callers of one process are
        served first come, first served; a unit-cost caller cancelled while waiting leaves its
        token to the next one, so cancellations (e.g. timeouts) cost no capacity. Nothing starts
        while the limit is paused (:meth:`pause`).
        """
        if cost != 1.0:
            if isinstance(cost, bool) or not isinstance(cost, numbers.Real) or not (0.0 <= cost < math.inf):
                raise ValueError(f"{self._source}: a call's cost must be a finite number >= 0, got {cost!r}")
            return await self._acquire_weighted(float(cost))
        return await self._acquire_unit()

    async def reserve_batch(self, n: int = 1) -> Reservation:
        """Reserve ``n`` unit-cost tokens in one round trip (the building block of :meth:`acquire`).

        The caller must not start the ``i``-th call before ``starts[i]`` (``loop.time()``), nor
        after ``deadlines[i]`` (the bound then needs it not started at all).
        (Deliberately not called ``reserve``: that name marks synchronous limiters, see
        :class:`aiospark.core.ratelimit.Limiter`.)
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        return await self._reserve([1.0] * n)

    async def _reserve(self, costs: Sequence[float], lead: float = 0.0) -> Reservation:
        """One round trip: reserve ``costs`` in order (the first at least ``lead`` seconds ahead
        in the schedule), passing on this process's pause."""
        if self._conn is None:
            await self.open()
        conn, loop = self._conn, self._loop
        assert conn is not None and loop is not None
        pause = self._own_pause_until - loop.time()
        try:
            reservation = await conn.reserve((self.key, self.pause_key), self._interval_us, self.burst,
                                             pause * 1e6 if pause > 0.0 else 0.0, costs, lead * 1e6)
        except Exception as exc:
            raise self._error(exc, "EVALSHA") from None
        self._replied_at = loop.time()
        if costs:
            self.round_trips += 1
            self.tokens_reserved += len(costs)
        else:
            self.pause_checks += 1
        if reservation.paused_until > self._paused_until:
            self._paused_until = reservation.paused_until  # paused by another process
        return reservation

    # ------------------------------------------------------------------ pauses
    def pause(self, seconds: float) -> None:
        """Start no call through this limit, anywhere in the cluster, for ``seconds`` from now
        (e.g. a ``Retry-After``). Synchronous and never raises: this process stops at once, and
        the pause is written to Redis in the background (a longer pause already there stays);
        other processes learn of it on their next round trip."""
        try:
            seconds = float(seconds)
            if not (0.0 < seconds < math.inf):
                return
            loop = self._loop
            until = (loop.time() if loop is not None else time.monotonic()) + seconds
            if until <= self._own_pause_until:
                return
            self._own_pause_until = until
            if until > self._paused_until:
                self._paused_until = until
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop to write it from: the next round trip carries it
            if (loop is None or running is loop) and self._pause_writer is None:
                self._pause_writer = running.create_task(self._write_pause())
        except Exception:  # a pause must never break the caller's error handling
            _log.debug("pause(%r) of %s failed", seconds, self._source, exc_info=True)

    def paused_for(self) -> float:
        """Seconds until the pause this process knows of ends (``0.0``: not paused)."""
        left = self._paused_until - (self._loop.time() if self._loop is not None else time.monotonic())
        return left if left > 0.0 else 0.0

    async def _write_pause(self) -> None:
        try:
            while True:
                written = self._own_pause_until
                await self._reserve(())
                if self._own_pause_until <= written:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _log.warning("could not write the pause of %s to Redis (this process still pauses): %s",
                         self._source, exc)
        finally:
            if self._pause_writer is asyncio.current_task():
                self._pause_writer = None

    def _error(self, exc: BaseException, what: str) -> ConnectorError:
        from .lookup import redis_error

        return redis_error(exc, what, password=self._password, password_env=self._password_env,
                           where=self._where, timeout=self.timeout, source=self._source)
