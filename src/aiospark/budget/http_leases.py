"""Leases from the driver's ledger, over the metrics collector's HTTP server (worker side).

A request is one small JSON POST carrying a request id, signed with the Budget's own secret
(shipped inside the pickled task) by an HMAC over the method, path, body, a timestamp and a nonce
(:mod:`aiospark.budget.signing`): the secret never travels, and a captured request cannot be sent
again. The driver refuses anything else with 403. A request runs as a blocking ``urllib`` request
in the loop's default executor, so the event loop never waits on it.

A request that fails on the way (no connection, a reset, a read timeout: any ``OSError``) is sent
again, up to :data:`ATTEMPTS` times, with the same request id and a new signature: when the driver
had acted on the lost attempt, the ledger answers the retry with its first answer, so a retry
never leases or gives back units twice. Then the task's rows fail with
:class:`~aiospark.budget.gate.BudgetUnavailable` (see :mod:`aiospark.budget.gate`).

Example::

    source = HttpLeases("http://10.0.0.5:41233/budget", budget_id, secret, task="3.1.0")
    granted, left = await source.lease(need=1, want=64, used=0)
"""
from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from .signing import sign
from .source import LeaseSource

__all__ = ["ATTEMPTS", "HttpLeases"]

#: seconds per request, tries per request, and the pauses between tries
TIMEOUT = 10.0
ATTEMPTS = 3
RETRY_PAUSE = 0.5

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HttpLeases(LeaseSource):
    """A :class:`~aiospark.budget.source.LeaseSource` talking to the driver's ledger."""

    def __init__(self, address: str, budget_id: str, secret: str, task: str):
        self.address = address
        self.where = f"the driver's budget ledger at {address}"
        self._path = urllib.parse.urlsplit(address).path or "/"
        self._id = budget_id
        self._secret = secret
        self._task = task

    def __repr__(self) -> str:
        return f"HttpLeases({self.address!r}, task={self._task!r})"  # never the secret

    async def lease(self, need: float, want: float, used: float) -> tuple[float, float]:
        reply = await self._post({"op": "lease", "need": need, "want": want, "used": used})
        granted, left = reply.get("granted"), reply.get("left")
        if not (isinstance(granted, (int, float)) and isinstance(left, (int, float))) or \
                isinstance(granted, bool) or isinstance(left, bool):
            raise ValueError(f"the ledger's reply has no numbers: {str(reply)[:200]}")
        return float(granted), float(left)

    async def release(self, units: float, used: float, refused: int, refunded: float = 0.0) -> None:
        await self._post({"op": "release", "units": units, "used": used, "refused": refused, "refunded": refunded})

    async def _post(self, message: dict[str, Any]) -> dict[str, Any]:
        # one id for every attempt of this request: the ledger acts on it once
        body = json.dumps({"id": self._id, "task": self._task, "request": uuid.uuid4().hex, **message}).encode()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._send, body)

    def _send(self, body: bytes) -> dict[str, Any]:
        for attempt in range(1, ATTEMPTS + 1):
            headers = {"Content-Type": "application/json", **sign(self._secret, "POST", self._path, body)}
            request = urllib.request.Request(self.address, data=body, method="POST", headers=headers)
            try:
                with _opener.open(request, timeout=TIMEOUT) as response:
                    reply = json.loads(response.read())
                if not isinstance(reply, dict):
                    raise ValueError(f"the ledger's reply is not a JSON object: {str(reply)[:200]}")
                return reply
            except urllib.error.HTTPError as exc:
                raise ConnectionError(f"HTTP {exc.code} ({_why(exc)})") from None
            except OSError:  # the driver may have acted on it: the retry's id makes that harmless
                if attempt == ATTEMPTS:
                    raise
                time.sleep(RETRY_PAUSE * attempt)
        raise AssertionError("unreachable")  # pragma: no cover


def _why(exc: urllib.error.HTTPError) -> str:
    """The driver's reason for a refusal (it names no secret), else a generic one."""
    try:
        reason = json.loads(exc.read() or b"{}").get("error")
    except (ValueError, OSError, AttributeError):
        reason = None
    if isinstance(reason, str) and reason:
        return f"refused: {reason[:200]}"
    return {403: "refused: not a live Budget of this driver, or a wrong signature",
            400: "refused as malformed"}.get(exc.code, str(exc.reason))
