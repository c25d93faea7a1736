"""Leases from a counter in Redis, for a budget shared by several jobs (``Budget(redis=...)``).

:class:`RedisPot` is the budget's :class:`~aiospark.budget.source.SharedPot` (what the Budget
ships to its tasks; the driver reads ``spent`` from it) and :class:`RedisLeases` a task attempt's
:class:`~aiospark.budget.source.LeaseSource`.

The key ``aiospark:budget:<name>`` holds the units spent (leased and not given back) by every job
that uses the name. One atomic Lua script grants a lease when the job's ``limit`` minus that count
covers it, so jobs sharing the name never start more than the limit between them (each job caps
the shared count at its own limit: give them the same one). Leases are sized as for the driver's
ledger, with ``free / 8`` standing in for the share (Redis does not know how many tasks ask).
The password comes from the URL or ``$REDIS_PASSWORD`` and never shows in reprs or errors.

A script may run twice for one request: a task resends a command whose reply was lost (a
timeout, a reset: up to :data:`ATTEMPTS` tries). So every lease and release carries a request id,
and the script stores its answer under ``<key>:request:<id>`` (for :data:`REQUEST_TTL` seconds):
a second run returns that answer and changes nothing. The hash ``<key>:held`` holds what each
live task attempt leased and has not given back; a release gives back at most that minus what the
task used, so even a replay older than the stored answers cannot hand back spent units. A task
whose calls were billed beyond what it held (a ``BilledCost``) adds that debt to the count at its
release: the count is then the billed total, over the limit by at most the calls in flight's
estimate error (a replay older than the stored answers finds no entry: it changes nothing).

Example::

    pot = RedisPot.of("redis://127.0.0.1:6379/0", name="nightly")
    pot.spent("nightly")                                       # 0.0
    source = RedisLeases("redis://127.0.0.1:6379/0", None, None, key="aiospark:budget:nightly", limit=10_000,
                         task="3.1.0/ab12")
    granted, left = await source.lease(need=1, want=64, used=0)
"""
from __future__ import annotations

import asyncio
import uuid
from typing import Any

from ...budget.source import LeaseSource, SharedPot
from ..secrets import Secret, resolve_secret
from .url import parse_url

__all__ = ["LEASE_SCRIPT", "RELEASE_SCRIPT", "REQUEST_TTL", "RedisLeases", "RedisPot", "budget_key"]

#: KEYS = the spent counter, the held hash, this request's answer. ARGV = limit, need, want, share
#: divisor, task, request TTL. Returns {granted, left} as strings (a Lua number in a reply is
#: truncated to an integer).
LEASE_SCRIPT = """
local seen = redis.call('GET', KEYS[3])
if seen then
  local granted, left = string.match(seen, '^(%S+) (%S+)$')
  return {granted, left}
end
local limit = tonumber(ARGV[1])
local need = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local divisor = tonumber(ARGV[4])
local ttl = tonumber(ARGV[6])
if not limit or not need or not want or not divisor or not ttl or limit < 0 or need < 0 or want < 0 or divisor < 1
    or limit ~= limit or need ~= need or want ~= want or limit == math.huge or need == math.huge then
  return redis.error_reply('aiospark budget: bad arguments')
end
local spent = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local free = limit - spent
if free < 0 then free = 0 end
local size = 0
if need <= free then
  size = math.floor(free / divisor)  -- whole units: no float crumbs when costs are whole
  if want < size then size = want end
  if size < need then size = need end
  if size > free then size = free end
  redis.call('SET', KEYS[1], string.format('%.17g', spent + size))
  redis.call('HINCRBYFLOAT', KEYS[2], ARGV[5], string.format('%.17g', size))
  redis.call('EXPIRE', KEYS[2], ttl * 24 * 7)
end
local answer = {string.format('%.17g', size), string.format('%.17g', free - size)}
redis.call('SET', KEYS[3], answer[1] .. ' ' .. answer[2], 'EX', ttl)
return answer
"""

#: KEYS = the spent counter, the held hash, this request's answer. ARGV = units given back, units
#: the task used (net of estimates given back; beyond what it held: a debt added to the count),
#: task, request TTL. Returns the units given back.
RELEASE_SCRIPT = """
local seen = redis.call('GET', KEYS[3])
if seen then
  return seen
end
local units = tonumber(ARGV[1])
local used = tonumber(ARGV[2])
local ttl = tonumber(ARGV[4])
if not units or not used or not ttl or units < 0 or used < 0 or units ~= units or used ~= used
    or units == math.huge then
  return redis.error_reply('aiospark budget: bad units')
end
local entry = redis.call('HGET', KEYS[2], ARGV[3])
local held = tonumber(entry or '0') or 0
-- calls billed beyond their estimates (a BilledCost): charged to the count; only by a task that
-- holds an entry (a replay the answers forgot finds none, as the entry goes below)
local debt = 0
if entry and used - held > 1e-9 then debt = used - held end
local back = held - used
if units <= back + 1e-9 then back = units end  -- float crumbs: the task summed the same units its own way
if back > held then back = held end
if back < 0 then back = 0 end
local spent = (tonumber(redis.call('GET', KEYS[1]) or '0') or 0) - back + debt
if spent < 0 then spent = 0 end
redis.call('SET', KEYS[1], string.format('%.17g', spent))
redis.call('HDEL', KEYS[2], ARGV[3])
local answer = string.format('%.17g', back)
redis.call('SET', KEYS[3], answer, 'EX', ttl)
return answer
"""

