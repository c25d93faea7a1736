"""OpenAI-compatible embeddings and chat completions as :class:`aiospark.AsyncFunction` s.

Works against any endpoint that speaks the OpenAI API (vLLM, Ollama, TGI, llama.cpp, LiteLLM,
hosted APIs). ``base_url`` is what the OpenAI SDK calls ``base_url``: the URL up to and
including the API version, e.g. ``http://127.0.0.1:8000/v1``; requests go to
``{base_url}/embeddings`` and ``{base_url}/chat/completions``.

Each function is usable with all three entry points:

* ``aiospark.ordered_wait(df, fn, schema)`` / ``unordered_wait``: the function gets the row as a
  dict and returns ``[row + {output: value}]``, so ``schema`` is the input columns plus the output
  column -- ``fn.output_schema(df)`` builds it (``embedding ARRAY<FLOAT>``, ``answer STRING``).
* ``aiospark.async_udf(return_type)(fn)``: the function gets the column's value (the text, or for
  chat a list of messages) and returns ``[value]``.

A NULL input gives a NULL output without a request.

Example::

    from aiospark.connectors.openai import OpenAIEmbeddings, OpenAIChat, default_retry

    embed = OpenAIEmbeddings("text-embedding-3-small", base_url="http://127.0.0.1:8000/v1",
                             input="text", output="embedding", batch_size=64,
                             tokens_per_minute=1_000_000)
    out = aiospark.unordered_wait(df, embed, embed.output_schema(df), capacity=256,
                                  retry=default_retry())
    out.show(); print(out.aiospark_metrics.total.usage)   # {'prompt_tokens': ..., 'total_tokens': ...}

    chat = OpenAIChat("llama3", base_url="http://127.0.0.1:11434/v1", input="question",
                      output="answer", system="Answer in one word.", max_tokens=16)
    out = aiospark.ordered_wait(df, chat, chat.output_schema(df), retry=default_retry())

Details (also in docs/design.md, "OpenAI-compatible connector"):

* Transport: aiohttp by default; ``client="openai"`` uses the official SDK (``pip install openai``).
  One client per worker process and configuration (:mod:`aiospark.connectors.shared`).
* Embeddings batching: rows are grouped into one request with ``input=[...]`` of up to
  ``batch_size`` texts, sent when full or ``batch_delay`` seconds after its first text (an
  :class:`aiospark.lookup.Lookuper` over the endpoint). Equal texts in flight share one slot;
  ``cache=LookupCache(...)`` keeps answers. An error for a request (429, 5xx, timeout, a bad
  answer) reaches every row of it; a refusal (other 4xx) is split in halves until the text
  at fault stands alone, so only its row gets the error. A
  batch fills only from rows in flight: give the entry point ``capacity >= 2 * batch_size``.
* Limits: ``requests_per_minute`` and ``tokens_per_minute`` are token buckets per worker process
  (so the cluster's total is workers x limit; for one limit across the cluster pass the entry
  point ``rate_limit=RedisRateLimit(...)``, which counts rows). Before a request its tokens are
  estimated (:func:`estimate_tokens`: ``ceil(characters / 4)`` per text, plus ``max_tokens`` for
  chat) and charged; after it, the difference to the answer's ``usage.total_tokens`` is charged
  too when it was more (an over-estimate is not given back).
* Errors: 429/5xx are retryable :class:`~aiospark.connectors.HttpStatusError` with ``retry_after``
  from ``Retry-After`` (or ``retry-after-ms``); the entry points' ``retry=`` waits at least that
  long. Use :func:`default_retry`. Other statuses, timeouts, connection errors and answers that do
  not fit the API: see :mod:`aiospark.connectors.openai_transport`.
* Usage: after each answer, ``aiospark.core.metrics.record_usage(prompt_tokens=...,
  completion_tokens=..., total_tokens=...)`` (once per request: a batch's usage is recorded once);
  the job's total is ``out.aiospark_metrics.total.usage``.
* Secrets: ``api_key`` (else the ``api_key_env`` environment variable, ``OPENAI_API_KEY`` by
  default; ``api_key_env=None`` never reads it) never shows in a repr, message or error text
  (:class:`~aiospark.connectors.redaction.Redactor`); no key -> no ``Authorization`` header.
"""
from __future__ import annotations

