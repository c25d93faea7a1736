"""Leases from a counter in Redis, for a budget shared by several jobs (``Budget(redis=...)``).

The key ``aiospark:budget:<name>`` holds the units spent (leased and not given back) by every job
that uses the name. One atomic Lua script grants a lease when the job's ``limit`` minus that count
covers it, so jobs sharing the name never start more than the limit between them (each job caps
the shared count at its own limit: give them the same one). Leases are sized as for the driver's
ledger, with ``free / 8`` standing in for the share (Redis does not know how many tasks ask).
The password comes from the URL or ``$REDIS_PASSWORD`` and never shows in reprs or errors.

Example::

    source = RedisLeases("redis://127.0.0.1:6379/0", None, None, key="aiospark:budget:nightly", limit=10_000)
    granted, left = await source.lease(need=1, want=64, used=0)
"""
from __future__ import annotations

from typing import Any

__all__ = ["LEASE_SCRIPT", "RELEASE_SCRIPT", "RedisLeases", "budget_key"]

#: KEYS[1] = the spent counter. ARGV = limit, need, want, share divisor. Returns {granted, left} as
#: strings (a Lua number in a reply is truncated to an integer).
LEASE_SCRIPT = """
local limit = tonumber(ARGV[1])
local need = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local divisor = tonumber(ARGV[4])
if not limit or not need or not want or not divisor or limit < 0 or need < 0 or want < 0 or divisor < 1
    or limit ~= limit or need ~= need or want ~= want or limit == math.huge or need == math.huge then
  return redis.error_reply('aiospark budget: bad arguments')
end
local spent = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local free = limit - spent
if free < 0 then free = 0 end
if need > free then
  return {'0', string.format('%.17g', free)}
end
local size = math.floor(free / divisor)  -- whole units: no float crumbs when costs are whole
if want < size then size = want end
if size < need then size = need end
if size > free then size = free end
redis.call('SET', KEYS[1], string.format('%.17g', spent + size))
return {string.format('%.17g', size), string.format('%.17g', free - size)}
"""

#: KEYS[1] = the spent counter. ARGV = units given back. Returns the new count.
RELEASE_SCRIPT = """
local units = tonumber(ARGV[1])
if not units or units < 0 or units ~= units or units == math.huge then
  return redis.error_reply('aiospark budget: bad units')
end
local spent = (tonumber(redis.call('GET', KEYS[1]) or '0') or 0) - units
if spent < 0 then spent = 0 end
redis.call('SET', KEYS[1], string.format('%.17g', spent))
return string.format('%.17g', spent)
"""

#: Redis stands in for the ledger's share of ``free / (2 * tasks)`` with ``free / SHARE_DIVISOR``
SHARE_DIVISOR = 8
TIMEOUT = 5.0


def budget_key(name: str) -> str:
    return f"aiospark:budget:{name}"


class RedisLeases:
    """A :class:`~aiospark.budget.gate.LeaseSource` over a Redis counter (one connection per task)."""

    def __init__(self, url: str, password: Any | None, username: str | None, *, key: str, limit: float,
                 where: str = ""):
        self._url = url                  # without credentials
        self._password = password        # a connectors.secrets.Secret, or None
        self._username = username
        self.key = key
        self.limit = limit
        self.where = f"the budget's Redis at {where or url} (key {key!r})"
        self._client: Any = None
        import redis.asyncio as aredis  # here, in the task's thread: a first import inside the loop blocks it

        self._aredis = aredis

    def __repr__(self) -> str:
        return f"RedisLeases({self._url!r}, key={self.key!r}, password={'***' if self._password else None})"

    async def _redis(self) -> Any:
        if self._client is None:
            self._client = self._aredis.Redis.from_url(
                self._url, password=self._password.reveal() if self._password else None, username=self._username,
                decode_responses=True, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
            self._lease = self._client.register_script(LEASE_SCRIPT)
            self._release = self._client.register_script(RELEASE_SCRIPT)
        return self._client

    async def lease(self, need: float, want: float, used: float) -> tuple[float, float]:
        await self._redis()
        try:
            granted, left = await self._lease(keys=[self.key], args=[repr(self.limit), repr(need), repr(want),
                                                                    SHARE_DIVISOR])
        except Exception as exc:
            raise self._scrubbed(exc) from None
        return float(granted), float(left)

    async def release(self, units: float, used: float, refused: int) -> None:
        try:
            if units > 0:
                await self._redis()
                await self._release(keys=[self.key], args=[repr(units)])
        except Exception as exc:
            raise self._scrubbed(exc) from None
        finally:
            client, self._client = self._client, None
            if client is not None:
                await client.aclose()

    def _scrubbed(self, exc: BaseException) -> Exception:
        text = f"{type(exc).__name__}: {exc}"
        if self._password:
            text = text.replace(self._password.reveal(), "***")
        return ConnectionError(text[:500])
