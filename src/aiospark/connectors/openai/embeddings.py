"""``OpenAIEmbeddings``: a text column -> ``ARRAY<FLOAT>`` through batched ``POST {base_url}/embeddings``.

Public name in :mod:`aiospark.connectors.openai` (see its doc for the whole picture).

Example::

    embed = OpenAIEmbeddings("nomic-embed-text", base_url="http://127.0.0.1:11434/v1", batch_size=64)
    out = aiospark.unordered_wait(df, embed, embed.output_schema(df), capacity=256)
"""
from __future__ import annotations

import asyncio
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from ...core.usage import bill_usage
from ...lookup.cache import LookupCache
from ...lookup.lookuper import Lookuper
from ...lookup.source import LookupSource
from ..checks import check_positive
from ..http.response import HttpStatusError
from ..secrets import Secret
from .function import OpenAIFunction, estimate_tokens
from .pacing import RequestTooLarge

#: what a request bills, in usage amounts (a budget's BilledCost reconciles with one of them)
BILLED = ("prompt_tokens", "completion_tokens", "total_tokens", "cost")
#: what a row whose vector needed no request of its own bills
NOTHING = {name: 0 for name in BILLED}

__all__ = ["OpenAIEmbeddings"]

#: the statuses that may be one text's fault, so a batch is halved to find it
_CONTENT_REFUSALS = (400, 413, 422)
_NUMBER_TYPES = frozenset((float, int))


def _finite(vec: list) -> bool:
    try:
        return math.isfinite(sum(vec))
    except OverflowError:  # an integer beyond the float range
        return False


def _by_index(data: list, n: int, dimensions: int | None, bad: Any) -> list[list]:
    """The answer's vectors in input order, placed by their ``index`` exactly: every index in
    ``0..n-1`` once. An item without ``index`` is an error (placing it by position would put
    vectors on the wrong rows, silently, for a server that answers out of order), but for two
    cases where its place is certain: a request of one text, and exactly one item without it among
    items with one (protobuf's default 0, which Gemini's OpenAI layer leaves out). Each vector:
    finite numbers only, all of one length (``dimensions`` when asked). ``bad(what)`` makes the
    error for the request."""
    # (the SDK's model writes a missing index as None)
    missing = [pos for pos, item in enumerate(data) if isinstance(item, Mapping) and item.get("index") is None]
    if missing and n > 1 and len(missing) > 1:
        raise bad(f"{len(missing)} of the {n} items of 'data' have no 'index': which text each vector is for "
                  "is unknown")
    ordered: list[Any] = [None] * n
    length: int | None = None
    for pos, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise bad(f"item {pos} of 'data' is a {type(item).__name__}, not {{'index': int, 'embedding': [numbers]}}")
        index = item.get("index")
        index = 0 if index is None else index
        if type(index) is not int or not 0 <= index < n:
            raise bad(f"item {pos} of 'data' has the index {index!r}, not one of 0..{n - 1}")
        if ordered[index] is not None:
            raise bad(f"item {pos} of 'data' repeats the index {index}: which text each vector is for is unknown")
        vec = item.get("embedding")
        if not isinstance(vec, list) or not vec:
            raise bad(f"item {pos} of 'data' has no 'embedding' list of numbers (got {type(vec).__name__})")
        # C-speed checks (a batch holds 64 x 3072 numbers): only floats/ints (no bool, string,
        # null), and a finite sum (no NaN, no infinity, nothing near the float range's end)
        if not set(map(type, vec)) <= _NUMBER_TYPES or not _finite(vec):
            raise bad(f"item {pos} of 'data' has an embedding that is not all finite numbers")
        if dimensions is not None and len(vec) != dimensions:
            raise bad(f"item {pos} of 'data' has an embedding of {len(vec)} values, dimensions={dimensions} asked")
        if length is not None and len(vec) != length:
            # one model gives one length: a mix is a broken answer, whichever vector is right
            raise bad(f"item {pos} of 'data' has an embedding of {len(vec)} values, an earlier one {length}")
        length = len(vec)
        ordered[index] = vec
    return ordered


