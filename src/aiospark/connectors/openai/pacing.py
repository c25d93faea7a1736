"""Pacing by the endpoint's own limits: OpenAI's ``x-ratelimit-*`` answer headers.

Every answer of OpenAI (and of proxies that copy it: LiteLLM, Azure, vLLM behind a gateway) says,
for requests and for tokens, the ``limit``, what is ``remaining`` and when the budget is full again
(``reset``, a duration: ``"6m0s"``, ``"1.5s"``, ``"20ms"``, ``"1h2m3.5s"`` or plain seconds).
A :class:`Pacer` spreads what remains over the time until the budget is full again. With a
``limit``, the budget refills at ``rate = (limit - remaining) / reset``; its level now is
``min(limit, remaining + rate * elapsed) - sent`` (``sent``: what this worker sent after the
request whose answer is held, not counted in it yet), and the gap before a request of ``units``
(1 request, or its estimated tokens) is ``units * (limit - level) / (level * rate)``: the level
spread over the time until full. Below ``units``, the wait is until they are refilled. Without a
``limit`` the remaining is spread over the time left until the reset.

Why this needs no coordination between workers: the provider's counters are shared by all of
them, so each worker reads the others' spending in ``remaining``. With ``W`` workers, each
spending ``level * rate / (limit - level)``, the total equals the refill rate when ``level =
limit / (W + 1)``: the workers settle there, at the provider's rate, with that much kept in
reserve, whatever ``W``.

Before any answer with these headers nothing is known, and nothing is held: requests go as they
come (a slow model must not make the others wait for its first answer, which may take longer
than their row timeout). A server that never sends the headers (most self-hosted servers) leaves
the worker unpaced for good. A header that does not parse is ignored (as if absent).

Nothing stalls: with nothing left by the last reading, no refill rate known and its reset past,
one request probes and the others wait for its answer; a request estimated above the advertised
token ``limit`` fails at once with :class:`RequestTooLarge` (the endpoint would refuse it), before
it queues; a pause (a 429's ``Retry-After``) is at most :data:`MAX_RETRY_AFTER`.

Waits are ``asyncio`` waits (never ``time.sleep``); one waiter at a time holds the pacing turn
(a FIFO ``asyncio.Lock``), the others queue behind it.

Example::

    pacer = Pacer()
    ticket = await pacer.admit(cost=120)        # waits for this request's turn
    try:
        answer = await transport.post(path, body, on_headers=lambda h: pacer.update(ticket, h))
    finally:
        pacer.finished(ticket)
"""
from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConnectorError

__all__ = ["MAX_RETRY_AFTER", "Pacer", "RequestTooLarge", "Ticket", "parse_duration", "read_limits"]

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
#: the longest reset believed (a day): a larger one is a malformed header, not a budget
_MAX_RESET = 86400.0
DIMENSIONS = ("requests", "tokens")
#: the longest wait a ``Retry-After`` is believed for (seconds): ``1e400`` or ``inf`` is a broken
#: header, not a reason to hold a worker forever; a row's own timeout ends it sooner anyway
MAX_RETRY_AFTER = 600.0


class RequestTooLarge(ConnectorError):
    """A request whose token estimate is above the endpoint's advertised token limit: the
    endpoint would refuse it however long it waited (not retryable)."""

    __module__ = "aiospark.connectors.openai"


