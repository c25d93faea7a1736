"""A small async HTTP client on aiospark's fast transport, for your own ``async def``.

``HttpLookup`` sends with pyreqwest (about twice aiohttp's requests/s) when it is installed; this
module gives functions you write the same transport. Plain aiohttp, httpx or any asyncio client
keep working as before inside aiospark: this is an option, not a requirement.

* :func:`http_client` -- the process's shared client for some settings on the running loop: call
  it inside your function (a dictionary look-up), nothing to open or close; one connection pool
  per Spark worker process, reused by every task it runs.
* :class:`HttpClient` -- a client you own: ``async with HttpClient() as client: ...``.

Example::

    from aiospark.connectors.http import http_client

    async def enrich(row):
        client = http_client(timeout=5.0, headers={"Authorization": f"Bearer {TOKEN}"})
        resp = await client.get(f"http://127.0.0.1:8080/item/{row['id']}")
        resp.raise_for_status()        # 429/5xx -> HttpStatusError(retryable=True, retry_after=...)
        return {"id": row["id"], "name": resp.json()["name"]}

    out = aiospark.unordered_wait(df, enrich, "id BIGINT, name STRING", capacity=100)

Errors: a request that gets no answer raises :class:`~aiospark.connectors.ConnectorTimeout` or a
retryable :class:`~aiospark.connectors.ConnectorError`; their messages carry the URL's path only
(no query string, no credentials) and header values other than plain ones (Accept, Content-Type,
...) are scrubbed from every message.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from ..checks import check_positive
from ..errors import ConnectorError, ConnectorTimeout
from ..redaction import Redactor
from ..secrets import Secret
from .choose import check_transport, new_transport
from .codec import dumps, loads
from .request import PLAIN_HEADERS
from .response import status_error
from .transport import Transport, TransportFailure

__all__ = ["HttpClient", "HttpResponse", "http_client"]

_JSON = {"Content-Type": "application/json"}
#: what a message may show of a URL: scheme, host and path (no userinfo, query or fragment)
_URL_RE = re.compile(r"(https?://)(?:[^\s/@'\"]*@)?([^\s'\"?#]*)[^\s'\"]*")


def _path(url: str) -> str:
    return _URL_RE.sub(r"\1\2", url)[:300]


class HttpResponse:
    """One answer, read whole: ``status``, ``reason``, ``headers`` (case-insensitive ``get``),
    ``content`` (bytes); ``json()``, ``text()``, ``raise_for_status()``."""

    __module__ = "aiospark.connectors.http"  # its public home (reprs, pickles)

    __slots__ = ("status", "reason", "headers", "content", "_method", "_url", "_redactor")

    def __init__(self, status: int, reason: str, headers: Any, content: bytes, method: str, url: str,
                 redactor: Redactor) -> None:
        self.status, self.reason, self.headers, self.content = status, reason, headers, content
        self._method, self._url, self._redactor = method, url, redactor

    def json(self) -> Any:
        """The body decoded as JSON (orjson); ``ValueError`` when it is not JSON."""
        return loads(self.content)

    def text(self, encoding: str = "utf-8") -> str:
        return self.content.decode(encoding, "replace")

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def raise_for_status(self) -> HttpResponse:
        """``self`` for a 2xx; else :class:`HttpStatusError` (429/5xx retryable, ``retry_after``
        from the Retry-After header, so aiospark's retry waits at least that long)."""
        if 200 <= self.status < 300:
            return self
        raise status_error(self.status, self.reason, self.headers.get("Retry-After"), self.content,
                           f"{self._method} {_path(self._url)}", self._redactor, "HttpClient")

    def __repr__(self) -> str:
        return f"<HttpResponse {self.status} {self.reason} ({len(self.content)} bytes)>"


class HttpClient:
    """An async HTTP client with one bounded keep-alive pool on the chosen transport.

    Args:
        transport: ``"auto"`` (pyreqwest when installed, else aiohttp), ``"pyreqwest"``, ``"aiohttp"``.
        max_connections: requests in flight at most (more wait for a slot).
        timeout: total seconds per request (connect to last byte); ``None`` for none.
        headers: sent with every request (values other than plain ones are kept out of messages).

    The pool is made on the first request, on the running loop, and belongs to that loop.
    Example::

        async with HttpClient(timeout=5.0) as client:
            data = (await client.get("http://127.0.0.1:8080/item/1")).raise_for_status().json()
    """

    __module__ = "aiospark.connectors.http"  # its public home (reprs, pickles)

    def __init__(self, *, transport: str = "auto", max_connections: int = 100,
                 timeout: float | None = 30.0, headers: Mapping[str, str] | None = None) -> None:
        self.transport = check_transport(transport)
        check_positive("max_connections", max_connections, integer=True)
        if timeout is not None:
            check_positive("timeout", timeout)
        self.max_connections, self.timeout = max_connections, timeout
        self._headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self._redactor = Redactor(*(Secret(v) for k, v in self._headers.items()
                                    if k.lower() not in PLAIN_HEADERS))
        self._pool: Transport | None = None
        self._loop: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": None, "_loop": None}  # a copy makes its own pool

    def __repr__(self) -> str:
        return (f"HttpClient(transport={self.transport!r}, max_connections={self.max_connections}, "
                f"timeout={self.timeout}, headers={sorted(self._headers)!r})")

    async def _transport(self) -> Transport:
        import asyncio

        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = await new_transport(self.transport, headers=self._headers,
                                             max_connections=self.max_connections, timeout=self.timeout)
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("this HttpClient's pool belongs to another event loop: make one "
                               "client per loop, or use http_client() (one per loop by itself)")
        return self._pool

    async def request(self, method: str, url: str, *, json: Any = None, data: bytes | None = None,
                      headers: Mapping[str, str] | None = None) -> HttpResponse:
        """Send ``method url`` (already percent-encoded) with a ``json`` or raw ``data`` body."""
        pool = self._pool if self._pool is not None and self._loop is not None else await self._transport()
        if json is not None:
            data, headers = dumps(json), ({**_JSON, **headers} if headers else _JSON)
        method = method.upper()
        try:
            answer = await pool.send(method, url, data, headers)
        except TransportFailure as exc:
            where = f"{method} {_path(url)}"
            if exc.kind == "timeout":
                raise ConnectorTimeout(f"no response within {self.timeout}s to {where}",
                                       source="HttpClient") from None
            detail = _path(self._redactor.scrub(exc.detail, limit=300))
            raise ConnectorError(f"{where} failed: {detail}", source="HttpClient", retryable=True) from None
        return HttpResponse(answer.status, answer.reason, answer.headers, answer.body, method, url,
                            self._redactor)

    async def get(self, url: str, *, headers: Mapping[str, str] | None = None) -> HttpResponse:
        return await self.request("GET", url, headers=headers)

    async def post(self, url: str, *, json: Any = None, data: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> HttpResponse:
        return await self.request("POST", url, json=json, data=data, headers=headers)

    async def close(self) -> None:
        """Close the pool (idempotent; the client can be used again, with a new pool)."""
        pool, self._pool, self._loop = self._pool, None, None
        if pool is not None:
            await pool.close()

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


#: loop -> {settings: client}; the entry goes when the loop is collected
_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple, HttpClient]] = weakref.WeakKeyDictionary()


