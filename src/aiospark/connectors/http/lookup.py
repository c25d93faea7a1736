"""HTTP lookups: ``GET http://host/item/{id}`` -> JSON rows, over pyreqwest or aiohttp.

Example::

    items = HttpLookup("http://127.0.0.1:8080/item/{id}", "name STRING, price DOUBLE",
                       auth_token_env="ITEMS_TOKEN")
    await items.open()
    await items.lookup((42,))        # [{'name': 'pen', 'price': 1.5}] ; 404 -> []
    await items.close()

Responses: a JSON object is one row, a list is many rows, ``null``/404/204 is a
miss; fields are mapped to the schema's columns (missing -> None) and converted
to the declared types. ``json_path="data.item"`` selects a nested value first: a path
that is absent from the answer is an error (the answer is not what was expected), while
an explicit ``null`` there is a miss. A 2xx body that is empty or not JSON is an error.

Status codes: 404 -> miss when the answer is the service's own, i.e. its body is empty or
JSON; a 404 with another body (the HTML or text page of a proxy, an ingress or a web
server that does not know the path: a wrong ``url_template`` looks like this) is an error,
never a miss. ``not_found="any"`` takes every 404 for a miss, ``not_found="error"`` none.
429 and 5xx -> :class:`HttpStatusError` with ``retryable=True`` and ``retry_after``
(seconds, from the Retry-After header); any other non-2xx -> :class:`HttpStatusError`
with ``retryable=False``.

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
(:mod:`aiospark.connectors.redaction`). The transport (a bounded connection pool) is
shared by every ``HttpLookup`` of one configuration in the process
(:mod:`aiospark.connectors.clients`).

Transport (``transport=``): ``"auto"`` (default) sends with pyreqwest, a Rust client about twice
as fast as aiohttp, when it is installed, else with aiohttp (logged once); ``"pyreqwest"`` or
``"aiohttp"`` pick one (:mod:`.choose`). JSON is decoded with orjson.

This module holds the lookup itself (configuration, the shared session, sending, batch splitting);
:mod:`.request` builds what is sent (URLs, keys, auth headers) and :mod:`.response`
reads what comes back (status errors, JSON rows).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ...lookup import keys as keyconv
from ...lookup.schema import parse_schema
from ...lookup.source import LookupSource
from ..checks import check_positive
from ..clients import SHARED, config_key
from ..errors import ConnectorError, ConnectorTimeout
from ..keys import KeyTemplate, check_key, has_null
from ..redaction import Redactor, scrubbed
from ..secrets import Secret, is_credential_header, resolve_secret
from .choose import check_transport, new_transport, resolve_transport
from .codec import dumps, loads
from .request import PLAIN_HEADERS, json_key, mask_query, request_headers, split_url, url_key
from .response import HttpStatusError, JsonRows, status_error
from .transport import Answer, TransportFailure

__all__ = ["HttpLookup"]

#: The header of a request with a JSON body
_JSON_HEADERS = {"Content-Type": "application/json"}
#: HttpLookup's not_found= values: which 404 answers are misses
_NOT_FOUND = ("json", "any", "error")
#: URLs with a query string in exception texts: the query may hold keys, so it is cut off
_QUERY_RE = re.compile(r"(https?://[^\s'\"?#]*)\?[^\s'\"]*")


class HttpLookup(LookupSource):
    """Look up rows over HTTP (one shared connection pool per configuration and process).

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
        transport: ``"auto"`` (pyreqwest when installed, else aiohttp), ``"pyreqwest"`` or
            ``"aiohttp"`` (see :mod:`aiospark.connectors.http.choose`).
        not_found: which 404 answers are misses: ``"json"`` (default: an empty or JSON body),
            ``"any"``, or ``"error"`` (the service says "no row" with 200 ``null``/``[]`` or 204).
    """

    __module__ = "aiospark.connectors.http"  # its public home (reprs, pickles)

    #: the class default serves instances pickled before ``transport`` existed
    transport: str = "auto"
    not_found: str = "json"

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
        transport: str = "auto",
        not_found: str = "json",
    ) -> None:
        self.schema = schema
        self.transport = check_transport(transport)
        if not_found not in _NOT_FOUND:
            raise ValueError(f"not_found must be one of {', '.join(map(repr, _NOT_FOUND))}, got "
                             f"{not_found!r} ('json': a 404 with an empty or JSON body is a miss)")
        self.not_found = not_found
        url, self._hostport, self._user, self._password = split_url(url_template, "url_template", True)
        self._tpl = KeyTemplate(url, key_columns, "url_template")
        self.key_columns = self._tpl.key_columns
        self.method = str(method).upper()
        if self.method not in ("GET", "POST"):
            raise ValueError(f"method must be 'GET' or 'POST', got {method!r}")
        self._headers = {str(k): (v.reveal() if isinstance(v, Secret) else str(v))
                         for k, v in (headers or {}).items()}
        # the headers whose values may decide the rows found (X-Region, Accept-Language...): never a
        # credential-like name, never a value the user wrapped in Secret
        self._plain_headers = {str(k): str(v) for k, v in (headers or {}).items()
                               if not isinstance(v, Secret) and not is_credential_header(str(k))}
        if json_path is not None and (not isinstance(json_path, str) or not json_path.strip(".")):
            raise ValueError(f"json_path must be a dotted path like 'data.items', got {json_path!r}")
        self.json_path = json_path
        self.batch_url: str | None = None
        if batch_url is not None:
            self.batch_url, _, _, _ = split_url(batch_url, "batch_url", False)
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
        self._answers = JsonRows(schema, parse_schema(schema), json_path, self._name)
        self._session: Any = None
        self._redactor = self._make_redactor()

    def _make_redactor(self) -> Redactor:
        header_secrets = (Secret(v) for k, v in self._headers.items() if k.lower() not in PLAIN_HEADERS)
        return Redactor(self._token, self._password, *header_secrets, basic=(self._user, self._password))

    @property
    def supports_batch(self) -> bool:  # type: ignore[override]
        return self.batch_url is not None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_session": None, "_session_key": None}

    def __aiospark_fingerprint__(self) -> dict[str, Any]:
        """What decides the rows found, for a journal's manifest: the URL template (credential-like
        query values masked), method, the headers (names, and the values of those that cannot be
        credentials), the JSON path, the batch endpoint and its functions, the schema."""
        return {"url_template": mask_query(self._tpl.template), "method": self.method,
                "headers": sorted(self._headers), "header_values": self._plain_headers, "json_path": self.json_path, "batch_url": self.batch_url,
                "batch_request": self._batch_request, "batch_response": self._batch_response,
                "schema": self.schema, "key_columns": list(self.key_columns), "not_found": self.not_found}

    def __repr__(self) -> str:
        tpl = mask_query(self._tpl.template)
        return (f"HttpLookup({tpl!r}, {self.schema!r}, method={self.method!r}, "
                f"batch_url={self.batch_url!r}, headers={sorted(self._headers)!r}, "
                f"auth_token={'***' if self._token else None})")

    __str__ = __repr__

    @scrubbed
    async def open(self) -> None:
        """Take this configuration's shared transport (made on first use)."""
        if self._session is not None:
            return
        if self._token is None and self._token_env:
            self._token = resolve_secret(None, self._token_env)
            if self._token is None:
                raise ConnectorError(f"environment variable {self._token_env} (auth_token_env) is "
                                     "not set", source=self._name)
            self._redactor = self._make_redactor()
        headers = request_headers(self._headers, self._token, self._auth_scheme, self._user,
                                  self._password)
        library = resolve_transport(self.transport)  # 'auto' resolved here, on the executor
        key = config_key("http", library, sorted(headers.items()), self.max_connections, self.timeout)

        async def create() -> Any:
            return await new_transport(library, headers=headers, max_connections=self.max_connections,
                                       timeout=self.timeout)

        self._session = await SHARED.acquire(key, create, _close_session)
        self._session_key = key

    async def close(self) -> None:
        """Give the shared session back (the last user closes it). Safe to call twice."""
        session, self._session = self._session, None
        if session is not None:
            await SHARED.release(self._session_key)

    # --- requests ------------------------------------------------------------------------

    def _short(self, text: str) -> str:
        """Redacted client error text with URL query strings (which may hold keys) cut off."""
        return _QUERY_RE.sub(r"\1?...", self._redactor.scrub(text[:10_000], limit=300))

    def _send(self, method: str, url: str, body: Any) -> Awaitable[Answer]:
        """The transport's request, to be awaited by the caller: no coroutine of its own, as this
        is on every row's path. Await it within ``except TransportFailure`` (see :meth:`_failure`)."""
        transport = self._session
        if transport is None:
            raise RuntimeError(f"{self._name} is not open: call 'await source.open()' first")
        if body is None:
            return transport.send(method, url)
        return transport.send(method, url, dumps(body), _JSON_HEADERS)

    def _failure(self, exc: TransportFailure, method: str, url: str) -> ConnectorError:
        """The error for a request that got no answer (retryable, except a timeout's)."""
        if exc.kind == "timeout":
            return ConnectorTimeout(f"no response within {self.timeout}s to {method} {self._where(url)}",
                                    source=self._name)
        if exc.kind == "connect":
            return ConnectorError(f"cannot connect to {self._hostport}: {self._short(exc.detail)}",
                                  source=self._name, retryable=True)
        return ConnectorError(f"{method} {self._where(url)} failed: {self._short(exc.detail)}",
                              source=self._name, retryable=True)

    def _decode(self, answer: Answer, method: str, url: str, missing_ok: bool) -> Any:
        """The JSON of a 2xx answer (None for 204, or for a 404 the service sent when
        ``missing_ok``); any other status raises :class:`HttpStatusError`; a 2xx body that is
        not JSON (an empty one included) raises :class:`ConnectorError`."""
        status, data = answer.status, answer.body
        if status == 204 or (status == 404 and missing_ok and self._is_miss(data)):
            return None
        if 200 <= status < 300:
            try:
                return loads(data)
            except ValueError:
                what = "an empty body" if not data.strip() else f"a non-JSON body ({len(data)} bytes)"
                raise ConnectorError(f"{method} {self._where(url)} returned {what} with status "
                                     f"{status}; a missing row is a 404, a 204, or JSON null",
                                     source=self._name) from None
        hint = ""
        if status == 404 and missing_ok and self.not_found == "json":
            hint = ("a 404 whose body is not JSON is not taken for a missing row: a proxy, or a "
                    "server that does not know this path, answers so; check url_template, or pass "
                    "not_found='any' if the service answers missing rows so")
        raise status_error(status, answer.reason, answer.header("Retry-After"), data,
                           f"{method} {self._where(url)}", self._redactor, self._name, hint)

    def _is_miss(self, body: bytes) -> bool:
        """Whether a 404 with ``body`` is the service's own "no such row" (see ``not_found``)."""
        policy = self.not_found
        if policy == "any":
            return True
        if policy == "error":
            return False
        if not body.strip():
            return True
        try:
            loads(body)
        except ValueError:
            return False
        return True

    def _where(self, url: str) -> str:
        path = urlsplit(url).path or "/"
        return path if len(path) <= 200 else path[:197] + "..."

    async def lookup(self, key: tuple) -> list[dict]:
        """GET (or POST) the rendered URL; 404 -> ``[]``; see the module doc for errors."""
        try:  # what @scrubbed does, without a coroutine around the coroutine on this path
            key = check_key(key, len(self.key_columns), self._name)
            if has_null(key):
                return []
            try:
                url = self._tpl.render(key, url_key)
                body = ({c: json_key(v) for c, v in zip(self.key_columns, key)}
                        if self.method == "POST" else None)
            except keyconv.KeyMismatch:
                return []
            try:
                answer = await self._send(self.method, url, body)
            except TransportFailure as exc:
                raise self._failure(exc, self.method, url) from None
            return self._answers.answer(self._decode(answer, self.method, url, missing_ok=True))
        except Exception as exc:
            clean = self._redactor.exception(exc, self._name)
            if clean is exc:
                raise
            raise clean from None

    @scrubbed
    async def lookup_batch(self, keys: Sequence[tuple]) -> dict[tuple, Any]:
        """One ``POST batch_url`` for all ``keys`` (split on a 4xx); see the module doc."""
        if self.batch_url is None:
            raise NotImplementedError(f"{self._name} has no batch_url")
        arity = len(self.key_columns)
        wanted: list[tuple[tuple, tuple]] = []  # (key, its JSON form)
        out: dict[tuple, Any] = {}
        for k in (check_key(k, arity, self._name) for k in keys):
            if has_null(k):
                continue
            try:
                wanted.append((k, tuple(json_key(v) for v in k)))
            except keyconv.KeyMismatch:
                pass  # JSON cannot carry it, so no key of the service's JSON protocol equals it
            except keyconv.KeyNotRenderable as exc:  # this key's own error; the others go on
                out[k] = ConnectorError(str(exc), source=self._name)
        if wanted:
            await self._batch(wanted, out)
        return out

    async def _batch(self, wanted: list[tuple[tuple, tuple]], out: dict[tuple, Any]) -> None:
        url = self.batch_url
        assert url is not None  # batch mode only
        arity = len(self.key_columns)
        sent = [j for _, j in wanted]
        if self._batch_request is not None:
            body = self._batch_request(sent)
        else:
            body = {"keys": [j[0] if arity == 1 else list(j) for j in sent]}
        try:
            answer = await self._send("POST", url, body)
        except TransportFailure as exc:
            raise self._failure(exc, "POST", url) from None
        try:
            data = self._decode(answer, "POST", url, missing_ok=False)
        except HttpStatusError as exc:
            if exc.retryable or exc.status < 400 or exc.status >= 500:
                raise
            if len(wanted) == 1:  # refused on its own: this key's error
                out[wanted[0][0]] = exc
                return
            half = len(wanted) // 2  # one key may be what the server refuses: split
            await asyncio.gather(self._batch(wanted[:half], out), self._batch(wanted[half:], out))
            return
        self._answers.batch(data, wanted, arity, self._batch_response, out)


async def _close_session(session: Any) -> None:
    await session.close()
