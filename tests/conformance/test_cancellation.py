"""A call that times out is cancelled the asyncio way: CancelledError inside, ``finally`` runs, the
library closes its connection -- seen from the call (marker files) and from the server (/slow)."""
from __future__ import annotations

import json
import os
import time

import pytest

from . import checks_cancel as checks

ROWS = 4
# The operator's timeout: long enough that every call has reached /slow before it fires (the calls
# only open a loopback connection first; their libraries are imported before the calls start). 2 s
# was not: on a CI machine running three legs at once a request sometimes had not arrived yet.
TIMEOUT = 5.0
# How long the server may take to notice the closed sockets (it polls every 20 ms): generous.
SERVER_NOTICE_SECONDS = 30.0


def _server_states(http_server, tokens):
    deadline = time.monotonic() + SERVER_NOTICE_SECONDS
    while True:
        states = {t: http_server.slow.get(t, "never-arrived") for t in tokens}
        if all(s == "closed" for s in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(0.1)


def _warm(kind: str, url: str) -> None:
    """One finished request with the library first: its lazy imports (compiled on first use in a
    fresh venv, seconds on CI) must not eat the calls' TIMEOUT before they reach /slow."""
    import asyncio

    async def once() -> None:
        if kind == "httpx2" and checks.httpx2 is not None:
            async with checks.httpx2.AsyncClient(base_url=url) as client:
                await client.get("/echo")
        elif kind in ("httpx", "taskgroup"):
            import httpx

            async with httpx.AsyncClient(base_url=url) as client:
                await client.get("/echo")
        elif kind == "aiohttp":
            import aiohttp

            async with aiohttp.ClientSession(url) as session, session.get("/echo") as response:
                await response.read()

    asyncio.run(once())


@pytest.mark.parametrize("kind, check, mark", [
    pytest.param("httpx", checks.hang_in_httpx, "cancelled closed=True", id="httpx"),
    pytest.param("httpx2", checks.hang_in_httpx2, "cancelled closed=True", id="httpx2",
                 marks=pytest.mark.skipif(checks.httpx2 is None, reason="httpx2 needs Python 3.11+")),
    pytest.param("aiohttp", checks.hang_in_aiohttp, "cancelled closed=True", id="aiohttp"),
    pytest.param("taskgroup", checks.hang_in_task_group, "child cancelled closed=True", id="anyio-taskgroup"),
])
def test_timeout_cancels_into_the_library_cleanup(run, config, http_server, kind, check, mark):
    _warm(kind, config["http"])
    outputs = run(check, config, rows=ROWS, timeout=TIMEOUT, fallback="timed out")
    assert outputs == ["timed out"] * ROWS
    tokens = [checks.token_for({**config, "row": i}, kind) for i in range(ROWS)]
    # The cleanup ran exactly once per call, inside a cancelled call, after closing the client.
    marks = {t: open(os.path.join(config["dir"], t)).read() if os.path.exists(os.path.join(config["dir"], t))
             else "no marker" for t in tokens}
    assert marks == {t: mark + "\n" for t in tokens}, json.dumps(marks, indent=1)
    # And the server saw every connection go away (not held until its own 60 s limit).
    assert _server_states(http_server, tokens) == {t: "closed" for t in tokens}
