"""HTTP lookups on aiohttp: ``GET http://host/item/{id}`` -> JSON rows.

Example::

    items = HttpLookup("http://127.0.0.1:8080/item/{id}", "name STRING, price DOUBLE",
                       auth_token_env="ITEMS_TOKEN")
    await items.open()
    await items.lookup((42,))        # [{'name': 'pen', 'price': 1.5}] ; 404 -> []
    await items.close()

Responses: a JSON object is one row, a list is many rows, ``null``/404/204 is a
miss; fields are mapped to the schema's columns (missing -> None) and converted
to the declared types. ``json_path="data.item"`` selects a nested value first.

Status codes: 404 -> miss; 429 and 5xx -> :class:`HttpStatusError` with
``retryable=True`` and ``retry_after`` (seconds, from the Retry-After header);
any other non-2xx -> :class:`HttpStatusError` with ``retryable=False``.

Batch mode (``batch_url=...``): one ``POST batch_url`` per batch with body
``{"keys": [k, ...]}`` -- each ``k`` is the key value for one key column, or the
list of values for composite keys. The answer must be
``{"results": {"<key>": row | [rows] | null, ...}}`` where ``<key>`` is the
value as text (strings as is, others as JSON: ``42``, ``1.5``, ``true``) or, for
composite keys, the compact JSON list (``["a",1]``); or ``{"results": [...]}``
aligned with the request's keys. Absent keys are misses. ``batch_request(keys)``
and ``batch_response(body, keys) -> {key: row | rows | None}`` replace the default
formats. Each key gets its own outcome: a row that does not fit the schema is that key's
error, and a batch the server refuses with a 4xx status (other than 429) is split in halves
until each key stands alone, whose refusal is then its own error; the other keys go on.

Keys are sent as Spark's ``CAST(key AS STRING)`` prints them (:mod:`aiospark.lookup.keys`);
in a URL, BINARY keys are percent-encoded byte by byte; in a JSON batch body, a key JSON cannot
carry (bytes that are not UTF-8, NaN) is a miss. Every secret (token, basic-auth pair, header
values, URL userinfo) is scrubbed from messages, response bodies included
(:mod:`aiospark.connectors.redaction`). The aiohttp session (a bounded connection pool) is
shared by every ``HttpLookup`` of one configuration in the process
(:mod:`aiospark.connectors.shared`).
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import math
import re
import time
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote, urlsplit, urlunsplit, unquote

from ..lookup import keys as keyconv
from ..lookup.schema import RowMapper, parse_schema
from ..lookup.source import LookupSource
from ._common import (ConnectorError, ConnectorTimeout, KeyTemplate, Secret, check_key,
                      check_positive, has_null, resolve_secret, short)
from .redaction import Redactor, scrubbed
from .shared import SHARED, config_key

__all__ = ["HttpLookup", "HttpStatusError"]

_QUERY_RE = re.compile(r"(https?://[^\s'\"?#]*)\?[^\s'\"]*")
_SECRETISH = ("key", "token", "secret", "pass", "auth", "sig", "credential")
#: Request headers whose values are not secrets (every other header value is scrubbed)
_PLAIN_HEADERS = {"accept", "accept-encoding", "accept-language", "cache-control", "content-type",
                  "user-agent"}


class HttpStatusError(ConnectorError):
    """A non-success HTTP status. ``status``; ``retryable`` (429/5xx); ``retry_after`` seconds."""

    def __init__(self, message: str, *, source: str = "", status: int = 0, retryable: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message, source=source, retryable=retryable)
        self.status = status
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _encode(v: Any) -> str:
    if isinstance(v, (bytes, bytearray)):  # literal bytes, UTF-8 or not
        s: Any = bytes(v)
    else:
        s = keyconv.to_text(v)  # KeyMismatch (no text form): the caller's miss
    if s in (".", "..", b".", b".."):  # a bare dot segment would be normalised away by servers
        return "%2E" * len(s)
    return quote(s, safe="")


def _json_key(v: Any) -> Any:
    """A key value as the batch body carries it; KeyMismatch when JSON cannot carry it."""
    if type(v) in (str, int, bool):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise keyconv.KeyMismatch(f"{v!r} has no JSON form")
        return v
    return keyconv.to_text(v)


def _key_text(v: Any) -> str:
    if type(v) is int:  # the common case; what json.dumps would give
        return str(v)
    return v if isinstance(v, str) else json.dumps(v)


def _split_url(url: str, what: str, allow_fields: bool) -> tuple[str, str, Secret | None, Secret | None]:
    """Return (url without userinfo, 'host:port', user, password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute http:// or https:// URL, got {url!r}")
    if "{" in parts.netloc or "}" in parts.netloc:
        raise ValueError(f"{what} {url!r}: placeholders are allowed in the path and query only")
    if not allow_fields and ("{" in url or "}" in url):
        raise ValueError(f"{what} must be a fixed URL without placeholders, got {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    user = Secret(unquote(parts.username)) if parts.username else None
    pw = Secret(unquote(parts.password)) if parts.password else None
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=netloc)), f"{host}:{port}", user, pw


