"""How :mod:`aiospark.connectors.openai` talks to the endpoint: aiohttp (default) or the ``openai`` SDK.

Both transports take the same JSON body and return the decoded JSON answer as a ``dict``, and
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

    t = await open_transport("aiohttp", "http://127.0.0.1:8000/v1", Secret("sk-..."), 60.0, 100, {}, redactor, name)
    answer = await t.post("/embeddings", {"model": "m", "input": ["a", "b"]}, on_headers=print)
    await t.close()
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..clients import SHARED, config_key
from ..errors import ConnectorError, ConnectorTimeout
from ..http.response import HttpStatusError, parse_retry_after, status_error
from ..redaction import Redactor, short
from ..secrets import Secret
from .pacing import MAX_RETRY_AFTER

__all__ = ["QUOTA_COOLDOWN", "Transport", "open_transport", "retry_after_of"]

CLIENTS = ("aiohttp", "openai")

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


class Transport:
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


class _AiohttpTransport(Transport):
    async def _post(self, path: str, body: dict, on_headers: OnHeaders | None) -> dict:
        import aiohttp

        session = self._client
        if session is None:
            raise RuntimeError(f"{self._name} is not open: call 'await function.open()' first")
        try:
            async with session.post(self._base_url + path, json=body, params=self._query or None) as resp:
                data = await resp.read()
                if on_headers is not None:
                    on_headers(resp.headers)
                if not 200 <= resp.status < 300:
                    raise self._error(resp.status, resp.reason, resp.headers, data, path)
                try:
                    answer = json.loads(data)
                except ValueError:
                    answer = None
                if not isinstance(answer, dict):
                    raise self._not_json(path, len(data))
                return answer
        except ConnectorError:
            raise
        except asyncio.TimeoutError:
            raise ConnectorTimeout(f"no answer within {self._timeout}s to POST {path}", source=self._name) from None
        except aiohttp.ClientConnectorError as exc:
            why = getattr(exc.os_error, "strerror", None) or self._redactor.scrub(short(exc), limit=300)
            raise self._cannot_connect(why) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ConnectorError(f"POST {path} failed: {self._redactor.scrub(short(exc), limit=300)}",
                                 source=self._name, retryable=True) from None


class _SdkTransport(Transport):
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
            raise self._cannot_connect(self._redactor.scrub(short(cause), limit=300)) from None
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


async def open_transport(client: str, base_url: str, api_key: Secret | None, timeout: float,
                         max_connections: int, headers: Mapping[str, str], redactor: Redactor,
                         name: str, query: Mapping[str, str] | None = None) -> Transport:
    """The shared transport of this configuration (made by its first user); ``query`` (e.g.
    Azure's ``{"api-version": ...}``) goes on every request's URL."""
    query = dict(query or {})
    key = config_key("openai", client, base_url, api_key.reveal() if api_key else None, timeout,
                     max_connections, sorted(headers.items()), sorted(query.items()))
    # whose quota an insufficient_quota spends: the account (endpoint + key), whatever the model,
    # path, client or timeout
    account = config_key("openai-account", base_url.rstrip("/"), api_key.reveal() if api_key else None)
    if client == "openai":
        try:
            import openai
        except ImportError:
            raise ImportError("client='openai' needs the official OpenAI SDK: pip install openai "
                              "(or use the default client='aiohttp')") from None

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

        made = await SHARED.acquire(key, create, _close_sdk)
        return _SdkTransport(key, made, base_url, timeout, redactor, name, query, account)

    import aiohttp

    async def create_session() -> Any:
        sent = dict(headers)
        if api_key:
            sent["Authorization"] = f"Bearer {api_key.reveal()}"
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=max_connections),
                                     timeout=aiohttp.ClientTimeout(total=timeout), headers=sent,
                                     raise_for_status=False)

    made = await SHARED.acquire(key, create_session, _close_session)
    return _AiohttpTransport(key, made, base_url, timeout, redactor, name, query, account)


async def _close_session(session: Any) -> None:
    await session.close()


async def _close_sdk(client: Any) -> None:
    await client.close()
