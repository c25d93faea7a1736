"""Signed requests from tasks to the driver's collector (budget leases, metrics reports).

A request proves it knows a secret without carrying it: the task sends an HMAC-SHA256 over
``method``, ``path``, the body's SHA-256, a timestamp and a random nonce, under the secret of the
Budget (or Metrics) it names. The driver recomputes it, refuses a timestamp more than
:data:`WINDOW` seconds off its own clock, and remembers every nonce it accepted inside that
window, so a request captured on the wire cannot be sent again (nor its secret read off it). A
client that retries signs each attempt anew (a new nonce); what makes a retry safe is the
request id in the body, answered once by the ledger (:mod:`aiospark.budget.ledger`).

The nonce memory is bounded (:data:`MAX_NONCES`): when full it forgets the oldest nonces and
from then on refuses every timestamp not newer than the newest one it forgot, so a forgotten
nonce can never be accepted again.

Example::

    headers = sign(secret, "POST", "/budget", body)          # on the task
    verifier = Verifier()
    why = verifier.check(secret, "POST", "/budget", body, headers)   # on the driver: None = accepted
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["MAX_NONCES", "NONCE_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "Verifier", "WINDOW", "sign"]

TIMESTAMP_HEADER = "X-Aiospark-Timestamp"
NONCE_HEADER = "X-Aiospark-Nonce"
SIGNATURE_HEADER = "X-Aiospark-Signature"
#: seconds a signed request stays valid either side of the driver's clock (clusters run NTP;
#: a worker whose clock is further off is refused with a message saying so)
WINDOW = 300.0
#: nonces remembered at most (about 100 bytes each)
MAX_NONCES = 200_000


def _mac(secret: str, method: str, path: str, body: bytes, timestamp: str, nonce: str) -> str:
    digest = hashlib.sha256(body).hexdigest()
    message = "\n".join((method.upper(), path, digest, timestamp, nonce)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, method: str, path: str, body: bytes, *, now: float | None = None) -> dict[str, str]:
    """The headers that sign one request (a fresh nonce every call)."""
    timestamp = f"{time.time() if now is None else now:.3f}"
    nonce = secrets.token_hex(16)
    return {TIMESTAMP_HEADER: timestamp, NONCE_HEADER: nonce,
            SIGNATURE_HEADER: _mac(secret, method, path, body, timestamp, nonce)}


class Headers(Protocol):
    """A request's headers: a dict, or http.server's (whose ``get`` ignores case)."""

    def get(self, name: str, default: Any = None, /) -> Any: ...


class Verifier:
    """The driver's side: checks signatures, the clock window and nonces (thread-safe)."""

    def __init__(self, *, window: float = WINDOW, max_nonces: int = MAX_NONCES,
                 clock: Callable[[], float] = time.time):
        self.window = window
        self.max_nonces = max_nonces
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, float] = OrderedDict()  # nonce -> its timestamp, oldest first
        self._floor = float("-inf")  # timestamps not above this are refused (their nonces were forgotten)

    def check(self, secret: str, method: str, path: str, body: bytes, headers: Headers) -> str | None:
        """None when the request is signed with ``secret``, fresh and new; else why it is refused."""
        timestamp = headers.get(TIMESTAMP_HEADER) or ""
        nonce = headers.get(NONCE_HEADER) or ""
        given = headers.get(SIGNATURE_HEADER) or ""
        if not (timestamp and nonce and given) or len(nonce) > 64:
            return "not signed"
        expected = _mac(secret, method, path, body, timestamp, nonce)
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return "a wrong signature"
        try:
            stamp = float(timestamp)
        except ValueError:
            return "a malformed timestamp"
        now = self._clock()
        if not abs(now - stamp) <= self.window:  # (NaN is refused too)
            return (f"a timestamp {stamp - now:+.0f} s off the driver's clock (more than {self.window:g} s: "
                    "check the workers' clocks)")
        with self._lock:
            self._forget_expired(now)
            if stamp <= self._floor or nonce in self._seen:
                return "a replayed request"
            self._seen[nonce] = stamp
            while len(self._seen) > self.max_nonces:
                _old, old_stamp = self._seen.popitem(last=False)
                self._floor = max(self._floor, old_stamp)
        return None

    def _forget_expired(self, now: float) -> None:
        seen = self._seen
        while seen:
            nonce, stamp = next(iter(seen.items()))
            if stamp >= now - self.window:
                return
            del seen[nonce]  # outside the window: refused by its timestamp from now on
