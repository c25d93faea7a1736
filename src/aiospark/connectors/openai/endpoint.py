"""How :mod:`aiospark.connectors.openai` talks to the endpoint: aiospark's HTTP transport (default)
or the ``openai`` SDK.

``client=`` picks: ``"auto"`` (default), ``"pyreqwest"`` or ``"aiohttp"`` send the API's JSON through
the HTTP seam every aiospark HTTP connector uses (:mod:`aiospark.connectors.http.choose`: pyreqwest
where it is installed, else aiohttp; ``AIOSPARK_HTTP_TRANSPORT`` decides what ``"auto"`` means);
``"openai"`` makes the official SDK's typed calls. Both take the same JSON body and return the decoded JSON answer as a ``dict``, and
both raise the same errors, already scrubbed of the API key:

* 429 and 5xx -> :class:`~aiospark.connectors.HttpStatusError` with ``retryable=True`` and
  ``retry_after`` (seconds, from ``Retry-After``, or OpenAI's ``retry-after-ms``);
  other non-2xx -> a non-retryable :class:`HttpStatusError` (its text quotes the scrubbed body);
* no answer within ``timeout`` -> :class:`~aiospark.connectors.ConnectorTimeout` (retryable);
* cannot connect / connection dropped -> retryable :class:`~aiospark.connectors.ConnectorError`;
* a 2xx answer that is not a JSON object -> non-retryable :class:`ConnectorError`;
* a 2xx answer ``{"error": {...}}`` (no ``choices``/``data``) -> a retryable :class:`ConnectorError`
  carrying the provider's message (a gateway's upstream failure, as a 5xx);
* a 429 ``insufficient_quota`` -> a non-retryable :class:`HttpStatusError`; the account (base_url
  + key) sends nothing for :data:`QUOTA_COOLDOWN` seconds (its requests fail unsent), then one
  request asks again.

One client per process, event loop and configuration (:mod:`aiospark.connectors.clients`): every
task of a Spark worker shares it. Retries are never made here (the SDK's ``max_retries`` is 0):
they are the entry points' ``retry=`` job, which honours ``retry_after``.

Every HTTP answer's headers (a success or an error status) go to ``post``'s ``on_headers``
callback, which the functions use to pace themselves (:mod:`.pacing`).

The SDK client is built from the SDK's public names only, so the same code runs on openai 1.x
(built on ``httpx``) and 3.x (built on ``httpx2``): ``openai.DefaultAsyncHttpxClient`` with a
connection limit of the type of ``openai.DEFAULT_CONNECTION_LIMITS``; nothing here imports an
HTTP library the SDK may not depend on.

Example::

    t = await open_endpoint("auto", "http://127.0.0.1:8000/v1", Secret("sk-..."), 60.0, 100, {}, redactor, name)
    answer = await t.post("/embeddings", {"model": "m", "input": ["a", "b"]}, on_headers=print)
    await t.close()
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from ..clients import SHARED, config_key
from ..errors import ConnectorError, ConnectorTimeout
from ..http.choose import new_transport, resolve_transport
from ..http.codec import dumps, loads
from ..http.response import HttpStatusError, parse_retry_after, status_error
from ..http.transport import Transport, TransportFailure
from ..redaction import Redactor, short
from ..secrets import Secret
from .pacing import MAX_RETRY_AFTER

__all__ = ["CLIENTS", "QUOTA_COOLDOWN", "Endpoint", "open_endpoint", "retry_after_of"]

#: the values ``client=`` accepts: the HTTP seam's choices, and the official SDK
CLIENTS = ("auto", "pyreqwest", "aiohttp", "openai")

_JSON = {"Content-Type": "application/json"}
#: what a base_url keeps unquoted: URL delimiters, and '%' (an escape already made stays as it is)
_URL_SAFE = ":/?#[]@!$&'()*+,;=%~"
#: a URL quoted in a client's message, with the parentheses or quotes around it
_URL_IN_TEXT = re.compile(r"""\s*(?:for url )?[(\[<'"]?https?://[^\s)\]>'"]*[)\]>'"]?:?""")

#: called with each HTTP answer's headers (case-insensitive mapping), success or error status
OnHeaders = Callable[[Mapping[str, str]], None]


def retry_after_of(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI's, more precise) or ``Retry-After``,
    at most :data:`MAX_RETRY_AFTER` (``nan`` is no value).

    Example: ``retry_after_of({"retry-after-ms": "inf"}) == MAX_RETRY_AFTER``
    """
    ms = headers.get("retry-after-ms")
    seconds: float | None = None
    if ms:
        try:
            seconds = float(ms) / 1000.0
        except ValueError:
            seconds = None
        if seconds is not None and seconds != seconds:  # nan
            seconds = None
    if seconds is None:
        seconds = parse_retry_after(headers.get("Retry-After"))
        if seconds is not None and seconds != seconds:
            return None
    return None if seconds is None else min(MAX_RETRY_AFTER, max(0.0, seconds))


def _without_url(text: str) -> str:
    """A client's message without the URL it quotes (the source names the host already)."""
    return _URL_IN_TEXT.sub("", text).strip(" :") or text


def _error_code(body: bytes) -> str | None:
    """The OpenAI-style error body's ``error.code`` (else ``error.type``), if it has one."""
    try:
        data = json.loads(body[:65_536])
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    code = error.get("code") or error.get("type")
    return code if isinstance(code, str) else None


#: seconds an ``insufficient_quota`` answer stops an account's requests before one probes again:
#: long enough that a job of thousands of rows costs a request per half minute, not one per row;
#: short enough that credit added while a job runs (or before the next) is noticed
QUOTA_COOLDOWN = 30.0


class _QuotaStop:
    """An account's spent quota: the error that said it, until when nothing is sent, and whether
    the one request that asks again after the cool-down is in flight."""

    __slots__ = ("error", "until", "probing")

    def __init__(self, error: HttpStatusError, until: float) -> None:
        self.error, self.until, self.probing = error, until, False


#: account (base_url + API key digest) -> its stop; shared by every configuration, model and
#: path of the account in this process (the quota is the account's, not one client's)
_QUOTA_SPENT: dict[str, _QuotaStop] = {}


class Endpoint:
    """One configuration's shared client. ``await post(path, body) -> dict``; ``await close()``."""

    def __init__(self, key: str, client: Any, base_url: str, timeout: float, redactor: Redactor,
                 name: str, query: Mapping[str, str] | None = None, account: str = "") -> None:
        self._key, self._client, self._base_url = key, client, base_url
        self._timeout, self._redactor, self._name = timeout, redactor, name
        self._query = dict(query or {})
        self._account = account or key

    async def close(self) -> None:
        """Give the shared client back (its last user closes it). Safe to call twice."""
        client, self._client = self._client, None
        if client is not None:
            await SHARED.release(self._key)

    def _error(self, status: int, reason: str | None, headers: Mapping[str, str], body: bytes,
               path: str) -> HttpStatusError:
        exc = status_error(status, reason, headers.get("Retry-After"), body, f"POST {path}",
                           self._redactor, self._name)
        if status == 429 and _error_code(body) == "insufficient_quota":
            # the account is out of credit: no retry and no other row's request can succeed
            exc = HttpStatusError(f"{exc._message} (insufficient_quota: the account's quota is spent; "
                                  f"this worker sends nothing to this account for {QUOTA_COOLDOWN:g}s, then "
                                  "one request asks again: add credit or use another key)",
                                  source=self._name, status=status)
            exc.code = "insufficient_quota"  # type: ignore[attr-defined]
            _QUOTA_SPENT[self._account] = _QuotaStop(exc, time.monotonic() + QUOTA_COOLDOWN)
        elif exc.retryable:
            exc.retry_after = retry_after_of(headers)
        return exc

    def _check_quota(self, path: str) -> _QuotaStop | None:
        """Fail at once, without a request, while an answer's ``insufficient_quota`` stops the
        account; after the cool-down one request goes (the stop it probes for is returned)."""
        stop = _QUOTA_SPENT.get(self._account)
        if stop is None:
            return None
        if stop.probing or time.monotonic() < stop.until:
            spent = stop.error
            exc = HttpStatusError(f"POST {path} not sent: an earlier answer said the account's quota is spent "
                                  f"({spent._message})", source=self._name, status=spent.status)
            exc.code = "insufficient_quota"  # type: ignore[attr-defined]
            raise exc
        stop.probing = True
        return stop

    async def post(self, path: str, body: dict, on_headers: OnHeaders | None = None) -> dict:
        """POST ``body`` (JSON) to ``base_url + path``; the decoded JSON object answered."""
        stop = self._check_quota(path)
        try:
            answer = await self._post(path, body, on_headers)
            self._check_error_body(path, answer)
        finally:
            if stop is not None:
                stop.probing = False  # answered, failed or cancelled: the next request may ask
        if stop is not None and _QUOTA_SPENT.get(self._account) is stop:
            del _QUOTA_SPENT[self._account]  # the probe was answered: the account has credit again
        return answer

    def _check_error_body(self, path: str, answer: Mapping[str, Any]) -> None:
        """A 2xx whose body is an error (``{"error": {"message": ...}}``, as gateways such as
        OpenRouter send for an upstream failure) is an error carrying the provider's message,
        retryable as a 5xx is -- not an answer without ``choices``."""
        error = answer.get("error")
        if error is None or answer.get("choices") is not None or answer.get("data") is not None:
            return
        message = error.get("message") if isinstance(error, Mapping) else error
        code = error.get("code") if isinstance(error, Mapping) else None
        what = self._redactor.scrub(str(message if message is not None else error)[:600], limit=300)
        if code is not None:
            what += f" (code {self._redactor.scrub(str(code)[:100], limit=60)})"
        raise ConnectorError(f"POST {path} answered 200 with an error: {what}", source=self._name, retryable=True)

    def _not_json(self, path: str, size: int) -> ConnectorError:
        return ConnectorError(f"POST {path} returned a body that is not a JSON object ({size} bytes): "
                              "is base_url an OpenAI-compatible endpoint (e.g. http://host:8000/v1)?",
                              source=self._name)

    def _cannot_connect(self, why: str) -> ConnectorError:
        # the source (function name, host:port) is the error's prefix already: not named twice
        return ConnectorError(f"cannot connect: {why}", source=self._name, retryable=True)

    async def _post(self, path: str, body: dict, on_headers: OnHeaders | None) -> dict:
        raise NotImplementedError


class _HttpEndpoint(Endpoint):
    """The OpenAI API's JSON over aiospark's HTTP seam (:mod:`aiospark.connectors.http.transport`):
    pyreqwest or aiohttp, as :mod:`aiospark.connectors.http.choose` picks."""

    def __init__(self, key: str, client: Any, base_url: str, timeout: float, redactor: Redactor,
                 name: str, query: Mapping[str, str] | None = None, account: str = "") -> None:
        super().__init__(key, client, base_url, timeout, redactor, name, query, account)
        # the transport takes URLs already percent-encoded: base_url is quoted once here (as
        # aiohttp did with a plain string), the query encoded as aiohttp's params= did
        self._url_base = quote(base_url, safe=_URL_SAFE)
        self._url_query = ("?" + urlencode(self._query)) if self._query else ""

    async def _post(self, path: str, body: dict, on_headers: OnHeaders | None) -> dict:
        transport = self._client
        if transport is None:
            raise RuntimeError(f"{self._name} is not open: call 'await function.open()' first")
        try:
            answer = await transport.send("POST", self._url_base + path + self._url_query, dumps(body), _JSON)
        except TransportFailure as exc:
            if exc.kind == "timeout":
                raise ConnectorTimeout(f"no answer within {self._timeout}s to POST {path}",
                                       source=self._name) from None
            # the client's text may quote the URL: its host is the source already, its query may
            # hold a key (scrubbed), so only the reason after the URL is kept
            detail = self._redactor.scrub(_without_url(exc.detail), limit=300)
            if exc.kind == "connect":
                raise self._cannot_connect(detail) from None
            raise ConnectorError(f"POST {path} failed: {detail}", source=self._name, retryable=True) from None
        headers, data = answer.headers, answer.body
        if on_headers is not None:
            on_headers(headers)
        if not 200 <= answer.status < 300:
            raise self._error(answer.status, answer.reason, headers, data, path)
        try:
            reply = loads(data)
        except ValueError:
            try:  # what orjson refuses and json reads (NaN, Infinity, huge numbers): the checks of the answer judge it
                reply = json.loads(data)
            except ValueError:
                reply = None
        if not isinstance(reply, dict):
            raise self._not_json(path, len(data))
        return reply


class _SdkEndpoint(Endpoint):
    """The official SDK's typed calls (``embeddings.create``, ``chat.completions.create``), made
    through ``with_raw_response`` (public since openai 1.0) for the answer's headers."""

    def __init__(self, key: str, client: Any, base_url: str, timeout: float, redactor: Redactor,
                 name: str, query: Mapping[str, str] | None = None, account: str = "") -> None:
        super().__init__(key, client, base_url, timeout, redactor, name, query, account)
        import openai

        self._openai = openai

    async def _post(self, path: str, body: dict, on_headers: OnHeaders | None) -> dict:
        openai = self._openai
        client = self._client
        if client is None:
            raise RuntimeError(f"{self._name} is not open: call 'await function.open()' first")
        body = dict(body)
        model = body.pop("model")
        try:
            if path == "/embeddings":
                raw = await client.embeddings.with_raw_response.create(
                    model=model, input=body.pop("input"), encoding_format=body.pop("encoding_format", "float"),
                    extra_body=body or None)
            elif path == "/chat/completions":
                raw = await client.chat.completions.with_raw_response.create(
                    model=model, messages=body.pop("messages"), extra_body=body or None)
            else:  # pragma: no cover - the connector only posts the two paths above
                raise ValueError(f"unknown path {path}")
        except openai.APIStatusError as exc:
            resp = exc.response
            if on_headers is not None:
                on_headers(resp.headers)
            raise self._error(exc.status_code, resp.reason_phrase, resp.headers, resp.content, path) from None
        except openai.APITimeoutError:
            raise ConnectorTimeout(f"no answer within {self._timeout}s to POST {path}", source=self._name) from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            detail = self._redactor.scrub(short(cause), limit=300)
            # by name: the SDK's HTTP library is httpx or its fork, whichever the SDK release uses
            if type(cause).__name__ in ("ConnectError", "ConnectTimeout") or cause is exc:
                raise self._cannot_connect(detail) from None
            # connected, then the answer broke (closed mid-body, a bad encoding): as the other clients say
            raise ConnectorError(f"POST {path} failed: {detail}", source=self._name, retryable=True) from None
        if on_headers is not None:
            on_headers(raw.headers)
        try:
            # only the answer's decoding is mapped here: a TypeError from create() itself is a
            # call this code got wrong for the installed SDK, and must fail as itself
            reply = raw.parse()
        except (openai.APIResponseValidationError, ValueError, TypeError) as exc:
            raise ConnectorError(f"POST {path}: the answer does not fit the OpenAI API "
                                 f"({self._redactor.scrub(short(exc), limit=300)})", source=self._name) from None
        if isinstance(reply, str):  # the SDK hands a non-JSON 2xx body over as text
            raise self._not_json(path, len(reply))
        return reply.model_dump()


async def open_endpoint(client: str, base_url: str, api_key: Secret | None, timeout: float,
                        max_connections: int, headers: Mapping[str, str], redactor: Redactor,
                        name: str, query: Mapping[str, str] | None = None) -> Endpoint:
    """The shared endpoint client of this configuration (made by its first user); ``client`` is
    one of :data:`CLIENTS`; ``query`` (e.g. Azure's ``{"api-version": ...}``) goes on every
    request's URL."""
    query = dict(query or {})
    # "auto" is resolved here, on the worker (pyreqwest where it is installed): the shared client
    # is the library's, so "auto" and the name it resolves to share one pool
    library = client if client == "openai" else resolve_transport(client)
    key = config_key("openai", library, base_url, api_key.reveal() if api_key else None, timeout,
                     max_connections, sorted(headers.items()), sorted(query.items()))
    # whose quota an insufficient_quota spends: the account (endpoint + key), whatever the model,
    # path, client or timeout
    account = config_key("openai-account", base_url.rstrip("/"), api_key.reveal() if api_key else None)
    if library == "openai":
        try:
            import openai
        except ImportError:
            raise ImportError("client='openai' needs the official OpenAI SDK: pip install openai "
                              "(or use the default client='auto')") from None

        async def create() -> Any:
            # the SDK's own Limits type (httpx's on 1.x, httpx2's on 3.x), named through its
            # public DEFAULT_CONNECTION_LIMITS: importing either HTTP library here would fail on
            # the SDK releases that do not depend on it
            limits = type(openai.DEFAULT_CONNECTION_LIMITS)(max_connections=max_connections,
                                                            max_keepalive_connections=max_connections)
            return openai.AsyncOpenAI(
                # the SDK insists on a key; a local server without auth ignores this placeholder
                api_key=api_key.reveal() if api_key else "no-key", base_url=base_url, timeout=timeout,
                max_retries=0, default_headers=dict(headers) or None, default_query=query or None,
                http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=timeout))

        made = await SHARED.acquire(key, create, _close)
        return _SdkEndpoint(key, made, base_url, timeout, redactor, name, query, account)

    async def create_transport() -> Transport:
        sent = dict(headers)
        if api_key:
            sent["Authorization"] = f"Bearer {api_key.reveal()}"
        return await new_transport(library, headers=sent, max_connections=max_connections, timeout=timeout)

    made = await SHARED.acquire(key, create_transport, _close)
    return _HttpEndpoint(key, made, base_url, timeout, redactor, name, query, account)


async def _close(client: Any) -> None:
    await client.close()
