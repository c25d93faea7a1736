"""What :class:`OpenAIEmbeddings` and :class:`OpenAIChat` share: configuration checks, the transport,
the per-minute limits, usage recording, secrets and the two input shapes (a row or a column value).

Public names live in :mod:`aiospark.connectors.openai`; this module holds the common base.

Example::

    estimate_tokens("four score and seven")   # 5: ceil(20 / 4), or tiktoken's count once loaded
    retry = default_retry()                    # for the entry points' retry=
"""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any

from ...core.function import AsyncFunction
from ...core.ratelimit import RateLimit
from ...core.retry import RetryStrategy
from ...core.usage import bill_usage, record_usage
from ..checks import check_positive
from ..errors import ConnectorError, ConnectorTimeout, is_retryable
from ..http.response import HttpStatusError
from ..redaction import Redactor, scrubbed
from ..secrets import Secret, is_credential_header, resolve_secret
from .base_url import PUBLIC_QUERY, check_base_url
from .endpoint import CLIENTS, Endpoint, open_endpoint
from .pacing import MAX_RETRY_AFTER, Pacer
from .price import LANES, Price, Priced, check_price, whole_usage
from .tokens import _prompt_estimate, estimate_tokens, load_tokenizer

__all__ = ["OpenAIFunction", "default_retry", "estimate_tokens", "load_tokenizer"]

log = logging.getLogger(__name__)

_RUNTIME = ("_transport", "_rpm", "_tpm", "_lookuper", "_pacer", "_shares")
#: the entry points' default row timeout (seconds): a request timeout above it is cut short there
_ROW_TIMEOUT = 60.0


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


