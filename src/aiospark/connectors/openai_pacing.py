"""Pacing by the endpoint's own limits: OpenAI's ``x-ratelimit-*`` answer headers.

Every answer of OpenAI (and of proxies that copy it: LiteLLM, Azure, vLLM behind a gateway) says,
for requests and for tokens, the ``limit``, what is ``remaining`` and when the budget is full again
(``reset``, a duration: ``"6m0s"``, ``"1.5s"``, ``"20ms"``, ``"1h2m3.5s"`` or plain seconds).
A :class:`Pacer` spreads what remains over the time until that reset: the gap before a request is
``units * reset_left / remaining_left`` (``units``: 1 request, or its estimated tokens), where
``remaining_left`` also subtracts what this worker sent after the request whose answer is held.

Why this needs no coordination between workers: the provider's counters are shared by all of
them, so each worker reads the others' spending in ``remaining``. With ``W`` workers and a
provider that refills continuously (``reset`` = time until full), the spend ``W * R / T`` equals
the refill rate when ``R = limit / (W + 1)``: the workers settle there, at the provider's rate,
with that much kept in reserve, whatever ``W``.

Before the first answer nothing is known: a worker sends one request and holds the others until
its answer (one round trip per worker and job); a full budget would otherwise be spent by every
in-flight slot of every worker at once. An answer without these headers (most self-hosted
servers) leaves the worker unpaced. A header that does not parse is ignored (as if absent).

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
from typing import Any, Callable, Mapping

__all__ = ["Pacer", "Ticket", "parse_duration", "read_limits"]

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
#: the longest reset believed (a day): a larger one is a malformed header, not a budget
_MAX_RESET = 86400.0
DIMENSIONS = ("requests", "tokens")


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

    __slots__ = ("limit", "remaining", "reset", "at", "sent")

    def __init__(self, limit: float | None, remaining: float, reset: float, at: float, sent: float) -> None:
        self.limit, self.remaining, self.reset, self.at, self.sent = limit, remaining, reset, at, sent


class Pacer:
    """One worker's pacing by the ``x-ratelimit-*`` headers of the answers it gets.

    ``await admit(cost)`` before a request (``cost``: its estimated tokens) returns a
    :class:`Ticket`; ``update(ticket, headers)`` with each answer's headers (success or error);
    ``finished(ticket)`` when the request is over, answered or not; ``pause(seconds)`` after a
    429's ``Retry-After``. ``clock`` (seconds, monotonic) is for tests.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sent = 0
        self._tokens = 0.0
        self._held: dict[str, _Held] = {}
        self._held_sent = -1  # the ticket whose answer is held: fresher answers only replace it
        self._last_send = -math.inf
        self._pause_until = -math.inf
        self._probing = True   # no answer yet: one request at a time until the first one
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
        answer)."""
        now = self._clock()
        if self._probing and self._probe is not None:
            return math.inf
        wait = self._pause_until - now
        for dim, held in self._held.items():
            left = held.reset - (now - held.at)
            if left <= 0:
                continue  # the budget has been full again since: the next answer tells more
            units = 1.0 if dim == "requests" else float(cost)
            if units <= 0:
                continue
            have = held.remaining - ((self._sent if dim == "requests" else self._tokens) - held.sent)
            if have >= units:
                # what is left spread over the time left: this request's share of it
                wait = max(wait, self._last_send + units * left / have - now)
            elif held.limit is not None and held.limit > held.remaining:
                # too little left: until the missing units are refilled (at the rate that refills
                # the budget in `reset`), or the reset, or a fresher answer (which wakes us)
                rate = (held.limit - held.remaining) / held.reset
                wait = max(wait, min(left, held.at + (units - have) / rate - now))
            else:
                wait = max(wait, left)
        return max(0.0, wait)

    async def admit(self, cost: float = 0.0) -> Ticket:
        """Wait for this request's turn; the returned ticket goes to ``update``/``finished``."""
        if not self._held and not self._probing and self._pause_until <= self._clock():
            return self._send(cost)  # unpaced (no headers seen): no lock, no wait
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # FIFO: one waiter holds the turn, the others queue behind it
            waited = False
            while True:
                wait = self.delay(cost)
                if wait <= 0:
                    break
                waited = True
                if self._changed is None or self._changed.done():
                    self._changed = asyncio.get_running_loop().create_future()
                # woken early by a fresher answer (or the probe's end), else by the timeout
                await asyncio.wait([self._changed], timeout=None if math.isinf(wait) else wait)
            self.waits += waited
            ticket = self._send(cost)
            if self._probing:
                self._probe = ticket
            return ticket

    def _send(self, cost: float) -> Ticket:
        self._sent += 1
        self._tokens += max(0.0, float(cost))
        self._last_send = self._clock()
        return Ticket(self._sent, self._tokens)

    def update(self, ticket: Ticket, headers: Mapping[str, str]) -> None:
        """An answer (any status) to ``ticket``'s request arrived with these headers."""
        ticket.answered = True
        limits = read_limits(headers)
        if limits and ticket.sent > self._held_sent:
            now = self._clock()
            for dim, (limit, remaining, reset) in limits.items():
                # `sent` counts this request: only what went after it is missing from `remaining`
                self._held[dim] = _Held(limit, remaining, reset, now,
                                        ticket.sent if dim == "requests" else ticket.tokens)
            self._held_sent = ticket.sent
        self._end_probe(ticket)
        self._wake()

    def finished(self, ticket: Ticket) -> None:
        """The request is over (answered, failed or cancelled): a probe without answer lets the
        next request probe."""
        if self._probe is ticket and not ticket.answered:
            self._probe = None
            self._wake()

    def pause(self, seconds: float) -> None:
        """Hold every request back ``seconds`` (a 429's ``Retry-After``)."""
        if seconds > 0:
            self._pause_until = max(self._pause_until, self._clock() + seconds)

    def _end_probe(self, ticket: Ticket) -> None:
        if self._probing:
            self._probing = False
            self._probe = None

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)
