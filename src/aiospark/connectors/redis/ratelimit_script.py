"""The server side of :class:`~aiospark.connectors.redis.RedisRateLimit`: the Lua script
that keeps one global, cost-weighted GCRA schedule (and the limit's pause) in Redis, and the
connection that runs it.

One atomic script call reserves a list of costs in schedule order and returns, for each, its
start time as an offset from the Redis server's ``TIME`` (never the clients' clocks). The
schedule key holds the theoretical arrival time (TAT, server microseconds); ``<key>:paused_until``
holds the end of the current pause (a ``Retry-After``), which no reservation starts before. A call
may ask for no costs at all, only to set a pause.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["GCRA_SCRIPT", "Reservation", "ScheduleConnection"]

#: Connections per RedisRateLimit (acquire() keeps at most two round trips in flight).
MAX_CONNECTIONS = 8
#: Per round trip, the remembered round-trip time decays by this factor (a slow one is kept a while).
_RTT_DECAY = 0.9

#: KEYS[1] = schedule key, KEYS[2] = pause key.
#: ARGV = interval per unit (µs), burst (units), pause (µs from now, 0 = none), lead (µs), then one
#: cost per call. A call costing c starts once the bucket holds min(c, burst) units (a cost above
#: burst leaves the bucket in debt), and never before the end of the pause. ``lead``: the first
#: call's place in the schedule is at least that far after now (an idle bucket skips ahead), so
#: the first calls after an idle period keep a deadline the caller can meet (see
#: :meth:`ScheduleConnection.reserve`); skipping places only ever lowers the rate. Returns, as
#: strings (Lua numbers would be truncated to integers in the reply): {server now, pause left
#: (µs, <= 0: none), slot start, slot end (µs), then each call's start offset from now (µs, <= 0:
#: already due)}.
GCRA_SCRIPT = """
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local pause = tonumber(ARGV[3])
local lead = tonumber(ARGV[4])
if not interval or interval <= 0 or not burst or burst < 1 or not pause or pause < 0
    or not lead or lead < 0 or lead == math.huge then
  return redis.error_reply('aiospark rate limit: bad arguments')
end
for i = 5, #ARGV do
  local c = tonumber(ARGV[i])
  if not c or c < 0 or c ~= c or c == math.huge then
    return redis.error_reply('aiospark rate limit: bad cost')
  end
end
local paused = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if pause > 0 and now + pause > paused then
  paused = now + pause
  redis.call('SET', KEYS[2], string.format('%.17g', paused), 'PX', string.format('%d', math.ceil(pause / 1000) + 1000))
end
local base = now
if paused > now then base = paused end
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < base then tat = base end
if #ARGV >= 5 and tat < base + lead then tat = base + lead end
local out = {string.format('%.17g', now), string.format('%.17g', paused - now), string.format('%.17g', tat), ''}
for i = 5, #ARGV do
  local c = tonumber(ARGV[i])
  local need = c
  if need > burst then need = burst end
  local start = tat - (burst - need) * interval
  if start < base then start = base end
  tat = tat + c * interval
  out[#out + 1] = string.format('%.17g', start - now)
end
out[4] = string.format('%.17g', tat)
if #ARGV >= 5 then
  local ttl = math.ceil((tat - now) / 1000) + 1000
  redis.call('SET', KEYS[1], string.format('%.17g', tat), 'PX', string.format('%d', ttl))
end
return out
"""


class Reservation(NamedTuple):
    """Calls reserved in one round trip.

    ``starts``: when each call may start, on the reserving loop's clock (``loop.time()``).
    ``slot``: the part of the global schedule they occupy, ``(start, end)`` in server microseconds;
    slots of different reservations never overlap (the script is atomic).
    ``paused_until``: the end of the limit's pause on the loop's clock (``-inf``: not paused).
    ``deadlines``: the latest time each call may start and still count within the bound
    (``rate * T + burst`` in any window of ``T`` seconds), on the same clock: its place in the
    schedule (plus half a unit's interval). A call not started by then must not start on this
    reservation: the bucket has refilled behind it, so starting it late would add to a later burst.
    """
    starts: tuple[float, ...]
    slot: tuple[float, float]
    paused_until: float = -math.inf
    deadlines: tuple[float, ...] = ()


class ScheduleConnection:
    """A connection pool to one Redis server with the script loaded, for one event loop.

    :meth:`connect` and :meth:`reserve` raise redis-py's own exceptions; the limiter turns them
    into :class:`~aiospark.connectors.ConnectorError`.
    """

    def __init__(self, client: Any, script: Any, loop: Any, rtt: float = 0.0) -> None:
        self.client, self.script, self.loop = client, script, loop
        #: a slowly decaying maximum of the round-trip times seen (seconds), for the ``lead``
        self.rtt = rtt

    @classmethod
    async def connect(cls, url: str, *, password: str | None, username: str | None,
                      timeout: float, loop: Any) -> ScheduleConnection:
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        pool = aredis.BlockingConnectionPool.from_url(
            url, max_connections=MAX_CONNECTIONS, timeout=timeout, password=password,
            username=username, decode_responses=True, socket_timeout=timeout,
            socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 1))
        client = aredis.Redis(connection_pool=pool)
        try:
            await client.ping()
            script = client.register_script(GCRA_SCRIPT)
            await client.script_load(GCRA_SCRIPT)
            sent = loop.time()
            await client.ping()
            rtt = loop.time() - sent
        except BaseException:
            await client.aclose()
            await pool.disconnect()
            raise
        return cls(client, script, loop, rtt)

    async def reserve(self, keys: Sequence[str], interval_us: float, burst: int, pause_us: float,
                      costs: Sequence[float], lead_us: float = 0.0) -> Reservation:
        """Reserve ``costs`` in order (and extend the pause to ``pause_us`` from now, if longer),
        the first no earlier in the schedule than ``lead_us`` after the server's now.

        Server times become loop times in the safe direction for each bound: a start is placed
        by the time the reply arrived (the server's now was earlier, so the call never starts
        early) and a deadline by the time the request was sent (the server's now was later, so it
        is never late), whatever the offset between the two clocks."""
        sent = self.loop.time()
        reply = await self.script(keys=list(keys), args=[repr(interval_us), burst, repr(pause_us),
                                                         repr(float(lead_us)),
                                                         *(repr(float(c)) for c in costs)])
        t = self.loop.time()
        rtt = t - sent
        self.rtt = rtt if rtt > self.rtt * _RTT_DECAY else self.rtt * _RTT_DECAY
        now_us, paused = float(reply[0]), float(reply[1]) / 1e6
        starts = tuple(t + d if d > 0.0 else t for d in (float(x) / 1e6 for x in reply[4:]))
        # a call's deadline is its place in the schedule (the TAT before it): started by then,
        # every window of T seconds holds at most rate * T + burst units (the GCRA bound); half
        # an interval more keeps a place that is due at once usable and adds under one unit
        place, grace, deadlines = float(reply[2]), interval_us / 2.0, []
        for c in costs:
            deadlines.append(sent + (place + grace - now_us) / 1e6)
            place += float(c) * interval_us
        return Reservation(starts, (float(reply[2]), float(reply[3])),
                           t + paused if paused > 0.0 else -math.inf, tuple(deadlines))

    async def close(self) -> None:
        await self.client.aclose()
        await self.client.connection_pool.disconnect()