import asyncio
import math
import numbers
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from ..core.function import AsyncFunction
from ..core.metrics import record_usage
from ..core.ratelimit import RateLimit
from ..core.retry import RetryStrategy
from ..lookup.cache import LookupCache
from ..lookup.lookuper import Lookuper
from ..lookup.source import LookupSource
from ._common import ConnectorError, Secret, check_positive, is_retryable, resolve_secret
from .http_response import HttpStatusError
from .openai_transport import CLIENTS, Transport, open_transport
from .redaction import Redactor, scrubbed

__all__ = ["OpenAIEmbeddings", "OpenAIChat", "default_retry", "estimate_tokens"]

_RUNTIME = ("_transport", "_rpm", "_tpm", "_lookuper")


def estimate_tokens(text: str) -> int:
    """The tokens charged to ``tokens_per_minute`` for ``text`` before the request:
    ``ceil(len(text) / 4)`` (OpenAI's rule of thumb for English), at least 1."""
    return max(1, math.ceil(len(text) / 4))


def default_retry(max_retries: int = 6) -> RetryStrategy:
    """The retry strategy we recommend for these functions: exponential back-off from 0.5 s to
    30 s with jitter, retrying only what may succeed later (429, 5xx, timeouts, dropped
    connections); a 429's ``Retry-After`` is honoured (never retried sooner).

    Example: ``aiospark.unordered_wait(df, embed, schema, retry=default_retry())``
    """
    return RetryStrategy.exponential_backoff(max_retries, 0.5, 30.0, jitter=0.2, exception_predicate=is_retryable)


def _check_column(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty column name, got {value!r}")
    return value


def _check_base_url(base_url: Any) -> tuple[str, str]:
    """``(base_url without a trailing '/', host:port)``; ValueError saying what to change."""
    if not isinstance(base_url, str) or not base_url:
        raise ValueError("base_url must be the endpoint's URL up to the API version, "
                         f"e.g. 'http://127.0.0.1:8000/v1', got {base_url!r}")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be an http(s) URL such as 'http://127.0.0.1:8000/v1', got "
                         f"{parts.scheme + '://' if parts.scheme else ''}{parts.hostname or '...'}")
    if parts.username or parts.password:
        raise ValueError("base_url must not hold credentials: pass the key as api_key= (or set OPENAI_API_KEY)")
    if parts.query or parts.fragment:
        raise ValueError("base_url must not have a query string or fragment: give the URL up to the "
                         "API version, e.g. 'http://127.0.0.1:8000/v1'")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"base_url has a bad port: {parts.netloc!r}") from None
    hostport = f"{parts.hostname}:{port or (443 if parts.scheme == 'https' else 80)}"
    return base_url.rstrip("/"), hostport