def _check_limit(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < math.inf:
        raise ValueError(f"{name} must be a finite number > 0 (or None for no limit), got {value!r}")
    return float(value)


#: More tokens than any one request can be billed (the largest context windows hold ~10M): a
#: usage count above it is a broken answer, not a bill.
MAX_REQUEST_TOKENS = 10**9


def _amount(value: Any) -> Any:
    """A usage count as it came, if it is a whole number in ``[0, MAX_REQUEST_TOKENS]``; else None
    (NaN, Infinity, 1e29, 2.5 or a string are not token counts: not recorded, not charged)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= float(value) <= MAX_REQUEST_TOKENS \
            and float(value).is_integer():
        return value
    return None


class OpenAIFunction(Priced, AsyncFunction):
    """What embeddings and chat share: configuration, transport, limits, secrets, input shapes."""

    _kind = "openai"
    _path = ""
    _output_type = "STRING"
    #: it groups rows into requests itself: the entry points' batch_size= is refused with it
    batches_itself = True
    #: the attributes that decide its answers (a journal's fingerprint): never the key, limits, client
    #: or transport; the extra headers count by name and value, except credential-like ones
    _answer_settings: tuple[str, ...] = ("model", "base_url", "input", "output", "extra_body")
    #: whether this worker's copy has logged answers whose usage is not token counts
    _warned_usage = False
    #: the batch lane's answers while it collects (:meth:`with_batch_answers`), else None
    _batch: Any = None
    #: whether its answers bill completion tokens (its Price needs ``output=``)
    _bills_output = False

    def __aiospark_fingerprint__(self) -> dict[str, Any]:
        """What decides the answers, for a journal's manifest (no secret, nothing per run): the
        settings above and the non-credential headers (``X-Route: b`` may pick another deployment)."""
        out = {name: getattr(self, name, None) for name in self._answer_settings}
        # the query picks the API (Azure's api-version, a gateway's route): its names count, and the
        # values the repr shows; any other value may be a key (Gemini's '?key=')
        out["base_url"] = self.base_url + "".join(f"{'&' if i else '?'}{k}={v if k in PUBLIC_QUERY else '***'}"
                                                  for i, (k, v) in enumerate(sorted(self._query.items())))
        out["headers"] = {k: v for k, v in sorted(self._headers.items()) if not is_credential_header(k)}
        return out

    def __init__(self, model: str, *, base_url: str, api_key: str | Secret | None, api_key_env: str | None,
                 input: str, output: str, client: str, timeout: float, max_connections: int,
                 requests_per_minute: float | None, tokens_per_minute: float | None,
                 headers: Mapping[str, str] | None, extra_body: Mapping[str, Any] | None,
                 pace_by_headers: bool = True, price: Any = None) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be the endpoint's model name, a non-empty string, got {model!r}")
        self.model = model
        #: this model's Price (from ``price=``, a Price or a table {model: Price}), or None
        self.price: Price | None = check_price(price, model, type(self).__name__, self._bills_output)
        self.base_url, self._hostport, self._query = check_base_url(base_url)
        self.input = _check_column("input", input)
        self.output = _check_column("output", output)
        if client not in CLIENTS:
            raise ValueError(f"client must be 'auto' (default: pyreqwest when installed, else aiohttp), 'pyreqwest', "
                             f"'aiohttp' or 'openai' (the official SDK), got {client!r}")
        self.client = client
        check_positive("timeout", timeout)
        check_positive("max_connections", max_connections, integer=True)
        # not `self.timeout`: that name is AsyncFunction's timeout handler, which the operator calls
        self.request_timeout, self.max_connections = float(timeout), max_connections
        if self.request_timeout > _ROW_TIMEOUT:
            # the entry points' row timeout (60 s unless given) cancels the request first: a longer
            # generation would be paid, thrown away and retried, silently
            warnings.warn(f"{type(self).__name__}(timeout={timeout:g}) waits longer than the entry points' default "
                          f"row timeout of {_ROW_TIMEOUT:g} s, which cancels the request first (a longer answer is "
                          f"paid and thrown away): give ordered_wait/unordered_wait/async_udf timeout= above "
                          f"{timeout:g} s times the attempts you allow, or a shorter timeout here",
                          UserWarning, stacklevel=3)
        self.requests_per_minute = _check_limit("requests_per_minute", requests_per_minute)
        self.tokens_per_minute = _check_limit("tokens_per_minute", tokens_per_minute)
        if not isinstance(pace_by_headers, bool):
            raise TypeError(f"pace_by_headers must be True (pace by the endpoint's x-ratelimit-* headers) "
                            f"or False, got {pace_by_headers!r}")
        self.pace_by_headers = pace_by_headers
        if headers is not None and not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a mapping of header names to values, got {type(headers).__name__}")
        self._headers = {str(k): (v.reveal() if isinstance(v, Secret) else str(v)) for k, v in (headers or {}).items()}
        if any(k.lower() == "authorization" for k in self._headers):
            raise ValueError("pass the key as api_key=, not as an 'Authorization' header")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise TypeError(f"extra_body must be a dict of request fields, got {type(extra_body).__name__}")
        self.extra_body = dict(extra_body or {})
        try:  # sent as written or not at all: JSON has no NaN/Infinity (an encoder would send null)
            json.dumps(self.extra_body, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"extra_body must hold JSON values only (no NaN, Infinity, sets or objects): {exc}") from None
        if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
            raise ValueError(f"api_key_env must be an environment variable name or None, got {api_key_env!r}")
        self._key_env = api_key_env
        self._key = resolve_secret(api_key, api_key_env)  # explicit key, else the env var on the driver
        self._name = f"{type(self).__name__}({self._hostport}, model={model!r})"
        self._redactor = self._make_redactor()
        self._transport: Endpoint | None = None
        self._rpm: Any = None
        self._tpm: Any = None
        self._pacer: Pacer | None = None

    def _make_redactor(self) -> Redactor:
        # every header value may be a credential (e.g. 'api-key' for Azure-style endpoints)
        # and every query value (Gemini's OpenAI layer takes '?key=...')
        query = [v for k, v in self._query.items() if k not in PUBLIC_QUERY]
        return Redactor(self._key, *(Secret(v) for v in (*self._headers.values(), *query) if len(v) >= 4))

    def __getstate__(self) -> dict:
        return {k: (None if k in _RUNTIME else v) for k, v in self.__dict__.items()}

    def __repr__(self) -> str:
        shown = "&".join(f"{k}={v if k in PUBLIC_QUERY else '***'}" for k, v in self._query.items())
        return (f"{type(self).__name__}({self.model!r}, base_url={self.base_url + ('?' + shown if shown else '')!r}, "
                f"api_key={'***' if self._key else None}, input={self.input!r}, output={self.output!r}, "
                f"client={self.client!r})")

    __str__ = __repr__

    @property
    def journal_identity_columns(self) -> list[str]:
        """A journal's identity always covers the input column: the answer is a function of it."""
        return [self.input]

    @property
    def journal_rows(self) -> Any:
        """What a journal keeps of an output row: the output column alone (:mod:`.journal_rows`)."""
        from .journal_rows import AnswerRows

        return AnswerRows(self.output)

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
        await load_tokenizer()
        self._transport = await open_endpoint(self.client, self.base_url, self._key, self.request_timeout,
                                              self.max_connections, self._headers, self._redactor, self._name,
                                              self._query)
        self._rpm = RateLimit(self.requests_per_minute, per=60.0).bucket() if self.requests_per_minute else None
        self._tpm = RateLimit(self.tokens_per_minute, per=60.0).bucket() if self.tokens_per_minute else None
        self._pacer = Pacer(source=self._name) if self.pace_by_headers else None

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
        # a 429 seen meanwhile paused the limits (the service spoke to every caller): wait it out
        for bucket in (self._rpm, self._tpm):
            left = bucket.paused_for() if bucket is not None else 0.0
            if left > 0:
                await asyncio.sleep(left)

    def _settle(self, estimate: int, usage: Mapping[str, Any], prompt_estimate: int | None = None, *,
                lane: str = "live") -> dict[str, Any]:
        """Charge the tokens used beyond the estimate (later requests wait for them); record usage,
        and how far the prompt's estimate was from the ``prompt_tokens`` counted by the endpoint
        (``estimated_prompt_tokens``, ``prompt_estimate_error_tokens``: the sum of |estimate -
        counted|; their ratio to ``prompt_tokens`` is the estimate's relative error). With a
        ``price``, also ``cost``: what the billed tokens cost in ``lane`` (``"live"``, or ``"batch"``
        for an answer from a provider batch: at its discount), in the price's currency. The usage
        recorded is also what a ``Budget(cost=fn.budget_cost(...))`` reconciles with."""
        if lane not in LANES:
            raise ValueError(f"lane must be one of {LANES}, got {lane!r}")
        # the endpoint's numbers as they came (an int stays an int in the totals)
        amounts: dict[str, Any] = {k: v for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                                   if (v := _amount(usage.get(k))) is not None}
        broken = [k for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                  if usage.get(k) is not None and k not in amounts]
        if broken and not self._warned_usage:
            self._warned_usage = True  # once per function and worker: the service sends what it sends
            logging.getLogger("aiospark").warning(
                "aiospark: %s answered usage %s that are not token counts (whole numbers up to %d): "
                "not recorded, not charged", self._name, ", ".join(f"{k}={usage.get(k)!r:.40}" for k in broken),
                MAX_REQUEST_TOKENS)
        # what is billed apart, where the provider says (OpenAI's details): cached prompt tokens
        # (billed at a discount) and reasoning tokens (billed as completion, never shown)
        for detail, key, name in (("prompt_tokens_details", "cached_tokens", "cached_prompt_tokens"),
                                  ("completion_tokens_details", "reasoning_tokens", "reasoning_tokens")):
            details = usage.get(detail)
            if isinstance(details, Mapping) and (v := _amount(details.get(key))) is not None and v > 0:
                amounts[name] = v
        if self._tpm is not None:
            used = amounts.get("total_tokens", amounts.get("prompt_tokens", 0) + amounts.get("completion_tokens", 0))
            if used > estimate:
                self._tpm.reserve(float(used - estimate))  # the delay lands on the next reservations
        if prompt_estimate is not None and "prompt_tokens" in amounts:
            amounts["estimated_prompt_tokens"] = prompt_estimate
            amounts["prompt_estimate_error_tokens"] = abs(prompt_estimate - amounts["prompt_tokens"])
        # a count that is not a token count leaves the bill unknown: no cost, so a budget keeps
        # its estimate rather than settle on the parts it could read
        if self.price is not None and not broken and any(k in amounts for k in ("prompt_tokens",
                                                                                "completion_tokens", "total_tokens")):
            amounts["cost"] = self.price.money(whole_usage(amounts), lane)
        if amounts:
            record_usage(**amounts)
        return amounts

    async def _post(self, body: dict, estimate: int, billed: dict | None = None) -> dict:
        if self._transport is None:
            raise RuntimeError(f"{self._name} is not open: call 'await function.open()' first "
                               "(the entry points do it for you)")
        await self._admit(estimate)
        pacer = self._pacer
        # the explicit per-minute limits are ceilings; the endpoint's headers pace below them
        ticket = await pacer.admit(estimate) if pacer is not None else None
        try:
            answer = await self._transport.post(
                self._path, {**self.extra_body, **body},
                None if ticket is None else (lambda headers: pacer.update(ticket, headers)))  # type: ignore[union-attr]
        except HttpStatusError as exc:
            # an error answer bills nothing (a 429, a 5xx, a refusal): this attempt's estimate comes back
            bill_usage(**{k: 0 for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
                       **({"cost": 0.0} if self.price is not None else {}))
            if exc.retry_after:  # a 429's Retry-After holds back this worker's next requests too
                for bucket in (self._rpm, self._tpm):
                    if bucket is not None:
                        bucket.pause(min(exc.retry_after, MAX_RETRY_AFTER))
                if pacer is not None:
                    pacer.pause(exc.retry_after)
            raise
        except (ConnectorTimeout, asyncio.CancelledError):
            # sent and abandoned (its own timeout, or the row's): the provider may bill it and no
            # answer says how much; counted so the usage shows that such requests happened
            record_usage(abandoned_requests=1)
            raise
        finally:
            if ticket is not None:
                pacer.finished(ticket)  # type: ignore[union-attr]
        usage = answer.get("usage")
        settled = self._settle(estimate, usage if isinstance(usage, Mapping) else {}, _prompt_estimate(body))
        if billed is not None:  # a request for several rows: the caller shares the bill among them
            billed.update(settled)
        return answer

    async def _answer(self, body: dict, estimate: int) -> dict:
        """The answer to ``body``: from the provider batch that answered this row when the batch
        lane collects (:mod:`~aiospark.connectors.openai.batch_answers`), else a live request."""
        if self._batch is not None:
            return await self._batch.answer(self, body, estimate)
        return await self._post(body, estimate)

    def with_batch_answers(self, answers: Any) -> Any:
        """This function answering from a provider batch's ``answers`` (the batch lane's collect,
        :class:`~aiospark.connectors.openai.batch_answers.BatchAnswers`): the same question --
        settings, fingerprint, journal -- with another way to pay for it."""
        collecting = copy.copy(self)
        collecting._batch = answers
        return collecting

    def request_of(self, value: Any) -> tuple[dict[str, Any], int]:
        """The request body for an input ``value`` (not NULL) and its token estimate."""
        raise NotImplementedError

    def value_of(self, answer: dict) -> Any:
        """The output value of an answer (the response body)."""
        raise NotImplementedError

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


