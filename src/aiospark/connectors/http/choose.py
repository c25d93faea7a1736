"""Which client library carries HTTP requests: the choice behind ``transport=``.

``HttpLookup``, :class:`~aiospark.connectors.http.HttpClient` and the OpenAI functions
(:mod:`aiospark.connectors.openai`, ``client=``) send through a :class:`Transport`; this module
makes one, picked by ``transport=``:

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

The seam itself (``Transport``, ``Answer``, ``TransportFailure``) is in
:mod:`aiospark.connectors.http.transport`; this module decides which implementation to make, and
owns the one fallback between them: a URL that pyreqwest would send to another path (a path segment
of only encoded dots, :func:`~aiospark.connectors.http._pyreqwest.rewrites_path`) goes by an aiohttp
transport of the same settings, made on first need.

Example::

    t = await new_transport("auto", headers={"Accept": "application/json"},
                            max_connections=100, timeout=10.0)
    answer = await t.send("GET", "http://127.0.0.1:8080/item/1")
    await t.close()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from ._aiohttp import AiohttpTransport
from .transport import Answer, Transport

__all__ = ["TRANSPORTS", "check_transport", "new_transport", "resolve_transport"]

log = logging.getLogger("aiospark.connectors.http")

#: The values ``transport=`` accepts
TRANSPORTS = ("auto", "pyreqwest", "aiohttp")


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


class _LiteralPaths(Transport):
    """pyreqwest, with the URLs it would rewrite sent by aiohttp (same settings, made on first need)."""

    name = "pyreqwest"

    def __init__(self, fast: Transport, rewrites_path: Callable[[str], bool], settings: dict[str, Any]) -> None:
        self._fast, self._rewrites, self._settings = fast, rewrites_path, settings
        self._literal: Transport | None = None

    # not ``async def``: the coroutine of the transport that sends is handed back as it is, so a
    # request costs no extra frame here
    def send(self, method: str, url: str, body: bytes | None = None,
             headers: Mapping[str, str] | None = None) -> Coroutine[Any, Any, Answer]:
        if ("%2E" in url or "%2e" in url) and self._rewrites(url):
            if self._literal is None:
                self._literal = AiohttpTransport(**self._settings)
            return self._literal.send(method, url, body, headers)
        return self._fast.send(method, url, body, headers)

    async def close(self) -> None:
        literal, self._literal = self._literal, None
        try:
            if literal is not None:
                await literal.close()
        finally:
            await self._fast.close()


async def new_transport(transport: str, *, headers: Mapping[str, str], max_connections: int,
                        timeout: float | None) -> Transport:
    """A new :class:`Transport` of the library ``transport`` resolves to (call on the loop that
    will use it)."""
    name = resolve_transport(transport)
    settings: dict[str, Any] = dict(headers=headers, max_connections=max_connections, timeout=timeout)
    if name == "pyreqwest":
        from ._pyreqwest import PyreqwestTransport, rewrites_path
        return _LiteralPaths(PyreqwestTransport(**settings), rewrites_path, settings)
    return AiohttpTransport(**settings)