def http_client(*, transport: str = "auto", max_connections: int = 100, timeout: float | None = 30.0,
                headers: Mapping[str, str] | None = None) -> HttpClient:
    """The shared :class:`HttpClient` of these settings on the running loop (made on first call).

    Call it inside your ``async def``: on a Spark worker every task then uses one pool. Do not
    close it (it lives as long as its loop). Example::

        resp = await http_client(timeout=5.0).get(url)
    """
    import asyncio

    global _LAST
    key = (transport, max_connections, timeout, tuple(sorted(headers.items())) if headers else ())
    last = _LAST
    if last is not None and last[0] == threading.get_ident() and last[2] == key:
        # the usual call: same thread and settings as the last one; a loop running in this thread
        # is the running loop (one per thread), found without get_running_loop()'s getpid()
        loop, client = last[1](), last[3]()
        if loop is not None and client is not None and loop.is_running():
            return client
    loop = asyncio.get_running_loop()
    clients = _SHARED.get(loop)
    if clients is None:
        clients = _SHARED[loop] = {}
    client = clients.get(key)
    if client is None:
        client = clients[key] = HttpClient(transport=transport, max_connections=max_connections,
                                           timeout=timeout, headers=headers)
    _LAST = (threading.get_ident(), weakref.ref(loop), key, weakref.ref(client))
    return client


#: thread, loop, settings and client of the last http_client() call (weakly: _SHARED owns the client)
_LAST: tuple | None = None
