"""What :class:`~aiospark.connectors.http.HttpLookup` puts on the wire: URLs, keys, auth headers.

Keys are sent as Spark's ``CAST(key AS STRING)`` prints them (:mod:`aiospark.lookup.keys`); in a
URL, BINARY keys are percent-encoded byte by byte; in a JSON body, a key JSON cannot carry (bytes
that are not UTF-8, NaN) raises :class:`~aiospark.lookup.keys.KeyMismatch`, which callers treat as
a miss. URL userinfo is split off here so that it never reaches a message or a ``repr``.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ...lookup import keys as keyconv
from ..secrets import Secret

#: Query parameter names whose values ``repr`` masks (they usually hold credentials)
_SECRETISH = ("key", "token", "secret", "pass", "auth", "sig", "credential")
#: Request headers whose values are not secrets (every other header value is scrubbed)
PLAIN_HEADERS = {"accept", "accept-encoding", "accept-language", "cache-control", "content-type",
                 "user-agent"}


def url_key(v: Any) -> str:
    """One key value as a URL path/query segment."""
    if type(v) is int:  # the common case: digits and '-' need no quoting (what quote would give)
        return str(v)
    if isinstance(v, (bytes, bytearray)):  # literal bytes, UTF-8 or not
        s: Any = bytes(v)
    else:
        s = keyconv.to_text(v)  # KeyMismatch (no text form): the caller's miss
    if s in (".", "..", b".", b".."):  # a bare dot segment would be normalised away by servers
        return "%2E" * len(s)
    return quote(s, safe="")


def json_key(v: Any) -> Any:
    """A key value as a JSON body carries it; KeyMismatch when JSON cannot carry it."""
    if type(v) in (str, int, bool):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise keyconv.KeyMismatch(f"{v!r} has no JSON form")
        return v
    return keyconv.to_text(v)


def key_text(v: Any) -> str:
    """A JSON key value as the default batch answer names it (``{"results": {"<key>": ...}}``)."""
    if type(v) is int:  # the common case; what json.dumps would give
        return str(v)
    return v if isinstance(v, str) else json.dumps(v)


def composite_key_text(j: tuple) -> str:
    """A composite key as the default batch answer names it: the compact JSON list."""
    return json.dumps(list(j), separators=(",", ":"), ensure_ascii=False)


def redact_url(url: str) -> str:
    """``url`` for a message: its userinfo and credential-like query values replaced by ``***``,
    whatever its scheme (a typo in the scheme must not print the password).

    Example::

        redact_url("htps://bob:pw@h/x?api_key=k")   # 'htps://***@h/x?api_key=***'
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced '[' in the host: cut anything that looks like userinfo
        head, at, tail = url.rpartition("@")
        return f"{head.split('//', 1)[0]}//***@{tail}" if at and "//" in head else url
    if "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1])
    return mask_query(urlunsplit(parts))


def split_url(url: str, what: str, allow_fields: bool) -> tuple[str, str, Secret | None, Secret | None]:
    """Return (url without userinfo, 'host:port', user, password). Errors show the URL redacted."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{what} {redact_url(url)!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute http:// or https:// URL, got {redact_url(url)!r}")
    if "{" in parts.netloc or "}" in parts.netloc:
        raise ValueError(f"{what} {redact_url(url)!r}: placeholders are allowed in the path and query only")
    if not allow_fields and ("{" in url or "}" in url):
        raise ValueError(f"{what} must be a fixed URL without placeholders, got {redact_url(url)!r}")
    port = port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    user = Secret(unquote(parts.username)) if parts.username else None
    pw = Secret(unquote(parts.password)) if parts.password else None
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=netloc)), f"{host}:{port}", user, pw


def mask_query(url: str) -> str:
    """``url`` with the values of credential-like query parameters replaced by ``***``."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    masked = []
    for item in parts.query.split("&"):
        name, eq, _ = item.partition("=")
        secretish = any(s in name.lower() for s in _SECRETISH)
        masked.append(f"{name}=***" if eq and secretish else item)
    return urlunsplit(parts._replace(query="&".join(masked)))


def request_headers(headers: dict[str, str], token: Secret | None, scheme: str,
                    user: Secret | None, password: Secret | None) -> dict[str, str]:
    """The headers of every request: ``headers`` plus a bearer or basic Authorization header."""
    out = dict(headers)
    if token:
        out["Authorization"] = f"{scheme} {token.reveal()}".strip()
    elif user or password:
        pair = f"{user.reveal() if user else ''}:{password.reveal() if password else ''}"
        out["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return out
