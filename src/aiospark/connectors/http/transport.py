"""The one seam between aiospark's HTTP code and a client library: :class:`Transport`.

A transport sends a request and reads the whole answer (:class:`Answer`), or raises
:class:`TransportFailure` when no answer came. ``HttpLookup`` and
:class:`~aiospark.connectors.http.HttpClient` only ever see these three types; one private module
per client library implements them (``_pyreqwest.py``, ``_aiohttp.py``) and
:mod:`aiospark.connectors.http.choose` picks one. This module imports neither library, so the
implementations import it and nothing here imports them back.

Example::

    t = await new_transport("auto", headers={"Accept": "application/json"},
                            max_connections=100, timeout=10.0)
    answer = await t.send("GET", "http://127.0.0.1:8080/item/1")
    answer.status, answer.header("Retry-After")
    await t.close()
"""

from __future__ import annotations

import http
from collections.abc import Mapping
from typing import Any

__all__ = ["Answer", "Transport", "TransportFailure"]

#: status -> reason phrase (HTTPStatus(status) costs an enum look-up)
_REASONS = {s.value: s.phrase for s in http.HTTPStatus}


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
