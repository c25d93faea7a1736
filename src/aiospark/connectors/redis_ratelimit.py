"""A call-rate limit shared by every task, executor and process, kept in Redis.

``RedisRateLimit(500)`` means *500 calls per second in total*, however many Spark tasks run. All
users of one ``key`` share a global GCRA schedule (a token bucket written as a "theoretical
arrival time") that an atomic Lua script advances on the Redis server, using the server's
``TIME`` -- never the clients' clocks.

The script hands out *reservations*: a process asks for ``n`` tokens and gets their start times
in the global schedule (now, or spaced ``1/rate`` apart in the future). So waiting callers sleep
exactly until their start time -- no polling, no retry storms -- and they are served first come,
first served across the cluster. To keep round trips low, a process reserves up to ``lease``
tokens at once (default ``max(1, rate // 50)``): as many as callers are waiting, or -- when this
process is busy -- about what it will need while those tokens last (from its recent demand), so an
idle process holds nothing back. One round trip is in flight per process at a time; callers
arriving meanwhile are batched into the next one. Inside a process, tokens go to callers first
come, first served, by one loop timer for the next token; a caller cancelled while waiting (e.g.
by a timeout) leaves its token to the next caller. Reserved tokens not used within
``max(0.1 s, burst/rate)`` of their start time (a stalled event loop) are dropped.

Because every token has one start time in the global schedule, the number of calls that start in
any window of ``T`` seconds is at most ``rate * T + burst`` -- plus at most another ``burst`` when
event loops that stalled (a busy CPU) catch up on tokens that were already theirs.

Example::

    limit = RedisRateLimit(500, key="aiospark:ratelimit:geo-api", url="redis://redis:6379/0")
    await limit.open()
    await limit.acquire()        # returns when this caller may start one call
    ...
    await limit.close()

The object is a picklable spec: it connects in :meth:`open` (or on the first :meth:`acquire`),
on the event loop that uses it. All users of a key must use the same ``rate`` and ``burst``.
"""
from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any, Deque, NamedTuple, Optional, Tuple
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ..core.ratelimit import check_burst, check_rate
from ._common import ConnectorError, Secret, check_positive, resolve_secret

__all__ = ["RedisRateLimit", "Reservation", "GCRA_SCRIPT"]

#: Time constant (seconds) of this process's demand estimate (acquire() calls per second).
DEMAND_TAU = 0.1
#: Connections per RedisRateLimit (acquire() uses one at a time).
MAX_CONNECTIONS = 8
#: A token may be handed out this much (seconds) before its start time: loop timers can fire a
#: hair early (clock resolution), and re-arming for a microsecond would only spin.
_EARLY = 1e-6

#: KEYS[1] = schedule key, ARGV = interval (µs), burst, tokens wanted.
#: Returns {first-token offset from now (µs, <= 0: already due), slot start (µs), server now (µs)}
#: as strings (Lua numbers would be truncated to integers in the reply).
GCRA_SCRIPT = """
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if not interval or interval <= 0 or not burst or burst < 1 or not n or n < 1 then
  return redis.error_reply('aiospark rate limit: bad arguments')
end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then tat = now end
local new_tat = tat + n * interval
local ttl = math.ceil((new_tat - now) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.17g', new_tat), 'PX', string.format('%d', ttl))
local first = tat - (burst - 1) * interval - now
return {string.format('%.17g', first), string.format('%.17g', tat), string.format('%.17g', now)}
"""


class Reservation(NamedTuple):
    """``n`` tokens reserved in one round trip.

    ``starts``: when each token may be used, on the reserving loop's clock (``loop.time()``).
    ``slot``: the part of the global schedule they occupy, ``(start, end)`` in server microseconds;
    slots of different reservations never overlap (the script is atomic).
    """
    starts: Tuple[float, ...]
    slot: Tuple[float, float]