class _EmbeddingsEndpoint(LookupSource):
    """``/embeddings`` as a lookup source: key ``(text,)`` -> ``[vector]``; batches in one request."""

    supports_batch = True
    schema = "embedding ARRAY<FLOAT>"

    def __init__(self, function: OpenAIEmbeddings) -> None:
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
        except RequestTooLarge as exc:
            # above the endpoint's advertised token limit as a whole: smaller batches may fit
            if len(keys) == 1:
                return {keys[0]: exc}
            half = len(keys) // 2
            first, second = await asyncio.gather(self.lookup_batch(keys[:half]), self.lookup_batch(keys[half:]))
            return {**first, **second}
        except HttpStatusError as exc:
            # a refusal of the content (400, 413, 422) may be one text's fault (too long, bad
            # content): halve the batch until that text stands alone and gets the error as its
            # own. Anything else is the request's, whatever its texts: a bad key (401), no access
            # (403), an unknown model (404), a spent quota or a 429/5xx (retryable: the retried
            # rows form new batches) -- halving those would only repeat it 2n - 1 times
            if exc.retryable or exc.status not in _CONTENT_REFUSALS:
                raise
            if len(keys) == 1:
                return {keys[0]: exc}
            half = len(keys) // 2
            first, second = await asyncio.gather(self.lookup_batch(keys[:half]), self.lookup_batch(keys[half:]))
            return {**first, **second}

    async def _request(self, keys: Sequence[tuple]) -> dict[tuple, Any]:
        fn = self.function
        texts = [k[0] for k in keys]
        estimates = [estimate_tokens(t) for t in texts]
        billed: dict[str, Any] = {}
        answer = await fn._post(fn.body_of(texts), sum(estimates), billed)
        vectors = fn.vectors_of(answer, len(texts))
        # the request's bill, shared among its texts by their estimates: each row's call reports
        # its share to its budget (recorded once in the usage already, by the request)
        whole = sum(estimates)
        for text, estimate in zip(texts, estimates):
            fn._shares[text] = {k: billed[k] * estimate / whole for k in BILLED if k in billed}  # type: ignore[index]
        return {k: [v] for k, v in zip(keys, vectors)}


