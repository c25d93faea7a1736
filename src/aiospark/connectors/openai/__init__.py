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

* Transport: ``client="auto"`` (default) sends through aiospark's HTTP transport, as ``HttpLookup``
  does: pyreqwest where it is installed, else aiohttp (``client="pyreqwest"``/``"aiohttp"`` force
  one; ``AIOSPARK_HTTP_TRANSPORT`` decides for the process); ``client="openai"`` uses the official
  SDK (``pip install openai``). One client per worker process and configuration
  (:mod:`aiospark.connectors.clients`).
* Embeddings batching: rows are grouped into one request with ``input=[...]`` of up to
  ``batch_size`` texts, sent when full or ``batch_delay`` seconds after its first text (an
  :class:`aiospark.lookup.Lookuper` over the endpoint). Equal texts in flight share one slot;
  ``cache=LookupCache(...)`` keeps answers. An error for a request (429, 5xx, timeout, a bad
  answer, a 401/403/404) reaches every row of it; a refusal of the content (400, 413, 422) is
  split in halves until the text at fault stands alone, so only its row gets the error. Vectors
  are placed by their ``index`` exactly (each input once, else an error for the request). A
  batch fills only from rows in flight: give the entry point ``capacity >= 2 * batch_size``.
* Limits: ``requests_per_minute`` and ``tokens_per_minute`` are token buckets per worker process
  (so the cluster's total is workers x limit; for one limit across the cluster pass the entry
  point ``rate_limit=RedisRateLimit(...)``, which counts rows). Before a request its tokens are
  estimated (:func:`estimate_tokens`: ``ceil(characters / 4)`` per text, plus ``max_tokens`` for
  chat) and charged; after it, the difference to the answer's ``usage.total_tokens`` is charged
  too when it was more (an over-estimate is not given back). A 429's ``Retry-After`` pauses both
  buckets: the worker's next requests wait it out.
* Errors: 429/5xx are retryable :class:`~aiospark.connectors.HttpStatusError` with ``retry_after``
  from ``Retry-After`` (or ``retry-after-ms``); the entry points' ``retry=`` waits at least that
  long (at most 600 s). Use :func:`default_retry`. A 429 ``insufficient_quota`` is not retried
  and stops the worker's requests to that account (base_url + key) for 30 s, after which one
  request asks again. A chat answer that is not an answer
  (content filter, refusal, tool call, no message, cut off at ``max_tokens``, empty after
  reasoning) is a :class:`NotAnAnswer` naming its ``reason``, not retried
  (:mod:`aiospark.connectors.openai.answers`). A request estimated above the endpoint's advertised
  token limit fails at once (:class:`RequestTooLarge`). Other statuses, timeouts, connection
  errors and answers that do not fit the API: see :mod:`aiospark.connectors.openai.endpoint`.
* Usage: after each answer, ``aiospark.record_usage(prompt_tokens=...,
  completion_tokens=..., total_tokens=...)`` (once per request: a batch's usage is recorded once;
  ``cached_prompt_tokens`` and ``reasoning_tokens`` where the endpoint reports them;
  ``abandoned_requests`` for requests a timeout gave up on after sending);
  the job's total is ``out.aiospark_metrics.total.usage``.
* Money: ``price=Price(input=..., output=..., cached_input=..., batch_discount=0.5)`` per 1M
  tokens (or a table ``{model: Price}``) adds a ``cost`` amount to each call's usage, in the
  price's currency (an answer of the provider batch lane at the discount); progress shows it and
  ``aiospark.plan`` estimates it per lane. ``aiospark.Budget(20.0, cost=chat.budget_cost())`` holds
  a budget in money (or ``budget_cost("total_tokens")``: tokens) against what was billed
  (:mod:`aiospark.connectors.openai.price`, :mod:`aiospark.budget.billed`).
* Secrets: ``api_key`` (else the ``api_key_env`` environment variable, ``OPENAI_API_KEY`` by
  default; ``api_key_env=None`` never reads it) never shows in a repr, message or error text
  (:class:`~aiospark.connectors.redaction.Redactor`); no key -> no ``Authorization`` header.

The package: ``function.py`` (what both functions share: limits, retries, usage, the transport's
life), ``embeddings.py``, ``chat.py`` with ``answers.py`` (what a choice holds), ``schema.py``
(structured outputs: the JSON Schema, with ``response_format.py`` and ``answer_values.py`` for the
way in and back) and ``choices.py`` (their allowed values), ``pacing.py`` (the
endpoint's ``x-ratelimit-*`` headers), ``price.py`` (prices and budgets in tokens or money) and ``endpoint.py`` (the API's requests and errors, over the
HTTP transport or the ``openai`` SDK). Every
import inside it is relative or absolute, so ``import openai`` there is always the SDK.
"""

from __future__ import annotations

from .answers import NotAnAnswer
from .chat import OpenAIChat
from .embeddings import OpenAIEmbeddings
from .function import OpenAIFunction, default_retry, estimate_tokens
from .pacing import RequestTooLarge
from .price import Price

__all__ = ["NotAnAnswer", "OpenAIChat", "OpenAIEmbeddings", "OpenAIFunction", "Price", "RequestTooLarge", "default_retry",
           "estimate_tokens"]
