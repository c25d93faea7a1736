"""How HTTP requests travel: one small interface, one class per client library.

``HttpLookup`` and :class:`~aiospark.connectors.http_client.HttpClient` send through a
:class:`Transport`; which one is picked by ``transport=``:

* ``"auto"`` (default): ``"pyreqwest"`` when it is installed (a Rust client, reqwest/hyper on a
  Tokio thread: about 2x aiohttp's requests/s on asyncio's loop, 3x on uvloop -- docs/benchmarks.md),
  else ``"aiohttp"``, with one log line saying so;
* ``"pyreqwest"``: that client, an ``ImportError`` saying how to install it when it is missing
  (it has no wheels for Python 3.10);
* ``"aiohttp"``: aiohttp, the transport of aiospark before 0.x, always installed.

``AIOSPARK_HTTP_TRANSPORT`` (``pyreqwest`` or ``aiohttp``; on executors
``spark.executorEnv.AIOSPARK_HTTP_TRANSPORT``) decides what ``"auto"`` means for the whole process,
without touching code.

Both keep HTTP/1.1 connections alive in a pool bounded by ``max_connections``, verify TLS
certificates against the system's roots, take proxies from the environment (``HTTPS_PROXY``,
``HTTP_PROXY``, ``NO_PROXY``), apply a total ``timeout`` per request and abort a request whose
awaiting task is cancelled. pyreqwest also speaks HTTP/2 with servers that offer it (TLS ALPN).

Example::

    t = await new_transport("auto", headers={"Accept": "application/json"},
                            max_connections=100, timeout=10.0)
    answer = await t.send("GET", "http://127.0.0.1:8080/item/1")
    answer.status, answer.header("Retry-After"), loads(answer.body)
    await t.close()
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import os
from typing import Any, Callable, Mapping

__all__ = ["TRANSPORTS", "Answer", "Transport", "TransportFailure", "check_transport", "dumps",
           "loads", "new_transport", "resolve_transport"]

log = logging.getLogger("aiospark.connectors.http")

#: The values ``transport=`` accepts
TRANSPORTS = ("auto", "pyreqwest", "aiohttp")

try:  # orjson decodes a small JSON body in about a third of json.loads' time
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; kept optional for vendored installs
    _orjson = None


def _json_loads(data: Any) -> Any:
    return json.loads(bytes(data))


#: Decodes a JSON body (bytes or a buffer): orjson's own function when installed (called once per
#: row, so without a Python frame around it), else ``json``
loads: Callable[[Any], Any] = _orjson.loads if _orjson is not None else _json_loads


def dumps(value: Any) -> bytes:
    """Encode a JSON request body as compact UTF-8 bytes."""
    if _orjson is not None:
        try:
            return _orjson.dumps(value)
        except TypeError:  # what orjson refuses (ints over 64 bits, ...) json may still carry
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


class Answer:
    """One HTTP response, read whole: ``status``, ``headers`` (case-insensitive ``get``), ``body``
    (bytes) and ``reason`` (the server's phrase, else the standard one for ``status``).

    A plain slotted class, and the phrase looked up only when asked: one is made per row, and
    only an error message reads the phrase.
    """

    __slots__ = ("status", "headers", "body", "_reason")

    def __init__(self, status: int, headers: Any, body: bytes, reason: str | None = None) -> None:
        self.status, self.headers, self.body, self._reason = status, headers, body, reason

    @property
    def reason(self) -> str:
        return self._reason or _REASONS.get(self.status, "")

    def header(self, name: str) -> str | None:
        """One header's value (the first), or None."""
        return self.headers.get(name)

    def __repr__(self) -> str:
        return f"<Answer {self.status} {self.reason} ({len(self.body)} bytes)>"


class TransportFailure(Exception):
    """The request got no HTTP answer. ``kind``: ``"timeout"``, ``"connect"`` (the connection
    could not be made: nothing was sent) or ``"other"``; ``detail``: the client's text (may hold
    the URL: callers redact it)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


class Transport:
    """Sends requests over one bounded connection pool. Subclasses: one per client library."""

    name = "?"

    async def send(self, method: str, url: str, body: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> Answer:
        """Send one request (``url`` already percent-encoded) and read the whole answer.

        Raises :class:`TransportFailure` when no answer came; cancelling the awaiting task
        aborts the request."""
        raise NotImplementedError

    async def close(self) -> None:
        """Close the pool (idempotent)."""


def check_transport(transport: Any) -> str:
    """``transport`` validated (definition time): one of :data:`TRANSPORTS`."""
    name = str(transport).strip().lower() if isinstance(transport, str) else None
    if name not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(map(repr, TRANSPORTS))}, got {transport!r} "
                         "('auto' picks pyreqwest when installed, else aiohttp)")
    return name


_fallback_logged = False


def resolve_transport(transport: str) -> str:
    """The client library ``transport`` means here: ``"auto"`` -> pyreqwest if importable, else
    aiohttp (logged once per process). ``"pyreqwest"`` without it installed -> ImportError."""
    global _fallback_logged
    name = check_transport(transport)
    if name == "auto" and os.environ.get("AIOSPARK_HTTP_TRANSPORT", "").strip():
        try:
            name = check_transport(os.environ["AIOSPARK_HTTP_TRANSPORT"])
        except ValueError as exc:
            raise ValueError(f"AIOSPARK_HTTP_TRANSPORT: {exc}") from None
    if name == "aiohttp":
        return name
    try:
        import pyreqwest.client  # noqa: F401
    except ImportError as exc:
        if name == "pyreqwest":
            raise ImportError(f"transport='pyreqwest' but pyreqwest cannot be imported ({exc}): "
                              "pip install pyreqwest (Python >= 3.11), or use transport='aiohttp'") from None
        if not _fallback_logged:
            _fallback_logged = True
            log.warning("aiospark HTTP: pyreqwest is not installed (%s); using aiohttp, about half "
                        "the requests/s (pip install pyreqwest on Python >= 3.11)", exc)
        return "aiohttp"
    return "pyreqwest"


async def new_transport(transport: str, *, headers: Mapping[str, str], max_connections: int,
                        timeout: float | None) -> Transport:
    """A new :class:`Transport` of the library ``transport`` resolves to (call on the loop that
    will use it)."""
    name = resolve_transport(transport)
    if name == "pyreqwest":
        from .http_pyreqwest import PyreqwestTransport
        return PyreqwestTransport(headers=headers, max_connections=max_connections, timeout=timeout)
    return AiohttpTransport(headers=headers, max_connections=max_connections, timeout=timeout)


def _proxy_env() -> bool:
    """Whether the environment names a proxy (``HTTP_PROXY``, ``https_proxy``, ``ALL_PROXY``, ...)."""
    return any(k.lower() in ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")
               for k in os.environ)


#: status -> reason phrase (HTTPStatus(status) costs an enum look-up)
_REASONS = {s.value: s.phrase for s in http.HTTPStatus}


class AiohttpTransport(Transport):
    """aiohttp: a ``ClientSession`` with a ``TCPConnector(limit=max_connections)``."""

    name = "aiohttp"

    def __init__(self, *, headers: Mapping[str, str], max_connections: int, timeout: float | None) -> None:
        import aiohttp
        from yarl import URL

        self._aiohttp, self._url = aiohttp, URL
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections),
            timeout=aiohttp.ClientTimeout(total=timeout), headers=dict(headers),
            # trust_env: proxies from the environment; it costs a look at os.environ per request,
            # so only when a proxy variable is set at all
            raise_for_status=False, trust_env=_proxy_env())

    async def send(self, method: str, url: str, body: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> Answer:
        aiohttp = self._aiohttp
        try:
            # encoded=True: the URL is already percent-encoded; yarl would re-encode '%'
            async with self._session.request(method, self._url(url, encoded=True), data=body,
                                             headers=headers) as resp:
                data = await resp.read()
                return Answer(resp.status, resp.headers, data, resp.reason)
        except asyncio.TimeoutError:
            raise TransportFailure("timeout", "no response in time") from None
        except aiohttp.ClientConnectorError as exc:
            why = getattr(exc.os_error, "strerror", None) or str(exc)
            raise TransportFailure("connect", why) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportFailure("other", f"{type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        await self._session.close()