def _check_limit(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number > 0 (or None for no limit), got {value!r}")
    return float(value)


class _OpenAIFunction(AsyncFunction):
    """What embeddings and chat share: configuration, transport, limits, secrets, input shapes."""

    _kind = "openai"
    _path = ""
    _output_type = "STRING"

    def __init__(self, model: str, *, base_url: str, api_key: str | Secret | None, api_key_env: str | None,
                 input: str, output: str, client: str, timeout: float, max_connections: int,
                 requests_per_minute: float | None, tokens_per_minute: float | None,
                 headers: Mapping[str, str] | None, extra_body: Mapping[str, Any] | None) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be the endpoint's model name, a non-empty string, got {model!r}")
        self.model = model
        self.base_url, self._hostport = _check_base_url(base_url)
        self.input = _check_column("input", input)
        self.output = _check_column("output", output)
        if client not in CLIENTS:
            raise ValueError(f"client must be 'aiohttp' (default) or 'openai' (the official SDK), got {client!r}")
        self.client = client
        check_positive("timeout", timeout)
        check_positive("max_connections", max_connections, integer=True)
        self.timeout, self.max_connections = float(timeout), max_connections
        self.requests_per_minute = _check_limit("requests_per_minute", requests_per_minute)
        self.tokens_per_minute = _check_limit("tokens_per_minute", tokens_per_minute)
        if headers is not None and not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a mapping of header names to values, got {type(headers).__name__}")
        self._headers = {str(k): (v.reveal() if isinstance(v, Secret) else str(v)) for k, v in (headers or {}).items()}
        if any(k.lower() == "authorization" for k in self._headers):
            raise ValueError("pass the key as api_key=, not as an 'Authorization' header")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise TypeError(f"extra_body must be a dict of request fields, got {type(extra_body).__name__}")
        self.extra_body = dict(extra_body or {})
        if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
            raise ValueError(f"api_key_env must be an environment variable name or None, got {api_key_env!r}")
        self._key_env = api_key_env
        self._key = resolve_secret(api_key, api_key_env)  # explicit key, else the env var on the driver
        self._name = f"{type(self).__name__}({self._hostport}, model={model!r})"
        self._redactor = self._make_redactor()
        self._transport: Transport | None = None
        self._rpm: Any = None
        self._tpm: Any = None

    def _make_redactor(self) -> Redactor:
        # every header value may be a credential (e.g. 'api-key' for Azure-style endpoints)
        return Redactor(self._key, *(Secret(v) for v in self._headers.values() if len(v) >= 4))

    def __getstate__(self) -> dict:
        return {k: (None if k in _RUNTIME else v) for k, v in self.__dict__.items()}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.model!r}, base_url={self.base_url!r}, "
                f"api_key={'***' if self._key else None}, input={self.input!r}, output={self.output!r}, "
                f"client={self.client!r})")

    __str__ = __repr__

    def output_schema(self, df_or_schema: Any) -> Any:
        """The ``ordered_wait``/``unordered_wait`` schema: the input's columns plus the output
        column (a ``StructType``). Takes a DataFrame or its ``StructType``."""
        from pyspark.sql.types import StructField, StructType, _parse_datatype_string

        schema = getattr(df_or_schema, "schema", df_or_schema)
        if not isinstance(schema, StructType):
            raise TypeError(f"output_schema takes a DataFrame or a StructType, got {type(df_or_schema).__name__}")
        if self.output in schema.fieldNames():
            raise ValueError(f"the input already has a column {self.output!r}: pass output= with another name")
        return StructType(list(schema.fields) + [
            StructField(self.output, _parse_datatype_string(self._output_type), True)])

    # --- lifecycle ---------------------------------------------------------------------------

    @scrubbed
    async def open(self) -> None:
        """Take the configuration's shared client; make this worker's token buckets."""
        if self._transport is not None:
            return
        if self._key is None and self._key_env:
            self._key = resolve_secret(None, self._key_env)  # set on the worker only
            self._redactor = self._make_redactor()
        self._transport = await open_transport(self.client, self.base_url, self._key, self.timeout,
                                               self.max_connections, self._headers, self._redactor, self._name)
        self._rpm = RateLimit(self.requests_per_minute, per=60.0).bucket() if self.requests_per_minute else None
        self._tpm = RateLimit(self.tokens_per_minute, per=60.0).bucket() if self.tokens_per_minute else None

    async def close(self) -> None:
        """Give the shared client back. Safe to call twice."""
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()

    # --- requests ----------------------------------------------------------------------------

    async def _admit(self, estimate: int) -> None:
        """Wait for this request's turn under the per-minute limits (one request, ``estimate`` tokens)."""
        delay = 0.0
        if self._rpm is not None:
            delay = self._rpm.reserve()
        if self._tpm is not None:
            delay = max(delay, self._tpm.reserve(float(estimate)))
        if delay > 0:
            await asyncio.sleep(delay)

    def _settle(self, estimate: int, usage: Mapping[str, Any]) -> None:
        """Charge the tokens used beyond the estimate (later requests wait for them); record usage."""
        amounts = {k: v for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                   if isinstance(v := usage.get(k), numbers.Real) and not isinstance(v, bool) and 0 <= v < math.inf}
        if self._tpm is not None:
            used = amounts.get("total_tokens", amounts.get("prompt_tokens", 0) + amounts.get("completion_tokens", 0))
            if used > estimate:
                self._tpm.reserve(float(used - estimate))  # the delay lands on the next reservations
        if amounts:
            record_usage(**amounts)

    async def _post(self, body: dict, estimate: int) -> dict:
        if self._transport is None:
            raise RuntimeError(f"{self._name} is not open: call 'await function.open()' first "
                               "(the entry points do it for you)")
        await self._admit(estimate)
        answer = await self._transport.post(self._path, {**self.extra_body, **body})
        usage = answer.get("usage")
        self._settle(estimate, usage if isinstance(usage, Mapping) else {})
        return answer

    def _bad_answer(self, what: str) -> ConnectorError:
        return ConnectorError(f"POST {self._path}: {what}", source=self._name)

    # --- entry points ------------------------------------------------------------------------

    @scrubbed
    async def async_invoke(self, value: Any) -> list:
        """A row (dict) -> ``[row + {output: value}]``; a column value -> ``[value]``."""
        if isinstance(value, Mapping):
            if self.input not in value:
                raise KeyError(f"{self._name}: the row has no column {self.input!r} (input=); its columns: "
                               f"{sorted(map(str, value))[:20]}")
            row = dict(value)
            row[self.output] = await self._one(value[self.input])
            return [row]
        if type(value) is tuple and len(value) == 1:  # async_udf hands a 1-tuple for one column
            value = value[0]
        return [await self._one(value)]

    async def _one(self, value: Any) -> Any:
        raise NotImplementedError