def parse_duration(value: Any) -> float | None:
    """Seconds in an ``x-ratelimit-reset-*`` value (Go-style ``"1h2m3.5s"``, ``"20ms"``, or plain
    seconds ``"1.5"``); ``None`` for anything else (negative, empty, garbage, over a day).

    Example: ``parse_duration("6m0s") == 360.0``; ``parse_duration("soon") is None``
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(text):
            if match.start() != pos:
                return None
            seconds += float(match.group(1)) * _UNIT[match.group(2)]
            pos = match.end()
        if pos != len(text) or pos == 0:
            return None
    if not 0 <= seconds <= _MAX_RESET:  # also refuses nan and inf
        return None
    return seconds


def _count(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        n = float(value.strip())
    except ValueError:
        return None
    return n if 0 <= n < math.inf else None


def read_limits(headers: Mapping[str, str]) -> dict[str, tuple[float | None, float, float]]:
    """``{"requests"|"tokens": (limit or None, remaining, reset seconds)}`` from an answer's
    headers; a dimension whose ``remaining`` or ``reset`` is missing or malformed, or whose
    ``remaining`` exceeds its ``limit``, is left out.

    Example: ``read_limits({"x-ratelimit-remaining-requests": "9", "x-ratelimit-reset-requests":
    "6s"}) == {"requests": (None, 9.0, 6.0)}``
    """
    found: dict[str, tuple[float | None, float, float]] = {}
    for dim in DIMENSIONS:
        remaining = _count(headers.get(f"x-ratelimit-remaining-{dim}"))
        reset = parse_duration(headers.get(f"x-ratelimit-reset-{dim}"))
        if remaining is None or reset is None:
            continue
        limit = _count(headers.get(f"x-ratelimit-limit-{dim}"))
        if limit is not None and (limit <= 0 or remaining > limit):
            continue  # inconsistent: trust neither number
        found[dim] = (limit, remaining, reset)
    return found


class Ticket:
    """One admitted request: what this worker had sent when it went (to count what came after)."""

    __slots__ = ("sent", "tokens", "answered")

    def __init__(self, sent: int, tokens: float) -> None:
        self.sent, self.tokens, self.answered = sent, tokens, False


class _Held:
    """One dimension's reading from the freshest answer: what remained, until when, seen when."""

    __slots__ = ("at", "level", "level_at", "limit", "remaining", "reset", "sent")

    def __init__(self, limit: float | None, remaining: float, reset: float, at: float, sent: float,
                 level: float) -> None:
        self.limit, self.remaining, self.reset, self.at, self.sent = limit, remaining, reset, at, sent
        # the budget's level as this worker models it: refilled at the reading's rate, less
        # each unit it sends (a send after a long refill takes from a full budget, not a capped one)
        self.level, self.level_at = level, at

    def rate(self) -> float | None:
        """Units per second the budget refills at (known with a limit and a reset), else None."""
        if self.limit is not None and self.limit > self.remaining and self.reset > 0:
            return (self.limit - self.remaining) / self.reset
        return None

    def level_now(self, now: float) -> float:
        rate = self.rate()
        assert rate is not None and self.limit is not None
        return min(self.limit, self.level + rate * max(0.0, now - self.level_at))