class OpenAIEmbeddings(OpenAIFunction):
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
        client: ``"auto"`` (default: pyreqwest when installed, else aiohttp -- aiospark's HTTP
            transport, as ``HttpLookup``'s ``transport=``), ``"pyreqwest"``, ``"aiohttp"`` or ``"openai"``
            (the official SDK).
        timeout: seconds per request. max_connections: per worker process.
        requests_per_minute / tokens_per_minute: per-worker limits (None: none); see the module doc.
        headers: extra request headers (values are treated as secrets).
        extra_body: extra request fields, e.g. ``{"truncate_prompt_tokens": 512}`` for vLLM.
        pace_by_headers: pace by the endpoint's ``x-ratelimit-*`` answer headers (True, the
            default; see :mod:`aiospark.connectors.openai.pacing`); False: never.
        price: the model's ``Price(input=...)`` per 1M tokens, or a table ``{model: Price}``: each
            request records its ``cost``. A budget in tokens or money (``budget_cost()``) keeps each
            row's estimate: a request of many rows is no one row's bill.

    Example::

        embed = OpenAIEmbeddings("nomic-embed-text", base_url="http://127.0.0.1:11434/v1")
        out = aiospark.unordered_wait(df, embed, embed.output_schema(df), capacity=256)
        vec = aiospark.async_udf("array<float>")(embed)       # df.select(vec("text"))
    """

    _answer_settings = OpenAIFunction._answer_settings + ("dimensions",)

    __module__ = "aiospark.connectors.openai"  # its public home (pickles, reprs)
    _path = "/embeddings"
    _output_type = "ARRAY<FLOAT>"

    def __init__(self, model: str, *, base_url: str, api_key: str | Secret | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", input: str = "text", output: str = "embedding",
                 batch_size: int = 64, batch_delay: float = 0.01, dimensions: int | None = None,
                 cache: LookupCache | None = None, client: str = "auto", timeout: float = 60.0,
                 max_connections: int = 100, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None, headers: Mapping[str, str] | None = None,
                 extra_body: Mapping[str, Any] | None = None, pace_by_headers: bool = True,
                 price: Any = None) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, api_key_env=api_key_env, input=input,
                         output=output, client=client, timeout=timeout, max_connections=max_connections,
                         requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
                         headers=headers, extra_body=extra_body, pace_by_headers=pace_by_headers, price=price)
        check_positive("batch_size", batch_size, integer=True)
        if isinstance(batch_delay, bool) or not isinstance(batch_delay, numbers.Real) or not 0 <= float(batch_delay) < 60:
            raise ValueError(f"batch_delay must be seconds in [0, 60), got {batch_delay!r}")
        if dimensions is not None:
            check_positive("dimensions", dimensions, integer=True)
        if cache is not None and not isinstance(cache, LookupCache):
            raise TypeError(f"cache must be an aiospark.lookup.LookupCache or None, got {type(cache).__name__}")
        self.batch_size: int = batch_size
        self.batch_delay: float = float(batch_delay)
        self.dimensions: int | None = dimensions
        self.cache: LookupCache | None = cache
        self._lookuper: Lookuper | None = None
        #: text -> its share of the bill of the request that embedded it, until its row reports it
        self._shares: dict[str, dict[str, float]] | None = {}

    async def open(self) -> None:
        """Open the shared client and this worker's batcher."""
        await super().open()
        if self._shares is None:  # (not pickled: the worker's own)
            self._shares = {}
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

    def body_of(self, texts: list[str]) -> dict[str, Any]:
        """The ``/embeddings`` request body for ``texts``."""
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        return body

    def vectors_of(self, answer: dict, n: int) -> list[list]:
        """The ``n`` vectors of an answer, in the order of the texts asked (checked: see the module)."""
        data = answer.get("data")
        if not isinstance(data, list) or len(data) != n:
            got = len(data) if isinstance(data, list) else type(data).__name__
            raise self._bad_answer(f"expected 'data' with {n} embedding(s), got {got}")
        return _by_index(data, n, self.dimensions, self._bad_answer)

    def request_of(self, value: Any) -> tuple[dict[str, Any], int]:
        """One text's request body (a batch lane's line) and its token estimate."""
        text = self._text(value)
        return self.body_of([text]), estimate_tokens(text)

    def value_of(self, answer: dict) -> Any:
        """The vector of a one-text answer."""
        return self.vectors_of(answer, 1)[0]

    def _text(self, text: Any) -> str:
        if not isinstance(text, str):
            raise TypeError(f"{self._name}: input must be a string (or NULL), got {type(text).__name__}")
        return text

    def _row_prompt_tokens(self, value: Any) -> float:
        return float(estimate_tokens(str(value)))  # what its request's estimate counts for the text

    async def _one(self, text: Any) -> Any:
        if text is None:
            return None
        if self._batch is not None:  # the batch lane's collect: the answer is a batch's, if it has one
            body, estimate = self.request_of(text)
            return self.value_of(await self._answer(body, estimate))
        self._text(text)
        if self._lookuper is None:
            raise RuntimeError(f"{self._name} is not open: call 'await function.open()' first "
                               "(the entry points do it for you)")
        try:
            rows = await self._lookuper.lookup((text,))
        except HttpStatusError:
            bill_usage(**NOTHING)  # an error answer bills nothing
            raise
        # this row's share of the request's bill; none when its vector came from the cache or a
        # request another row of the same text made (that row reports the share)
        bill_usage(**((self._shares or {}).pop(text, None) or NOTHING))
        return rows[0]