class _EmbeddingsEndpoint(LookupSource):
    """``/embeddings`` as a lookup source: key ``(text,)`` -> ``[vector]``; batches in one request."""

    supports_batch = True
    schema = "embedding ARRAY<FLOAT>"

    def __init__(self, function: "OpenAIEmbeddings") -> None:
        self.function = function
        self.max_batch_size = function.batch_size
        self.max_batch_delay = function.batch_delay

    async def lookup(self, key: tuple) -> list:
        found = (await self.lookup_batch([key]))[key]
        if isinstance(found, BaseException):
            raise found
        return found

    async def lookup_batch(self, keys: Sequence[tuple]) -> dict[tuple, Any]:
        try:
            return await self._request(keys)
        except HttpStatusError as exc:
            # a refusal (4xx but 429) may be one text's fault (too long, bad content): halve the
            # batch until that text stands alone and gets the error as its own; 429 and 5xx stay
            # the whole request's (retryable: the retried rows form new batches)
            if exc.retryable or not 400 <= exc.status < 500:
                raise
            if len(keys) == 1:
                return {keys[0]: exc}
            half = len(keys) // 2
            first, second = await asyncio.gather(self.lookup_batch(keys[:half]), self.lookup_batch(keys[half:]))
            return {**first, **second}

    async def _request(self, keys: Sequence[tuple]) -> dict[tuple, Any]:
        fn = self.function
        texts = [k[0] for k in keys]
        body: dict[str, Any] = {"model": fn.model, "input": texts, "encoding_format": "float"}
        if fn.dimensions is not None:
            body["dimensions"] = fn.dimensions
        answer = await fn._post(body, sum(estimate_tokens(t) for t in texts))
        data = answer.get("data")
        if not isinstance(data, list) or len(data) != len(texts):
            got = len(data) if isinstance(data, list) else type(data).__name__
            raise fn._bad_answer(f"expected 'data' with {len(texts)} embedding(s), got {got}")
        # answers carry their input's index; some servers do not keep the order
        ordered: list[Any] = [None] * len(texts)
        for pos, item in enumerate(data):
            index = item.get("index", pos) if isinstance(item, Mapping) else None
            vec = item.get("embedding") if isinstance(item, Mapping) else None
            if not isinstance(index, int) or not 0 <= index < len(texts) or not isinstance(vec, list):
                raise fn._bad_answer(f"item {pos} of 'data' is not {{'index': int, 'embedding': [floats]}}")
            if fn.dimensions is not None and len(vec) != fn.dimensions:
                raise fn._bad_answer(f"embedding has {len(vec)} values, dimensions={fn.dimensions} asked")
            ordered[index] = vec
        return {k: [v] for k, v in zip(keys, ordered)}