def _mask_query(url: str) -> str:
    parts = urlsplit(url)
    if not parts.query:
        return url
    masked = []
    for item in parts.query.split("&"):
        name, eq, _ = item.partition("=")
        secretish = any(s in name.lower() for s in _SECRETISH)
        masked.append(f"{name}=***" if eq and secretish else item)
    return urlunsplit(parts._replace(query="&".join(masked)))


class HttpLookup(LookupSource):
    """Look up rows over HTTP with aiohttp (one ``ClientSession`` per ``open()``).

    Args:
        url_template: e.g. ``"http://127.0.0.1:8080/item/{id}"``; placeholders in the
            path/query are named after the key columns (or ``{0}``, ``{1}``). Each
            value is sent as ``urllib.parse.quote(str(v), safe="")``.
        schema: Spark DDL of the returned columns, e.g. ``"name STRING, price DOUBLE"``.
        key_columns: key tuple order (default: order of the placeholders).
        method: ``"GET"`` (default) or ``"POST"`` (sends ``{column: value}`` as JSON).
        headers: extra request headers (values are never shown in ``repr``).
        json_path: dotted path of the value holding the row(s), e.g. ``"data.items"``.
        batch_url, batch_request, batch_response: enable batching (see module doc).
        timeout: total seconds per request. max_connections: connection pool size.
        auth_token / auth_token_env: bearer token, or the environment variable
            holding it (read at construction, else at ``open()``).
        max_batch_size, max_batch_delay: batching settings used by ``Lookuper``.
    """

    def __init__(
        self,
        url_template: str,
        schema: str,
        *,
        key_columns: Sequence[str] | None = None,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        json_path: str | None = None,
        batch_url: str | None = None,
        batch_request: Callable[[list[tuple]], Any] | None = None,
        batch_response: Callable[[Any, list[tuple]], Mapping[tuple, Any]] | None = None,
        timeout: float = 10.0,
        max_connections: int = 100,
        auth_token: str | None = None,
        auth_token_env: str | None = None,
        auth_scheme: str = "Bearer",
        max_batch_size: int = 100,
        max_batch_delay: float = 0.005,
    ) -> None:
        self.schema = schema
        self._fields = parse_schema(schema)
        self._mapper = RowMapper(self._fields)
        url, self._hostport, self._user, self._password = _split_url(url_template, "url_template", True)
        self._tpl = KeyTemplate(url, key_columns, "url_template")
        self.key_columns = self._tpl.key_columns
        self.method = str(method).upper()
        if self.method not in ("GET", "POST"):
            raise ValueError(f"method must be 'GET' or 'POST', got {method!r}")
        self._headers = {str(k): (v.reveal() if isinstance(v, Secret) else str(v))
                         for k, v in (headers or {}).items()}
        if json_path is not None and (not isinstance(json_path, str) or not json_path.strip(".")):
            raise ValueError(f"json_path must be a dotted path like 'data.items', got {json_path!r}")
        self.json_path = json_path
        self._path = tuple(json_path.split(".")) if json_path else ()
        self.batch_url = None
        if batch_url is not None:
            self.batch_url, _, _, _ = _split_url(batch_url, "batch_url", False)
        for name, fn in (("batch_request", batch_request), ("batch_response", batch_response)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be a callable, got {fn!r}")
            if fn is not None and batch_url is None:
                raise ValueError(f"{name} needs batch_url")
        self._batch_request, self._batch_response = batch_request, batch_response
        check_positive("timeout", timeout)
        check_positive("max_connections", max_connections, integer=True)
        check_positive("max_batch_size", max_batch_size, integer=True)
        if not isinstance(max_batch_delay, (int, float)) or max_batch_delay < 0:
            raise ValueError(f"max_batch_delay must be seconds >= 0, got {max_batch_delay!r}")
        self.timeout, self.max_connections = float(timeout), max_connections
        self.max_batch_size, self.max_batch_delay = max_batch_size, float(max_batch_delay)
        self._token_env, self._auth_scheme = auth_token_env, auth_scheme
        self._token = resolve_secret(auth_token, auth_token_env)
        if (auth_token is not None or auth_token_env) and (self._user or self._password):
            raise ValueError("give either auth_token/auth_token_env or user:password in the URL, not both")
        if any(h.lower() == "authorization" for h in self._headers) and (
                auth_token is not None or auth_token_env or self._user or self._password):
            raise ValueError("an 'Authorization' header conflicts with auth_token/URL credentials")
        self._name = f"HttpLookup({self._hostport})"
        self._session: Any = None
        self._redactor = self._make_redactor()

    def _make_redactor(self) -> Redactor:
        header_secrets = (Secret(v) for k, v in self._headers.items() if k.lower() not in _PLAIN_HEADERS)
        return Redactor(self._token, self._password, *header_secrets, basic=(self._user, self._password))

    @property
    def supports_batch(self) -> bool:  # type: ignore[override]
        return self.batch_url is not None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_session": None, "_session_key": None}

    def __repr__(self) -> str:
        tpl = _mask_query(self._tpl.template)
        return (f"HttpLookup({tpl!r}, {self.schema!r}, method={self.method!r}, "
                f"batch_url={self.batch_url!r}, headers={sorted(self._headers)!r}, "
                f"auth_token={'***' if self._token else None})")

    __str__ = __repr__

    def _request_headers(self) -> dict[str, str]:
        headers = dict(self._headers)
        if self._token:
            headers["Authorization"] = f"{self._auth_scheme} {self._token.reveal()}".strip()
        elif self._user or self._password:
            pair = (f"{self._user.reveal() if self._user else ''}:"
                    f"{self._password.reveal() if self._password else ''}")
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        return headers

    @scrubbed
    async def open(self) -> None:
        """Take this configuration's shared aiohttp session (made on first use)."""
        import aiohttp

        if self._session is not None:
            return
        if self._token is None and self._token_env:
            self._token = resolve_secret(None, self._token_env)
            if self._token is None:
                raise ConnectorError(f"environment variable {self._token_env} (auth_token_env) is "
                                     "not set", source=self._name)
            self._redactor = self._make_redactor()
        headers = self._request_headers()
        key = config_key("http", sorted(headers.items()), self.max_connections, self.timeout)

        async def create() -> Any:
            return aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers=headers, raise_for_status=False,
            )

        self._session = await SHARED.acquire(key, create, _close_session)
        self._session_key = key

    async def close(self) -> None:
        """Give the shared session back (the last user closes it). Safe to call twice."""
        session, self._session = self._session, None
        if session is not None:
            await SHARED.release(self._session_key)

    # --- requests ------------------------------------------------------------------------

    def _short(self, exc: BaseException) -> str:
        """Redacted exception text with URL query strings (which may hold keys) cut off."""
        return _QUERY_RE.sub(r"\1?...", self._redactor.scrub(short(exc, limit=10_000), limit=300))

    async def _request(self, method: str, url: str, body: Any, missing_ok: bool) -> Any:
        import aiohttp
        from yarl import URL

        session = self._session
        if session is None:
            raise RuntimeError(f"{self._name} is not open: call 'await source.open()' first")
        try:
            async with session.request(method, URL(url, encoded=True), json=body) as resp:
                status = resp.status
                if status == 204 or (status == 404 and missing_ok):
                    return None
                data = await resp.read()
                if 200 <= status < 300:
                    try:
                        return json.loads(data) if data.strip() else None
                    except ValueError:
                        raise ConnectorError(f"{method} {self._where(url)} returned a non-JSON body "
                                             f"({len(data)} bytes)", source=self._name) from None
                raise self._status_error(method, url, resp, data)
        except ConnectorError:
            raise
        except asyncio.TimeoutError:
            raise ConnectorTimeout(f"no response within {self.timeout}s to {method} "
                                   f"{self._where(url)}", source=self._name) from None
        except aiohttp.ClientConnectorError as exc:
            why = getattr(exc.os_error, "strerror", None) or self._short(exc)
            raise ConnectorError(f"cannot connect to {self._hostport}: {why}", source=self._name,
                                 retryable=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ConnectorError(f"{method} {self._where(url)} failed: {self._short(exc)}",
                                 source=self._name, retryable=True) from None

    def _where(self, url: str) -> str:
        path = urlsplit(url).path or "/"
        return path if len(path) <= 200 else path[:197] + "..."

    def _status_error(self, method: str, url: str, resp: Any, data: bytes) -> HttpStatusError:
        status = resp.status
        retryable = status == 429 or status >= 500
        retry_after = parse_retry_after(resp.headers.get("Retry-After")) if retryable else None
        # scrub the whole body before cutting it: a cut could leave half a secret behind
        text = self._redactor.scrub(data[:65_536].decode("utf-8", "replace"), limit=200).strip()
        msg = f"HTTP {status} {resp.reason or ''} for {method} {self._where(url)}".rstrip()
        if text:
            msg += f": {text}"
        return HttpStatusError(msg, source=self._name, status=status, retryable=retryable,
                               retry_after=retry_after)

    # --- rows ----------------------------------------------------------------------------

    def _select(self, data: Any) -> Any:
        for part in self._path:
            if isinstance(data, Mapping):
                data = data.get(part)
            elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
                data = data[int(part)]
            else:
                return None
        return data

    def _rows(self, data: Any) -> list[dict]:
        mapper = self._mapper
        if data is None:
            return []
        if isinstance(data, Mapping):
            return [mapper.row(data)]
        items = data if isinstance(data, list) else [data]
        rows = []
        for item in items:
            if isinstance(item, Mapping):
                rows.append(mapper.row(item))
            elif len(self._fields) == 1 and item is not None:
                rows.append(mapper.single(item))
            elif item is not None:
                raise ConnectorError(f"expected JSON objects for schema {self.schema!r}, got "
                                     f"{type(item).__name__}", source=self._name)
        return rows

    def _rows_or_error(self, data: Any) -> Any:
        """A key's rows, or its own ConnectorError (a row that does not fit the schema)."""
        try:
            return self._rows(data)
        except ConnectorError as exc:
            return exc
        except ValueError as exc:
            return ConnectorError(str(exc), source=self._name)

    @scrubbed
    async def lookup(self, key: tuple) -> list[dict]:
        """GET (or POST) the rendered URL; 404 -> ``[]``; see the module doc for errors."""
        key = check_key(key, len(self.key_columns), self._name)
        if has_null(key):
            return []
        try:
            url = self._tpl.render(key, _encode)
            body = ({c: _json_key(v) for c, v in zip(self.key_columns, key)}
                    if self.method == "POST" else None)
        except keyconv.KeyMismatch:
            return []
        data = await self._request(self.method, url, body, missing_ok=True)
        try:
            return self._rows(self._select(data) if self._path else data)
        except ValueError as exc:
            raise ConnectorError(str(exc), source=self._name) from None

    @scrubbed
    async def lookup_batch(self, keys: Sequence[tuple]) -> dict[tuple, Any]:
        """One ``POST batch_url`` for all ``keys`` (split on a 4xx); see the module doc."""
        if self.batch_url is None:
            raise NotImplementedError(f"{self._name} has no batch_url")
        arity = len(self.key_columns)
        wanted: list[tuple[tuple, tuple]] = []  # (key, its JSON form)
        for k in (check_key(k, arity, self._name) for k in keys):
            if has_null(k):
                continue
            try:
                wanted.append((k, tuple(_json_key(v) for v in k)))
            except keyconv.KeyMismatch:
                pass  # JSON cannot carry it: a miss
        out: dict[tuple, Any] = {}
        if wanted:
            await self._batch(wanted, out)
        return out

    async def _batch(self, wanted: list[tuple[tuple, tuple]], out: dict[tuple, Any]) -> None:
        arity = len(self.key_columns)
        sent = [j for _, j in wanted]
        if self._batch_request is not None:
            body = self._batch_request(sent)
        else:
            body = {"keys": [j[0] if arity == 1 else list(j) for j in sent]}
        try:
            data = await self._request("POST", self.batch_url, body, missing_ok=False)
        except HttpStatusError as exc:
            if exc.retryable or exc.status < 400 or exc.status >= 500:
                raise
            if len(wanted) == 1:  # refused on its own: this key's error
                out[wanted[0][0]] = exc
                return
            half = len(wanted) // 2  # one key may be what the server refuses: split
            await asyncio.gather(self._batch(wanted[:half], out), self._batch(wanted[half:], out))
            return
        if self._batch_response is not None:
            try:
                found = self._batch_response(data, sent) or {}
            except ValueError as exc:
                raise ConnectorError(str(exc), source=self._name) from None
            for k, j in wanted:
                out[k] = self._rows_or_error(found.get(j))
            return
        results = data.get("results") if isinstance(data, Mapping) else None
        if isinstance(results, Mapping):
            for k, j in wanted:
                text = (_key_text(j[0]) if arity == 1
                        else json.dumps(list(j), separators=(",", ":"), ensure_ascii=False))
                out[k] = self._rows_or_error(results.get(text))
            return
        if isinstance(results, list) and len(results) == len(wanted):
            for (k, _), r in zip(wanted, results):
                out[k] = self._rows_or_error(r)
            return
        raise ConnectorError('batch response must be {"results": {key: rows}} or {"results": [...]} '
                             "aligned with the request's keys", source=self._name)


async def _close_session(session: Any) -> None:
    await session.close()