#: seconds a request's answer is kept for its replays (a replay comes within seconds)
REQUEST_TTL = 3600

#: Redis stands in for the ledger's share of ``free / (2 * tasks)`` with ``free / SHARE_DIVISOR``
SHARE_DIVISOR = 8
#: seconds per command; tries per request and the pause between tries
TIMEOUT = 5.0
ATTEMPTS = 3
RETRY_PAUSE = 0.5


def budget_key(name: str) -> str:
    """The Redis key of the budget named ``name``."""
    return f"aiospark:budget:{name}"


class RedisPot(SharedPot):
    """A budget's pot in Redis under :func:`budget_key` (see the module docstring). Holds the URL
    without credentials and the password as a :class:`~aiospark.connectors.secrets.Secret`."""

    def __init__(self, url: str, password: Secret | None, username: str | None, key: str, where: str):
        self.url = url                   # without credentials
        self._password = password
        self._username = username
        self.key = key
        self.where = where
        self.shown = key

    @classmethod
    def of(cls, redis: str, name: str) -> RedisPot:
        """The pot of the budget ``name`` at ``redis`` (``redis://[:password@]host:port/db``; the
        password also from ``$REDIS_PASSWORD``)."""
        url, where, user, password = parse_url(redis)
        password = password or resolve_secret(None, "REDIS_PASSWORD")
        return cls(url, password, user.reveal() if user else None, budget_key(name), where)

    def __repr__(self) -> str:
        return f"RedisPot({self.url!r}, key={self.key!r}, password={'***' if self._password else None})"

    def spent(self, budget: str) -> float:
        import redis as redis_py

        password = self._password
        client = redis_py.Redis.from_url(self.url, password=password.reveal() if password else None,
                                         username=self._username, socket_timeout=5.0, socket_connect_timeout=5.0)
        try:
            value = client.get(self.key)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if password:
                text = text.replace(password.reveal(), "***")
            raise ConnectionError(f"could not read the budget {budget!r} at {self.where}: {text}") from None
        finally:
            client.close()
        return float(value) if value is not None else 0.0

    def source(self, limit: float, task: str) -> RedisLeases:
        return RedisLeases(self.url, self._password, self._username, key=self.key, limit=limit, where=self.where,
                           task=task)


class RedisLeases(LeaseSource):
    """A :class:`~aiospark.budget.source.LeaseSource` over a Redis counter (one connection per task)."""

    def __init__(self, url: str, password: Secret | None, username: str | None, *, key: str, limit: float,
                 where: str = "", task: str | None = None):
        self._url = url                  # without credentials
        self._password = password
        self._username = username
        self.key = key
        self.limit = limit
        self.task = task or uuid.uuid4().hex  # one task attempt: what it holds is kept under this name
        self.where = f"the budget's Redis at {where or url} (key {key!r})"
        self._client: Any = None
        import redis.asyncio as aredis  # here, in the task's thread: a first import inside the loop blocks it
        import redis.exceptions

        self._aredis = aredis
        self._lost = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)

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
            granted, left = await self._run(self._lease, [repr(self.limit), repr(need), repr(want), SHARE_DIVISOR,
                                                          self.task, REQUEST_TTL])
        except Exception as exc:
            raise self._scrubbed(exc) from None
        return float(granted), float(left)

    async def release(self, units: float, used: float, refused: int, refunded: float = 0.0) -> None:
        net = max(0.0, used - refunded)  # what its calls were billed (a BilledCost), else what they started
        try:
            if units > 0 or self._client is not None:  # (a task that leased: its entry in the held hash goes)
                await self._redis()
                await self._run(self._release, [repr(units), repr(net), self.task, REQUEST_TTL])
        except Exception as exc:
            raise self._scrubbed(exc) from None
        finally:
            client, self._client = self._client, None
            if client is not None:
                await client.aclose()

    async def _run(self, script: Any, args: list[Any]) -> Any:
        """Run ``script`` for one request, sent again when its reply is lost: every try carries the
        same request id (the keys: the counter, the held hash, this request's answer), so the
        script acts once."""
        keys = [self.key, f"{self.key}:held", f"{self.key}:request:{uuid.uuid4().hex}"]
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await script(keys=keys, args=args)
            except self._lost:
                if attempt == ATTEMPTS:
                    raise
                await asyncio.sleep(RETRY_PAUSE * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _scrubbed(self, exc: BaseException) -> Exception:
        text = f"{type(exc).__name__}: {exc}"
        if self._password:
            text = text.replace(self._password.reveal(), "***")
        return ConnectionError(text[:500])