class Pacer:
    """One worker's pacing by the ``x-ratelimit-*`` headers of the answers it gets.

    ``await admit(cost)`` before a request (``cost``: its estimated tokens) returns a
    :class:`Ticket`; ``update(ticket, headers)`` with each answer's headers (success or error);
    ``finished(ticket)`` when the request is over, answered or not; ``pause(seconds)`` after a
    429's ``Retry-After``. ``clock`` (seconds, monotonic) is for tests.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, source: str = "") -> None:
        self._clock = clock
        self.source = source  # names the function in RequestTooLarge
        self._sent = 0
        self._tokens = 0.0
        self._held: dict[str, _Held] = {}
        self._held_sent = -1  # the ticket whose answer is held: fresher answers only replace it
        self._last_send = -math.inf
        self._pause_until = -math.inf
        self._probe: Ticket | None = None
        self._changed: asyncio.Future | None = None
        self._lock: asyncio.Lock | None = None
        self.waits = 0  # requests that waited for their turn (for stats and tests)

    @property
    def paced(self) -> bool:
        """Whether an answer with the headers has been seen (pacing is in force)."""
        return bool(self._held)

    def delay(self, cost: float = 0.0) -> float:
        """Seconds until a request of ``cost`` tokens may go (0: now; ``inf``: after the probe's
        answer). :class:`RequestTooLarge` if ``cost`` is above the advertised token limit."""
        wait, probe = self._gap(cost)
        return math.inf if probe and self._probe is not None else wait

    def _gap(self, cost: float) -> tuple[float, bool]:
        """``(seconds to wait, whether the request must go as a probe)``."""
        now = self._clock()
        wait, probe = self._pause_until - now, False
        for dim, held in self._held.items():
            units = 1.0 if dim == "requests" else float(cost)
            if units <= 0:
                continue
            if held.limit is not None and units > held.limit:
                if dim == "tokens":
                    # it would wait for a budget that never holds it, and hold the turn meanwhile
                    raise RequestTooLarge(
                        f"the request's estimated {units:g} tokens are more than the endpoint's advertised "
                        f"limit of {held.limit:g} tokens (x-ratelimit-limit-tokens), which it would refuse: "
                        "lower max_tokens or shorten the input", source=self.source)
                units = held.limit  # a limit below one request: one at a time when full
            used = (self._sent if dim == "requests" else self._tokens) - held.sent
            gap = self._wait(held, units, used, now)
            if gap is None:
                probe = True  # nothing left that we know of, its reset past: one request finds out
            else:
                wait = max(wait, gap)
        return max(0.0, wait), probe

    def _wait(self, held: _Held, units: float, used: float, now: float) -> float | None:
        """One dimension's wait: ``used`` units went after the answered request; None when only
        a fresh answer can tell (nothing left and the reset past, with no refill rate known)."""
        elapsed = now - held.at
        limit, remaining, reset = held.limit, held.remaining, held.reset
        rate = held.rate()
        if rate is not None and limit is not None:
            # a budget refilled continuously (OpenAI's): `reset` is the time until full, so it
            # refills at `rate`; its level now is spread over the time it needs to be full
            # again -- or, below one request's units, waited for
            level = held.level_now(now)
            if level < units:
                return (units - level) / rate
            if level >= limit:
                return 0.0
            return self._last_send + units * (limit - level) / (level * rate) - now
        # no refill rate known (no limit, or full at the reading): what remained, spread over
        # the time left until the reset; past the reset, a full budget again
        left = reset - elapsed
        level = (remaining if left > 0 or limit is None else limit) - used
        if level < units:
            # nothing left that we know of: until the reset, then one request probes
            return left if left > 0 else None
        return self._last_send + units * left / level - now if left > 0 else 0.0

    async def admit(self, cost: float = 0.0) -> Ticket:
        """Wait for this request's turn; the returned ticket goes to ``update``/``finished``.
        :class:`RequestTooLarge` at once (no wait, no turn held) for a request above the
        advertised token limit."""
        if not self._held and self._pause_until <= self._clock():
            return self._send(cost)  # unpaced (no headers seen): no lock, no wait
        self._gap(cost)  # too large: fails here, before it queues for the turn
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # FIFO: one waiter holds the turn, the others queue behind it
            waited = False
            while True:
                wait, probe = self._gap(cost)
                if probe and self._probe is not None:
                    wait = math.inf  # one probe at a time: the others wait for its answer
                if wait <= 0:
                    break
                waited = True
                if self._changed is None or self._changed.done():
                    self._changed = asyncio.get_running_loop().create_future()
                # woken early by a fresher answer (or the probe's end), else by the timeout
                await asyncio.wait([self._changed], timeout=None if math.isinf(wait) else wait)
            self.waits += waited
            ticket = self._send(cost)
            if probe:
                self._probe = ticket
            return ticket

    def _send(self, cost: float) -> Ticket:
        now = self._clock()
        for dim, held in self._held.items():
            if held.rate() is not None:
                held.level = held.level_now(now) - (1.0 if dim == "requests" else max(0.0, float(cost)))
                held.level_at = now
        self._sent += 1
        self._tokens += max(0.0, float(cost))
        self._last_send = now
        return Ticket(self._sent, self._tokens)

    def update(self, ticket: Ticket, headers: Mapping[str, str]) -> None:
        """An answer (any status) to ``ticket``'s request arrived with these headers."""
        ticket.answered = True
        limits = read_limits(headers)
        if limits and ticket.sent > self._held_sent:
            now = self._clock()
            for dim, (limit, remaining, reset) in limits.items():
                # `sent` counts this request: only what went after it is missing from `remaining`
                sent = ticket.sent if dim == "requests" else ticket.tokens
                after = (self._sent if dim == "requests" else self._tokens) - sent
                self._held[dim] = _Held(limit, remaining, reset, now, sent, remaining - after)
            self._held_sent = ticket.sent
        if self._probe is ticket:
            self._probe = None  # the probe's answer is in: pacing goes on from it
        self._wake()

    def finished(self, ticket: Ticket) -> None:
        """The request is over (answered, failed or cancelled): a probe without answer lets the
        next request probe."""
        if self._probe is ticket and not ticket.answered:
            self._probe = None
            self._wake()

    def pause(self, seconds: float) -> None:
        """Hold every request back ``seconds`` (a 429's ``Retry-After``), at most
        :data:`MAX_RETRY_AFTER` (an ``inf`` is a broken header, not a reason to stop)."""
        if seconds > 0:  # also false for nan
            self._pause_until = max(self._pause_until, self._clock() + min(float(seconds), MAX_RETRY_AFTER))

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)
