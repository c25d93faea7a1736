"""The pyreqwest transport: Rust's reqwest (hyper, rustls) driven from asyncio.

Why this client: against nginx on 127.0.0.1, one process, 100 requests in flight, it answers about
twice aiohttp's requests/s on asyncio's own loop and three times on uvloop
(``benchmarks/http_transport.py``, docs/benchmarks.md "HTTP transport"): the HTTP/1.1 parsing,
connection pool and socket I/O run in Rust on a Tokio thread, and each request costs the event loop
one future's completion instead of several protocol callbacks.

What it keeps: a pool of at most ``max_connections`` keep-alive connections, at most as many requests
in flight (further requests wait for a slot), a total ``timeout`` per request (connect to last body byte),
TLS verified against the platform's roots (rustls-platform-verifier), proxies from ``HTTP_PROXY``/
``HTTPS_PROXY``/``NO_PROXY``, HTTP/2 where TLS ALPN offers it. Redirects are followed (at most
10), as aiohttp does; like aiohttp, reqwest drops the Authorization header when a redirect leaves
the host.

Timeouts that cancel: pyreqwest (0.15) does not abort a request whose awaiting task is cancelled
(the Rust task runs on to its end or its timeout). So a request sent from an aiospark call gets
the call's deadline (:func:`aiospark.time_left`) as its own timeout, a moment later than the
operator's (``DEADLINE_GRACE``) so that the row still gets the operator's timeout outcome: when a
row times out, its request is aborted with it instead of holding a connection for up to ``timeout``.

Handing the GIL over in batches: pyreqwest's Tokio thread must hold the GIL to wake the task awaiting
each response, and CPython hands a released GIL back to the thread that was running, so while the
event loop is busy the Tokio thread gets it mostly when the loop has run out of work: one idle
round trip per response. So once per loop iteration in which responses arrived, the loop thread
sleeps a moment (``HAND_OVER_SECONDS``; it holds no lock then) and the Tokio thread delivers
everything that completed meanwhile in one go (docs/design.md, "HTTP transport").

One difference is the seam's to handle: reqwest parses URLs by the WHATWG rules, which read a path
segment ``%2E`` or ``%2E%2E`` as ``.``/``..`` and remove it, so the key ``".."`` in ``/item/{id}``
would reach ``/``. :func:`rewrites_path` says which URLs those are (rare: a key that is only dots);
this transport refuses them (:class:`TransportFailure`, nothing sent) and
:mod:`aiospark.connectors.http.choose` sends them by aiohttp instead, so the server gets the segment
literally. This module imports no other client library.

Example::

    t = PyreqwestTransport(headers={}, max_connections=100, timeout=10.0)
    answer = await t.send("GET", "http://127.0.0.1:8080/item/1")
    await t.close()
"""

from __future__ import annotations

import asyncio
import datetime
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from pyreqwest.client import ClientBuilder
from pyreqwest.exceptions import ConnectError, PyreqwestError, RequestTimeoutError

from ...core.context import time_left
from .transport import Answer, Transport, TransportFailure

__all__ = ["PyreqwestTransport", "rewrites_path"]

#: seconds a request may outlive its call's deadline (the operator's timeout acts first)
DEADLINE_GRACE = 0.05

#: how long the loop thread lets go of the GIL, once per loop iteration in which responses arrived
#: (Linux's timer slack makes a sleep last at least 50 µs, on a VM ~150 µs: still short against the
#: idle round trips it saves); 0 on Windows, whose sleeps last a millisecond or more
HAND_OVER_SECONDS = 0.0 if sys.platform == "win32" else 20e-6

#: A path segment of only percent-encoded dots, which WHATWG URL parsing would resolve away
_DOT_SEGMENT = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*(?:/[^?#]*)?/(?:%2[eE]){1,2}(?:[/?#]|$)")


def rewrites_path(url: str) -> bool:
    """Whether reqwest would send ``url`` to another path than it names (a path segment of only
    percent-encoded dots, which WHATWG parsing resolves away)."""
    return ("%2E" in url or "%2e" in url) and _DOT_SEGMENT.match(url) is not None


def _detail(exc: BaseException) -> str:
    """The client's text for ``exc`` with its innermost cause (e.g. 'Connection refused')."""
    # str() of pyreqwest's errors is the repr of (message, details): the message is the readable part
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) and message else str(exc)
    causes = (getattr(exc, "details", None) or {}).get("causes") or []
    if causes:
        last = causes[-1]
        msg = last.get("message") if isinstance(last, Mapping) else str(last)
        if msg and msg not in text:
            text = f"{text}: {msg}"
    return text


class _HandOver:
    """Sleeps once per event-loop iteration in which :meth:`response_arrived` was called (see the
    module docstring): the callback it schedules runs once the loop has done the work at hand."""

    __slots__ = ("_due",)

    def __init__(self) -> None:
        self._due = False

    def response_arrived(self) -> None:
        if not self._due and HAND_OVER_SECONDS:
            self._due = True
            asyncio.get_running_loop().call_soon(self._hand_over)

    def _hand_over(self) -> None:
        self._due = False
        time.sleep(HAND_OVER_SECONDS)  # releases the GIL: pyreqwest's thread hands its responses over


class PyreqwestTransport(Transport):
    """pyreqwest's async ``Client``, one per transport (its pool is bounded by ``max_connections``)."""

    name = "pyreqwest"

    def __init__(self, *, headers: Mapping[str, str], max_connections: int, timeout: float | None) -> None:
        # http2(True): offer h2 by TLS ALPN (pyreqwest's default is HTTP/1.1 only); cleartext stays 1.1.
        # pyreqwest's max_connections bounds requests in flight, not sockets: its idle pool is
        # unbounded per host unless told, so keep-alive sockets are capped at the same number
        builder = (ClientBuilder().max_connections(max_connections).pool_max_idle_per_host(max_connections)
                   .default_headers(dict(headers)).error_for_status(False).http2(True))
        if timeout is not None and timeout > 0:
            builder = builder.timeout(datetime.timedelta(seconds=timeout))
        self._client: Any = builder.build()
        self._timeout = timeout if timeout is not None and timeout > 0 else None
        self._hand_over = _HandOver()

    async def send(self, method: str, url: str, body: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> Answer:
        if ("%2E" in url or "%2e" in url) and _DOT_SEGMENT.match(url):
            # the seam routes these elsewhere (choose.py); sent here they would reach another path
            raise TransportFailure("other", "pyreqwest would remove a '.' or '..' path segment from this URL "
                                   "(send it with transport='aiohttp')")
        try:
            req = self._client.request(method, url)
            left = time_left()
            if left is not None and (self._timeout is None or left + DEADLINE_GRACE < self._timeout):
                req = req.timeout(datetime.timedelta(seconds=max(left, 0.0) + DEADLINE_GRACE))
            if headers:
                req = req.headers(headers)
            if body is not None:
                req = req.body_bytes(body)
            resp = await req.build().send()
            self._hand_over.response_arrived()
            data = bytes(await resp.bytes())  # a small copy: callers slice and decode it
        except RequestTimeoutError:
            raise TransportFailure("timeout", "no response in time") from None
        except ConnectError as exc:
            raise TransportFailure("connect", _detail(exc)) from None
        except PyreqwestError as exc:
            raise TransportFailure("other", f"{type(exc).__name__}: {_detail(exc)}") from None
        return Answer(resp.status, resp.headers, data)

    async def close(self) -> None:
        await self._client.close()
