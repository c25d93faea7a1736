"""Leases from the driver's ledger, over the metrics collector's HTTP server (worker side).

A request is one small signed JSON POST (header ``X-Aiospark-Secret``: the Budget's own secret,
shipped inside the pickled task; the driver refuses anything else with 403). It runs as a blocking
``urllib`` request in the loop's default executor, so the event loop never waits on it. A request
that fails to connect is tried once more after a short pause; then the task's rows fail with
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
import urllib.request
from typing import Any

__all__ = ["HttpLeases", "SECRET_HEADER"]

SECRET_HEADER = "X-Aiospark-Secret"
#: seconds per request, and the pause before the one retry of a request that could not connect
TIMEOUT = 10.0
RETRY_PAUSE = 0.5

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HttpLeases:
    """A :class:`~aiospark.budget.gate.LeaseSource` talking to the driver's ledger."""

    def __init__(self, address: str, budget_id: str, secret: str, task: str):
        self.address = address
        self.where = f"the driver's budget ledger at {address}"
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

    async def release(self, units: float, used: float, refused: int) -> None:
        await self._post({"op": "release", "units": units, "used": used, "refused": refused})

    async def _post(self, message: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps({"id": self._id, "task": self._task, **message}).encode()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._send, body)

    def _send(self, body: bytes) -> dict[str, Any]:
        request = urllib.request.Request(self.address, data=body, method="POST",
                                         headers={"Content-Type": "application/json", SECRET_HEADER: self._secret})
        for attempt in (1, 2):
            try:
                with _opener.open(request, timeout=TIMEOUT) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                why = {403: "refused: not a live Budget of this driver, or a wrong secret",
                       400: "refused as malformed"}.get(exc.code, exc.reason)
                raise ConnectionError(f"HTTP {exc.code} ({why})") from None
            except OSError:
                if attempt == 2:
                    raise
                time.sleep(RETRY_PAUSE)
        raise AssertionError("unreachable")  # pragma: no cover