def _parse_url(url: Any) -> Tuple[str, str, Optional[Secret], Optional[Secret]]:
    if not isinstance(url, str):
        raise ValueError(f"url must be a string like 'redis://127.0.0.1:6379/0', got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"url must start with redis://, rediss:// or unix://, got scheme {parts.scheme!r}")
    user = Secret(unquote(parts.username)) if parts.username else None
    pw = Secret(unquote(parts.password)) if parts.password else None
    query = parse_qsl(parts.query, keep_blank_values=True)
    for k, v in query:
        if k == "password":
            pw = Secret(v)
    query = [(k, v) for k, v in query if k != "password"]
    clean = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1], query=urlencode(query)))
    if parts.scheme == "unix":
        where = parts.path or "?"
    else:
        try:
            port = parts.port or 6379
        except ValueError:
            raise ValueError("url has an invalid port") from None
        where = f"{parts.hostname or '127.0.0.1'}:{port}/{parts.path.strip('/') or '0'}"
    return clean, where, user, pw


class RedisRateLimit:
    """At most ``rate`` calls per second in total across all processes sharing ``key``.

    Args:
        rate: calls per second for everyone together (a finite number > 0).
        burst: calls that may start at once after an idle period (int >= 1; default
            ``max(1, ceil(rate / 10))``).
        key: the Redis key holding the schedule; default ``"aiospark:ratelimit:<name>"``.
        url: ``redis://[user:pass@]host:port/db``, ``rediss://...`` or ``unix:///path?db=0``.
        password / password_env / username: credentials (``password=`` wins, then the URL, then
            ``$REDIS_PASSWORD``); never shown in ``repr`` or errors.
        name: names the limit (default key and messages).
        lease: most tokens reserved per round trip (int >= 1; default ``max(1, rate // 50)``).
        timeout: connect / round-trip timeout in seconds.

    ``await acquire()`` is the interface (an :class:`aiospark.core.ratelimit.AsyncLimiter`;
    it has no synchronous ``reserve()``).
    Counters: ``acquired``, ``round_trips``, ``tokens_reserved``.
    """

    def __init__(self, rate: float, burst: Optional[int] = None, *, key: Optional[str] = None,
                 url: str = "redis://127.0.0.1:6379/0", password: Optional[str] = None,
                 password_env: Optional[str] = "REDIS_PASSWORD", username: Optional[str] = None,
                 name: str = "default", lease: Optional[int] = None, timeout: float = 5.0) -> None:
        self.rate = check_rate(rate)
        self.burst = check_burst(burst, self.rate)
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        if key is None:
            key = f"aiospark:ratelimit:{name}"
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string (the Redis key of the schedule), got {key!r}")
        self.key = key
        if lease is None:
            lease = max(1, int(self.rate // 50))
        if isinstance(lease, bool) or not isinstance(lease, int) or lease < 1:
            raise ValueError(f"lease must be an int >= 1 (tokens reserved per round trip), got {lease!r}")
        self.lease = lease
        check_positive("timeout", timeout)
        self.timeout = float(timeout)
        self._url, self._where, url_user, url_pw = _parse_url(url)
        self._password_env = password_env
        self._password = resolve_secret(password, None) or url_pw or resolve_secret(None, password_env)
        self._username = username if username is not None else (url_user.reveal() if url_user else None)
        self._interval_us = 1e6 / self.rate
        self._interval = 1.0 / self.rate
        # a token may be used late by as much as the bucket refills in (burst / rate): what a
        # stalled event loop catches up afterwards is then at most another burst, all processes together
        self._stale = max(0.1, self.burst / self.rate, self._interval)
        self._source = f"RedisRateLimit({self._where} key={self.key!r})"
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._client: Any = None
        self._script: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._opening: Optional[asyncio.Future] = None
        self._fetcher: Optional[asyncio.Task] = None
        self._callers: Deque[asyncio.Future] = deque()  # waiting acquire() calls, FIFO
        # reserved tokens in order: (start time, when it arrived from Redis), both loop.time()
        self._tokens: Deque[Tuple[float, float]] = deque()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = 0.0
        self._demand = 0.0      # decaying count of acquire() calls (time constant DEMAND_TAU)
        self._demand_at = 0.0
        self.acquired = self.round_trips = self.tokens_reserved = 0

    # ------------------------------------------------------------------ spec behaviour
    _RUNTIME = ("_client", "_script", "_loop", "_opening", "_fetcher", "_callers", "_tokens",
                "_timer", "_timer_at", "_demand", "_demand_at", "acquired", "round_trips",
                "tokens_reserved")

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._RUNTIME}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    def __repr__(self) -> str:
        rate = int(self.rate) if self.rate.is_integer() else self.rate
        return (f"RedisRateLimit({rate!r}, burst={self.burst}, key={self.key!r}, url={self._url!r}, "
                f"password={'***' if self._password else None})")

    __str__ = __repr__

    # ------------------------------------------------------------------ lifecycle
    async def open(self) -> None:
        """Connect (and PING, and load the script) on the running loop; idempotent."""
        loop = asyncio.get_running_loop()
        if self._client is not None:
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
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        if self._password is None and self._password_env:
            self._password = resolve_secret(None, self._password_env)
        # acquire() keeps one round trip in flight; direct reserve_batch() callers queue for a connection
        pool = aredis.BlockingConnectionPool.from_url(
            self._url, max_connections=MAX_CONNECTIONS, timeout=self.timeout,
            password=self._password.reveal() if self._password else None, username=self._username,
            decode_responses=True, socket_timeout=self.timeout, socket_connect_timeout=self.timeout,
            retry=Retry(NoBackoff(), 1))
        client = aredis.Redis(connection_pool=pool)
        try:
            await client.ping()
            script = client.register_script(GCRA_SCRIPT)
            await client.script_load(GCRA_SCRIPT)
        except Exception as exc:
            await client.aclose()
            await pool.disconnect()
            raise self._error(exc, "PING / SCRIPT LOAD") from None
        self._client, self._script, self._loop = client, script, loop

    async def close(self) -> None:
        """Disconnect; callers still waiting for a reservation get an error. Idempotent."""
        fetcher, self._fetcher = self._fetcher, None
        if fetcher is not None and not fetcher.done():
            fetcher.cancel()
            await asyncio.wait([fetcher])
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        closed = RuntimeError(f"{self._source} was closed")
        while self._callers:
            caller = self._callers.popleft()
            if not caller.done():
                caller.set_exception(closed)
        self._tokens.clear()
        client, self._client, self._script, self._loop = self._client, None, None, None
        if client is not None:
            await client.aclose()
            await client.connection_pool.disconnect()

    async def __aenter__(self) -> "RedisRateLimit":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ limiting
    async def acquire(self) -> float:
        """Return when the caller may start one call; returns the seconds the rate limit made it
        wait (``0.0`` when a token was free; the round trip to Redis is not counted).

        Opens the connection first if needed. Raises :class:`ConnectorError` when Redis cannot
        be reached (the caller's call fails like any other attempt). Callers of one process are
        served first come, first served; a caller cancelled while waiting leaves its token to the
        next one, so cancellations (e.g. timeouts) cost no capacity.
        """
        if self._client is None:
            await self.open()
        loop = self._loop
        assert loop is not None
        now = loop.time()
        elapsed = now - self._demand_at
        self._demand = (self._demand * math.exp(-elapsed / DEMAND_TAU) if elapsed > 0.0 else self._demand) + 1.0
        self._demand_at = now
        callers, tokens = self._callers, self._tokens
        if not callers:  # fast path: a token that is due, nobody ahead
            while tokens and tokens[0][0] < now - self._stale:
                tokens.popleft()
            if tokens and tokens[0][0] <= now + _EARLY:
                tokens.popleft()
                self.acquired += 1
                return 0.0
        caller = loop.create_future()
        callers.append(caller)
        self._dispatch()
        try:
            start, known = await caller
        except asyncio.CancelledError:
            if caller.done() and not caller.cancelled() and caller.exception() is None:
                tokens.appendleft(caller.result())  # handed over just as we were cancelled
            else:
                try:
                    callers.remove(caller)
                except ValueError:
                    pass
            self._dispatch()
            raise
        self.acquired += 1
        # what the limit cost this caller: from when it asked, or when its token arrived from
        # Redis if later (the round trip is latency, not limiting), to the token's start time
        waited = start - (known if known > now else now)
        return waited if waited > 0.0 else 0.0

    def _dispatch(self) -> None:
        """Hand due tokens to waiting callers in order; arm one timer for the next token; start a
        round trip when more callers wait than tokens are held."""
        loop = self._loop
        if loop is None:
            return
        callers, tokens = self._callers, self._tokens
        now = loop.time()
        while callers:
            if callers[0].done():  # cancelled
                callers.popleft()
                continue
            while tokens and tokens[0][0] < now - self._stale:
                tokens.popleft()
            if not tokens:
                break
            start = tokens[0][0]
            if start <= now + _EARLY:
                callers.popleft().set_result(tokens.popleft())
                continue
            if self._timer is None or self._timer_at != start:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = loop.call_at(start, self._on_timer)
                self._timer_at = start
            break
        if len(callers) > len(tokens) and self._fetcher is None:
            self._fetcher = loop.create_task(self._fetch())

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    async def _fetch(self) -> None:
        """Reserve tokens while more callers wait than tokens are held, one round trip at a time."""
        callers, tokens = self._callers, self._tokens
        try:
            while len(callers) > len(tokens):
                reservation = await self.reserve_batch(self._batch_size(len(callers) - len(tokens)))
                known = self._loop.time()  # type: ignore[union-attr]
                tokens.extend((start, known) for start in reservation.starts)
                self._dispatch()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            while callers:  # they cannot get a token now: fail them rather than hang
                caller = callers.popleft()
                if not caller.done():
                    caller.set_exception(exc)
        finally:
            if self._fetcher is asyncio.current_task():
                self._fetcher = None

    def _batch_size(self, missing: int) -> int:
        """Tokens to reserve now: the callers still without one, or -- when this process is busy --
        what it is likely to need in the time ``lease`` tokens last at the global rate (at most
        ``lease``). Unused ones go to later callers of this process, or are dropped once stale."""
        elapsed = self._loop.time() - self._demand_at  # type: ignore[union-attr]
        per_second = self._demand * math.exp(-max(0.0, elapsed) / DEMAND_TAU) / DEMAND_TAU
        expected = math.ceil(per_second * self.lease * self._interval)
        return max(1, min(self.lease, max(missing, expected)))

    async def reserve_batch(self, n: int = 1) -> Reservation:
        """Reserve ``n`` tokens in one round trip (the building block of :meth:`acquire`).

        The caller must not start the ``i``-th call before ``starts[i]`` (``loop.time()``).
        (Deliberately not called ``reserve``: that name marks synchronous limiters, see
        :class:`aiospark.core.ratelimit.Limiter`.)
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        if self._client is None:
            await self.open()
        try:
            first, tat, now = await self._script(keys=[self.key], args=[repr(self._interval_us), self.burst, n])
        except Exception as exc:
            raise self._error(exc, "EVALSHA") from None
        t = self._loop.time()  # type: ignore[union-attr]
        first_s, interval = float(first) / 1e6, self._interval
        starts = tuple(t + d if d > 0.0 else t for d in (first_s + j * interval for j in range(n)))
        self.round_trips += 1
        self.tokens_reserved += n
        tat_f = float(tat)
        return Reservation(starts, (tat_f, tat_f + n * self._interval_us))

    def _error(self, exc: BaseException, what: str) -> ConnectorError:
        from .redis import redis_error

        return redis_error(exc, what, password=self._password, password_env=self._password_env,
                           where=self._where, timeout=self.timeout, source=self._source)
