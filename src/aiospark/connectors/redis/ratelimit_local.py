"""How one process's callers of a :class:`~aiospark.connectors.redis.RedisRateLimit`
get their start times from the reservations its round trips bring back.

Unit-cost calls share *leased* tokens: a process reserves up to ``lease`` tokens at once -- as
many as callers are waiting, or, when it is busy, about what it will need while those tokens last
(from its recent demand) -- so round trips stay few and an idle process holds nothing back. One
round trip is in flight at a time; callers arriving meanwhile are batched into the next one.
Tokens go to callers first come, first served, by one loop timer for the next token; a caller
cancelled while waiting leaves its token to the next caller.

Every token has a deadline: its place in the global schedule (:class:`.Reservation`). A token is
checked against it at the moment its caller would return from ``acquire()``; past it (a stalled
event loop, a slow round trip) the token is void and the caller, still first in line, takes the
next one. That is what keeps the bound in every window: the bucket refills behind a token that is
not used by its place, so a late token used anyway would add to the next burst (two processes whose
loops stalled at start-up once admitted ``rate + 2 * burst`` calls in one second this way).
Round trips for tokens ask for a ``lead`` of a few round-trip times, so that the first tokens after
an idle period have places far enough ahead to be used in time. Tokens starting before the end
of a pause are dropped too.

Cost-weighted calls cannot share tokens (costs differ): the callers waiting at one moment are
reserved together in one round trip, each for its own cost, and each sleeps until its own start;
one that wakes up inside a pause that began meanwhile reserves again.

Before a call starts, the process must have heard from Redis within ``_FRESH`` seconds (any
round trip tells it the pause); if not, one shared pause check is made first. So a pause set by
another process stops this one's calls within about that time.
"""
from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from .ratelimit_script import Reservation

__all__ = ["LocalCallers", "DEMAND_TAU", "MAX_WEIGHTED_BATCH"]

#: Time constant (seconds) of this process's demand estimate (acquire() calls per second).
DEMAND_TAU = 0.1
#: A token may be handed out this much (seconds) before its start time: loop timers can fire a
#: hair early (clock resolution), and re-arming for a microsecond would only spin.
_EARLY = 1e-6
#: A start time this close to the end of a pause counts as after it: a pause learnt from Redis is
#: placed on the loop's clock a round trip's latency late, and that jitter must not void tokens.
_PAUSE_SLACK = 0.005
#: A caller about to start asks Redis about pauses first (one round trip, shared by the callers
#: starting then) when this process has heard nothing from Redis for this long (seconds): so a
#: stalled event loop that wakes up late does not start calls into another process's pause.
_FRESH = 0.05
#: Most cost-weighted calls reserved in one round trip.
MAX_WEIGHTED_BATCH = 256
#: The lead asked of the schedule for tokens: this many remembered round-trip times, plus
#: _LEAD_MARGIN (seconds) for the caller's wake-up, at most _LEAD_MAX.
_LEAD_RTTS = 2.0
_LEAD_MARGIN = 0.002
_LEAD_MAX = 0.25