class OpenAIEmbeddings(_OpenAIFunction):
    """Embeddings of a text column through ``POST {base_url}/embeddings``, batched.

    Args:
        model: the endpoint's model name, e.g. ``"text-embedding-3-small"`` or ``"nomic-embed-text"``.
        base_url: up to the API version, e.g. ``"http://127.0.0.1:8000/v1"``.
        api_key: the key (sent as ``Authorization: Bearer``); None: ``api_key_env``'s value, if set.
        api_key_env: the environment variable read when ``api_key`` is None (``"OPENAI_API_KEY"``),
            on the driver, else on the worker; ``None``: never read.
        input: the column holding the text (``"text"``). output: the new column (``"embedding"``,
            ``ARRAY<FLOAT>``).
        batch_size: texts per request (64); batch_delay: seconds a text waits for others (0.01).
        dimensions: ask for vectors of this size (models that support it); checked in answers.
        cache: a :class:`aiospark.lookup.LookupCache` of text -> vector per worker (None: no cache).
        client: ``"aiohttp"`` (default) or ``"openai"`` (the official SDK).
        timeout: seconds per request. max_connections: per worker process.
        requests_per_minute / tokens_per_minute: per-worker limits (None: none); see the module doc.
        headers: extra request headers (values are treated as secrets).
        extra_body: extra request fields, e.g. ``{"truncate_prompt_tokens": 512}`` for vLLM.

    Example::

        embed = OpenAIEmbeddings("nomic-embed-text", base_url="http://127.0.0.1:11434/v1")
        out = aiospark.unordered_wait(df, embed, embed.output_schema(df), capacity=256)
        vec = aiospark.async_udf("array<float>")(embed)       # df.select(vec("text"))
    """

    _path = "/embeddings"
    _output_type = "ARRAY<FLOAT>"

    def __init__(self, model: str, *, base_url: str, api_key: str | Secret | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", input: str = "text", output: str = "embedding",
                 batch_size: int = 64, batch_delay: float = 0.01, dimensions: int | None = None,
                 cache: LookupCache | None = None, client: str = "aiohttp", timeout: float = 60.0,
                 max_connections: int = 100, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None, headers: Mapping[str, str] | None = None,
                 extra_body: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, api_key_env=api_key_env, input=input,
                         output=output, client=client, timeout=timeout, max_connections=max_connections,
                         requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
                         headers=headers, extra_body=extra_body)
        check_positive("batch_size", batch_size, integer=True)
        if isinstance(batch_delay, bool) or not isinstance(batch_delay, numbers.Real) or not 0 <= batch_delay < 60:
            raise ValueError(f"batch_delay must be seconds in [0, 60), got {batch_delay!r}")
        if dimensions is not None:
            check_positive("dimensions", dimensions, integer=True)
        if cache is not None and not isinstance(cache, LookupCache):
            raise TypeError(f"cache must be an aiospark.lookup.LookupCache or None, got {type(cache).__name__}")
        self.batch_size, self.batch_delay = batch_size, float(batch_delay)
        self.dimensions, self.cache = dimensions, cache
        self._lookuper: Lookuper | None = None

    async def open(self) -> None:
        """Open the shared client and this worker's batcher."""
        await super().open()
        if self._lookuper is None:
            self._lookuper = Lookuper(_EmbeddingsEndpoint(self), cache=self.cache, batch=True)
            await self._lookuper.open()

    async def close(self) -> None:
        """Cancel pending batches, then give the client back. Safe to call twice."""
        lookuper, self._lookuper = self._lookuper, None
        if lookuper is not None:
            await lookuper.close()
        await super().close()

    def stats(self) -> dict[str, int]:
        """This worker's batching counters (``batches``, ``batched_keys``, ``coalesced``, cache ...)."""
        return self._lookuper.stats() if self._lookuper is not None else {}

    async def _one(self, text: Any) -> Any:
        if text is None:
            return None
        if not isinstance(text, str):
            raise TypeError(f"{self._name}: input must be a string (or NULL), got {type(text).__name__}")
        if self._lookuper is None:
            raise RuntimeError(f"{self._name} is not open: call 'await function.open()' first "
                               "(the entry points do it for you)")
        rows = await self._lookuper.lookup((text,))
        return rows[0]


class OpenAIChat(_OpenAIFunction):
    """One chat completion per row through ``POST {base_url}/chat/completions``.

    The ``input`` column holds either a prompt (a string: sent as the user message, after
    ``system`` if given) or the whole conversation (an array of ``{role, content}`` structs/dicts,
    sent as is). The output column (``STRING``) holds the first choice's message content.

    Args:
        model, base_url, api_key, api_key_env, client, timeout, max_connections, headers,
        requests_per_minute, tokens_per_minute: as for :class:`OpenAIEmbeddings`.
        input: the prompt or messages column (``"prompt"``). output: the new column (``"answer"``).
        system: an optional system message put before every prompt.
        max_tokens, temperature: sent when given (``max_tokens`` also counts in the token estimate).
        extra_body: any other request fields, e.g. ``{"top_p": 0.9, "seed": 7}``.

    Example::

        chat = OpenAIChat("llama3", base_url="http://127.0.0.1:11434/v1", input="question",
                          system="Answer briefly.", max_tokens=64, temperature=0)
        out = aiospark.ordered_wait(df, chat, chat.output_schema(df), retry=default_retry())
        ask = aiospark.async_udf("string")(chat)               # df.select(ask("question"))
    """

    _path = "/chat/completions"
    _output_type = "STRING"

    def __init__(self, model: str, *, base_url: str, api_key: str | Secret | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", input: str = "prompt", output: str = "answer",
                 system: str | None = None, max_tokens: int | None = None, temperature: float | None = None,
                 client: str = "aiohttp", timeout: float = 120.0, max_connections: int = 100,
                 requests_per_minute: float | None = None, tokens_per_minute: float | None = None,
                 headers: Mapping[str, str] | None = None, extra_body: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, api_key_env=api_key_env, input=input,
                         output=output, client=client, timeout=timeout, max_connections=max_connections,
                         requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
                         headers=headers, extra_body=extra_body)
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be a string (the system message) or None, got {type(system).__name__}")
        if max_tokens is not None:
            check_positive("max_tokens", max_tokens, integer=True)
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
                                        or not 0 <= temperature <= 2):
            raise ValueError(f"temperature must be a number in [0, 2] or None, got {temperature!r}")
        self.system, self.max_tokens, self.temperature = system, max_tokens, temperature

    def _messages(self, value: Any) -> list[dict]:
        if isinstance(value, str):
            head = [{"role": "system", "content": self.system}] if self.system is not None else []
            return head + [{"role": "user", "content": value}]
        if isinstance(value, (list, tuple)):
            messages = []
            for m in value:
                m = m.asDict() if hasattr(m, "asDict") else m
                if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or "content" not in m:
                    raise TypeError(f"{self._name}: each message must be a {{role, content}} struct or dict, "
                                    f"got {type(m).__name__}")
                messages.append({"role": m["role"], "content": m["content"]})
            if not messages:
                raise ValueError(f"{self._name}: the messages list is empty")
            return messages
        raise TypeError(f"{self._name}: input must be a prompt string or a list of {{role, content}} "
                        f"messages (or NULL), got {type(value).__name__}")

    async def _one(self, value: Any) -> Any:
        if value is None:
            return None
        messages = self._messages(value)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        estimate = sum(estimate_tokens(str(m["content"] or "")) for m in messages) + (self.max_tokens or 0)
        answer = await self._post(body, estimate)
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise self._bad_answer("the answer has no 'choices'")
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        if content is not None and not isinstance(content, str):
            raise self._bad_answer(f"choices[0].message.content is a {type(content).__name__}, not a string")
        return content