class LocalCallers:
    """The local half of ``RedisRateLimit`` (a mixin): it uses the limiter's ``_reserve(costs)``
    round trip and its runtime state (``_loop``, ``_callers``, ``_tokens``, ``_weighted``, ...)."""

    _loop: asyncio.AbstractEventLoop | None
    _conn: Any
    _callers: deque[asyncio.Future]
    _tokens: deque[tuple[float, float, float]]  # (start, deadline, when it arrived)
    _weighted: deque[tuple[asyncio.Future, float]]
    _fetcher: asyncio.Task | None
    _wfetcher: asyncio.Task | None
    _timer: asyncio.TimerHandle | None
    _timer_at: float
    _demand: float
    _demand_at: float
    _paused_until: float
    _replied_at: float
    _pause_check: asyncio.Task | None
    _interval: float
    _source: str
    lease: int
    acquired: int
    tokens_voided: int

    async def open(self) -> None:  # pragma: no cover - defined by the limiter
        raise NotImplementedError

    @property
    def _open_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the limiter is open on (a round trip that outlives ``close()`` fails its callers)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError(f"{self._source} was closed while callers waited")
        return loop

    async def _reserve(self, costs: Sequence[float], lead: float = 0.0) -> Reservation:  # pragma: no cover
        raise NotImplementedError

    async def _acquire_unit(self) -> float:
        """acquire() for a unit cost: a leased token, used by its deadline."""
        if self._conn is None:
            await self.open()
        loop = self._loop
        assert loop is not None
        now = loop.time()
        elapsed = now - self._demand_at
        self._demand = (self._demand * math.exp(-elapsed / DEMAND_TAU) if elapsed > 0.0 else self._demand) + 1.0
        self._demand_at = now
        callers, tokens = self._callers, self._tokens
        if not callers:  # fast path: a token that is due, nobody ahead
            self._drop_void(now)
            if tokens and tokens[0][0] <= now + _EARLY and now - self._replied_at <= _FRESH:
                tokens.popleft()
                self.acquired += 1
                return 0.0
        first = True
        while True:
            caller = loop.create_future()
            if first:
                callers.append(caller)
            else:
                callers.appendleft(caller)  # its token was void: it keeps its place in line
            self._dispatch()
            try:
                start, deadline, known = await caller
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
            first = False
            if loop.time() - self._replied_at > _FRESH:
                await self._check_pause()
                if self._paused_until > start + _PAUSE_SLACK:  # paused elsewhere: this token is void
                    continue
            # the last moment before the caller starts: a token past its place in the schedule
            # would add to a later burst (the bucket refilled behind it), so it is void
            if loop.time() > deadline:
                self.tokens_voided += 1
                continue
            self.acquired += 1
            # what the limit cost this caller: from when it asked, or when its token arrived from
            # Redis if later (the round trip is latency, not limiting), to the token's start time
            waited = start - (known if known > now else now)
            return waited if waited > 0.0 else 0.0

    async def _check_pause(self) -> None:
        """One round trip, shared by the callers that need it, to learn of a pause set elsewhere."""
        check = self._pause_check
        if check is None or check.done():
            check = self._pause_check = self._open_loop.create_task(self._reserve(()))
            check.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved, even if nobody waits
        await asyncio.shield(check)

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
            self._drop_void(now)
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

    def _drop_void(self, now: float) -> None:
        """Drop held tokens that can no longer start: past their deadline (counted in
        ``tokens_voided``), or starting before the end of a pause. Deadlines follow the schedule,
        so looking at the front is enough; the caller checks its own token again anyway."""
        tokens, paused = self._tokens, self._paused_until - _PAUSE_SLACK
        while tokens and (tokens[0][1] < now or tokens[0][0] < paused):
            if tokens[0][1] < now:
                self.tokens_voided += 1
            tokens.popleft()

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    async def _fetch(self) -> None:
        """Reserve tokens while more callers wait than tokens are held, one round trip at a time."""
        callers, tokens = self._callers, self._tokens
        try:
            while len(callers) > len(tokens):
                reservation = await self._reserve([1.0] * self._batch_size(len(callers) - len(tokens)),
                                                  self._lead())
                known = self._open_loop.time()
                tokens.extend((start, deadline, known)
                              for start, deadline in zip(reservation.starts, reservation.deadlines))
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

    def _lead(self) -> float:
        """How far ahead of the server's now the next tokens' places must be (seconds): a few
        round trips, so a token reserved for an idle bucket is not past its deadline on arrival."""
        rtt = getattr(self._conn, "rtt", 0.0)
        lead = _LEAD_RTTS * rtt + _LEAD_MARGIN
        return lead if lead < _LEAD_MAX else _LEAD_MAX

    def _batch_size(self, missing: int) -> int:
        """Tokens to reserve now: the callers still without one, or -- when this process is busy --
        what it is likely to need in the time ``lease`` tokens last at the global rate (at most
        ``lease``). Unused ones go to later callers of this process, or are dropped once stale."""
        elapsed = self._open_loop.time() - self._demand_at
        per_second = self._demand * math.exp(-max(0.0, elapsed) / DEMAND_TAU) / DEMAND_TAU
        expected = math.ceil(per_second * self.lease * self._interval)
        return max(1, min(self.lease, max(missing, expected)))

    async def _acquire_weighted(self, cost: float) -> float:
        """acquire() for a cost other than 1: reserved for this caller alone (batched into one
        round trip with the other callers waiting then); reserved again if a pause began while it
        waited for its start."""
        if self._conn is None:
            await self.open()
        loop = self._loop
        assert loop is not None
        asked, first_known = loop.time(), None
        while True:
            caller = loop.create_future()
            entry = (caller, cost)
            self._weighted.append(entry)
            if self._wfetcher is None:
                self._wfetcher = loop.create_task(self._fetch_weighted())
            try:
                start, known = await caller
            except asyncio.CancelledError:
                try:
                    self._weighted.remove(entry)
                except ValueError:
                    pass  # its round trip is under way: those units are spent
                raise
            if first_known is None:
                first_known = known
            now = loop.time()
            if start > now + _EARLY:
                await asyncio.sleep(start - now)
            if loop.time() - self._replied_at > _FRESH:
                await self._check_pause()
            if self._paused_until <= start + _PAUSE_SLACK:  # no pause began while it waited
                self.acquired += 1
                waited = start - (first_known if first_known > asked else asked)
                return waited if waited > 0.0 else 0.0

    async def _fetch_weighted(self) -> None:
        """Reserve the waiting cost-weighted callers, in order, a batch per round trip."""
        weighted = self._weighted
        batch: list[tuple[asyncio.Future, float]] = []
        try:
            while weighted:
                batch = []
                while weighted and len(batch) < MAX_WEIGHTED_BATCH:
                    entry = weighted.popleft()
                    if not entry[0].done():
                        batch.append(entry)
                if not batch:
                    continue
                reservation = await self._reserve([c for _, c in batch])
                known = self._open_loop.time()
                for (caller, _), start in zip(batch, reservation.starts):
                    if not caller.done():
                        caller.set_result((start, known))
                batch = []
        except BaseException as exc:
            failure = RuntimeError(f"{self._source} was closed") if isinstance(exc, asyncio.CancelledError) else exc
            for caller, _ in [*batch, *weighted]:  # they cannot get a start time now: fail, not hang
                if not caller.done():
                    caller.set_exception(failure)
            weighted.clear()
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self._wfetcher is asyncio.current_task():
                self._wfetcher = None
