"""A deterministic OpenAI-compatible endpoint on 127.0.0.1: try aiospark's LLM connectors without a model.

No model runs: every answer is derived from a hash of the request, so the same request always gets
the same answer, on any machine, in microseconds (plus ``--latency-ms``).

* ``POST /v1/embeddings`` -- ``{"model", "input": str | [str], "dimensions"?}`` -> unit vectors of
  ``dimensions`` floats (default 256) from the text's SHAKE-256 hash (:func:`embedding`).
* ``POST /v1/chat/completions`` -- the answer to the last user message (:func:`chat_answer`), cut to
  ``max_tokens``; with ``response_format`` ``{"type": "json_schema", "json_schema": {"schema": ...}}``
  a JSON instance of that schema (:func:`schema_instance`: objects, arrays, strings, integers,
  numbers, booleans, enums, nullable types, ``$ref``/``$defs``, ``anyOf``/``oneOf``/``allOf``).
* ``GET /v1/models``; ``GET /stats`` (requests answered and refused, not OpenAI's).
* The Files and Batches API (``/v1/files``, ``/v1/batches``) of :mod:`aiospark.app.demo_openai_batch`:
  batches answered by the same functions as the live routes, after ``--batch-delay`` seconds, with
  failures (``--batch-fail-every N``) and expiry (``--batch-expire``) on request.

``usage`` counts tokens as ``ceil(len(text) / 4)`` (:func:`count_tokens`, OpenAI's rule of thumb,
the connectors' own estimate). A rate limit (``--rpm`` or ``--rps``, and ``--tpm``) is a token
bucket per limit, advertised on every answer the way OpenAI does (``x-ratelimit-limit-requests``,
``x-ratelimit-remaining-requests``, ``x-ratelimit-reset-requests: 1s`` / ``6m0s`` / ``20ms``, and
the ``-tokens`` ones); an empty bucket answers 429 with ``Retry-After`` and ``retry-after-ms``.
Errors are OpenAI-shaped: ``{"error": {"message", "type", "param", "code"}}``.

Command line (the README's): ``python -m aiospark.app.demo_service --openai --port 11434`` prints its
base URL (``http://127.0.0.1:11434/v1``) and serves until Ctrl-C. In a program::

    with DemoOpenAI(latency_ms=50, rps=200) as endpoint:
        chat = OpenAIChat("any-model", base_url=endpoint.base_url, input="text")
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

from .demo_openai_batch import BatchStore, add_batch_routes, check_options, json_object
from .demo_openai_schema import SchemaError, digest, schema_instance

__all__ = ["DemoOpenAI", "count_tokens", "embedding", "chat_answer", "schema_instance", "format_reset",
           "serve_openai", "main"]

HOST = "127.0.0.1"
MAX_BODY = 4 * 1024 * 1024   # bytes per request: room for 2048 long texts, not for a memory attack
MAX_INPUTS = 2048            # texts per embeddings request (OpenAI's own limit)
MAX_DIMENSIONS = 4096
DEFAULT_DIMENSIONS = 256
_WORDS = ("positive", "negative", "neutral", "mixed", "curious", "calm", "urgent", "unclear")


def count_tokens(text: str) -> int:
    """Tokens counted for ``text``: ``ceil(len(text) / 4)``, at least 1 (as the connectors estimate)."""
    return max(1, math.ceil(len(text) / 4))


def embedding(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The unit vector answered for ``text``: a function of the text alone (cosine similarity works)."""
    raw = digest(text, 2 * dimensions, "embedding")
    vec = [int.from_bytes(raw[2 * i:2 * i + 2], "big") / 32768.0 - 1.0 for i in range(dimensions)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def chat_answer(prompt: str, max_tokens: int | None = None) -> str:
    """The plain chat answer to the last user message ``prompt`` (cut at a word to ``max_tokens``)."""
    word = _WORDS[digest(prompt, 1, "answer")[0] % len(_WORDS)]
    text = f"{word}. (The demo endpoint's fixed answer to: {prompt})"
    if max_tokens is not None and count_tokens(text) > max_tokens:
        cut = text[:max_tokens * 4]
        text = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return text


def format_reset(seconds: float) -> str:
    """A duration as OpenAI writes ``x-ratelimit-reset-*``: ``20ms``, ``1s``, ``1.5s``, ``6m0s``, ``1h2m3s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    return (f"{hours}h" if hours else "") + f"{rest // 60}m{rest % 60}s"


class Bucket:
    """A token bucket: ``capacity`` units, refilled at ``rate`` units per second, full at start."""

    def __init__(self, capacity: float, rate: float) -> None:
        self.capacity, self.rate = capacity, rate
        self.level, self.t = capacity, time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.t) * self.rate)
        self.t = now

    def wait(self, cost: float) -> float:
        """Seconds until ``cost`` units are there (0: they are)."""
        return max(0.0, (cost - self.level) / self.rate)

    def headers(self, kind: str) -> dict[str, str]:
        return {f"x-ratelimit-limit-{kind}": str(int(self.capacity)),
                f"x-ratelimit-remaining-{kind}": str(max(0, int(self.level))),
                f"x-ratelimit-reset-{kind}": format_reset((self.capacity - self.level) / self.rate)}


class _Error(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.body = status, {"error": {"message": message, "type": type_, "param": param,
                                                    "code": code}}


class Endpoint:
    """The state of one endpoint: its buckets and counters (touched only on its event loop)."""

    def __init__(self, latency_ms: float = 0.0, rpm: float | None = None, rps: float | None = None,
                 tpm: float | None = None) -> None:
        if rpm is not None and rps is not None:
            raise ValueError("give --rpm or --rps, not both (both limit requests)")
        for name, value in (("latency_ms", latency_ms), ("rpm", rpm), ("rps", rps), ("tpm", tpm)):
            if value is not None and (value < 0 or (name != "latency_ms" and value == 0)):
                raise ValueError(f"{name} must be {'>= 0' if name == 'latency_ms' else '> 0'}, got {value}")
        self.latency = latency_ms / 1000.0
        self.requests = Bucket(rpm, rpm / 60.0) if rpm else Bucket(rps, rps) if rps else None
        self.tokens = Bucket(tpm, tpm / 60.0) if tpm else None
        self.counts = {"answered": 0, "rate_limited": 0, "errors": 0}

    def admit(self, cost: int) -> dict[str, str]:
        """Take one request and ``cost`` tokens, or raise a 429; the rate-limit headers either way."""
        now = time.monotonic()
        buckets = [(b, kind, c) for b, kind, c in ((self.requests, "requests", 1), (self.tokens, "tokens", cost))
                   if b is not None]
        for bucket, _kind, c in buckets:
            bucket.refill(now)
            if c > bucket.capacity:
                raise _Error(400, f"this request needs {c} tokens, more than the endpoint's limit of "
                                  f"{int(bucket.capacity)} per minute (--tpm): send less per request",
                             code="request_too_large")
        wait = max([b.wait(c) for b, _, c in buckets], default=0.0)
        if wait == 0:
            for bucket, _, c in buckets:
                bucket.level -= c
        headers: dict[str, str] = {}
        for bucket, kind, _ in buckets:
            headers.update(bucket.headers(kind))
        if wait > 0:
            self.counts["rate_limited"] += 1
            kind = max(buckets, key=lambda b: b[0].wait(b[2]))[1]
            headers.update({"Retry-After": str(max(1, math.ceil(wait))), "retry-after-ms": str(math.ceil(wait * 1000))})
            error = _Error(429, f"Rate limit reached for {kind} (demo endpoint): please try again in "
                                f"{format_reset(wait)}.", type_=kind, code="rate_limit_exceeded")
            error.headers = headers  # type: ignore[attr-defined]
            raise error
        return headers

    # -- the two POST routes: body (a dict) -> (answer, tokens charged) ------------------------------
    def embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise _Error(400, "'input' must be a non-empty string or list of strings", param="input")
        if len(texts) > MAX_INPUTS:
            raise _Error(400, f"'input' holds {len(texts)} texts, at most {MAX_INPUTS} per request", param="input")
        dims = body.get("dimensions", DEFAULT_DIMENSIONS)
        if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= MAX_DIMENSIONS:
            raise _Error(400, f"'dimensions' must be an integer in [1, {MAX_DIMENSIONS}], got {dims!r}",
                         param="dimensions")
        used = sum(count_tokens(t) for t in texts)
        return {"object": "list", "model": str(body.get("model", "")),
                "data": [{"object": "embedding", "index": i, "embedding": embedding(t, dims)}
                         for i, t in enumerate(texts)],
                "usage": {"prompt_tokens": used, "total_tokens": used}}

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise _Error(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
        if body.get("stream"):
            raise _Error(400, "the demo endpoint does not stream: leave 'stream' out", param="stream")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                       or max_tokens < 1):
            raise _Error(400, f"'max_tokens' must be a positive integer, got {max_tokens!r}", param="max_tokens")
        users = [m for m in messages if m["role"] == "user"]
        prompt = _text(users[-1].get("content")) if users else ""
        fmt = body.get("response_format") or {"type": "text"}
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        finish = "stop"
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, (dict, bool)):
                raise _Error(400, "response_format json_schema needs {'json_schema': {'name', 'schema'}}",
                             param="response_format")
            try:
                content = schema_instance(schema, prompt)
            except SchemaError as exc:
                raise _Error(400, f"response_format: {exc}", param="response_format") from None
        elif kind == "json_object":
            content = json.dumps({"answer": chat_answer(prompt).split(".")[0]})
        elif kind == "text":
            content = chat_answer(prompt, max_tokens)
            finish = "length" if content != chat_answer(prompt) else "stop"
        else:
            raise _Error(400, f"response_format type must be text, json_object or json_schema, got {kind!r}",
                         param="response_format")
        prompt_tokens = sum(count_tokens(_text(m.get("content"))) for m in messages)
        completion = count_tokens(content)
        return {"id": "chatcmpl-demo-" + digest(prompt, 8, "id").hex(), "object": "chat.completion",
                "created": 0, "model": str(body.get("model", "")),
                "choices": [{"index": 0, "finish_reason": finish,
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                          "total_tokens": prompt_tokens + completion}}


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def batch_store(endpoint: Endpoint, **options: Any) -> BatchStore:
    """The Files and Batches state of ``endpoint``: batch lines answered by its live routes' functions."""
    return BatchStore(lambda name, body: getattr(endpoint, name)(body), _Error, **options)


def make_app(endpoint: Endpoint, store: BatchStore | None = None) -> Any:
    """The aiohttp application serving ``endpoint`` (and ``store``'s Files and Batches routes)."""
    store = store if store is not None else batch_store(endpoint)
    import json

    from aiohttp import web

    def reply(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        return web.Response(status=status, text=json.dumps(body), content_type="application/json",
                            headers=headers)

    @web.middleware
    async def openai_errors(request: Any, handler: Any) -> Any:
        try:
            return await handler(request)
        except _Error as exc:
            endpoint.counts["errors"] += exc.status != 429
            return reply(exc.status, exc.body, getattr(exc, "headers", None))
        except web.HTTPException as exc:  # 404, 405, 413 from aiohttp itself, in OpenAI's shape
            endpoint.counts["errors"] += 1
            return reply(exc.status, _Error(exc.status, f"{exc.reason}: {request.method} {request.path[:200]}",
                                            code=str(exc.status)).body)

    def route(answer: Any) -> Any:
        async def handle(request: Any) -> Any:
            body = await json_object(request, _Error)
            result = answer(body)  # validated before the rate limit: a bad request costs nothing
            headers = endpoint.admit(result["usage"]["total_tokens"])
            if endpoint.latency:
                await asyncio.sleep(endpoint.latency)
            endpoint.counts["answered"] += 1
            return reply(200, result, headers)
        return handle

    async def models(request: Any) -> Any:
        return reply(200, {"object": "list", "data": [{"id": "demo", "object": "model", "owned_by": "aiospark"}]})

    async def stats(request: Any) -> Any:
        return reply(200, {**endpoint.counts, **store.stats()})

    app = web.Application(client_max_size=MAX_BODY, middlewares=[openai_errors])
    app.router.add_post("/v1/embeddings", route(endpoint.embeddings))
    app.router.add_post("/v1/chat/completions", route(endpoint.chat))
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    add_batch_routes(app, store, _Error)
    return app


async def serve_openai(endpoint: Endpoint, port: int = 0, host: str = HOST, ready: Any = print,
                       store: BatchStore | None = None) -> None:
    """Serve on ``host:port`` until cancelled; ``ready(base_url)`` is called once listening."""
    from aiohttp import web

    runner = web.AppRunner(make_app(endpoint, store), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        bound = runner.addresses[0][1]
        ready(f"http://{host if ':' not in host else f'[{host}]'}:{bound}/v1")
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiospark.app.demo_service --openai [--port N --latency-ms MS --rpm N|--rps N --tpm N]``."""
    from .demo_process import run_until_stopped

    parser = argparse.ArgumentParser(prog="python -m aiospark.app.demo_service --openai",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 = any free port (default)")
    parser.add_argument("--host", default=HOST, help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="milliseconds added to every answer")
    parser.add_argument("--rpm", type=float, help="requests per minute (a bucket of this many, refilled per minute)")
    parser.add_argument("--rps", type=float, help="requests per second (a bucket of this many, refilled per second)")
    parser.add_argument("--tpm", type=float, help="tokens per minute (prompt + completion)")
    parser.add_argument("--batch-delay", type=float, default=0.5, help="seconds a batch takes to complete")
    parser.add_argument("--batch-fail-every", type=int, help="every Nth request of a batch fails (error file)")
    parser.add_argument("--batch-expire", action="store_true", help="batches expire halfway (batch_expired)")
    parser.add_argument("--batch-max-requests", type=int, default=50_000, help="requests per batch file")
    parser.add_argument("--batch-max-bytes", type=int, default=200 * 1024 * 1024, help="bytes per batch file")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when stdin closes")
    args = parser.parse_args(argv)
    try:
        endpoint = Endpoint(args.latency_ms, args.rpm, args.rps, args.tpm)
        store = batch_store(endpoint, delay=args.batch_delay, fail_every=args.batch_fail_every,
                            expire=args.batch_expire, max_requests=args.batch_max_requests,
                            max_bytes=args.batch_max_bytes)
    except ValueError as exc:
        parser.error(str(exc))

    def ready(url: str) -> None:
        print(url, flush=True)
        print(f"aiospark demo OpenAI-compatible endpoint (deterministic answers, no model): base_url={url}",
              file=sys.stderr, flush=True)

    return run_until_stopped(serve_openai(endpoint, args.port, args.host, ready, store), args.exit_on_stdin_eof)


class DemoOpenAI:
    """The endpoint in a child process; a context manager whose ``base_url`` ends in ``/v1``.

    ``batch_*`` configure its Batch API (:mod:`aiospark.app.demo_openai_batch`)::

        with DemoOpenAI(batch_delay=2.0, batch_fail_every=10) as endpoint:
            ...  # every 10th request of each batch ends in the error file
    """

    def __init__(self, *, latency_ms: float = 0.0, rpm: float | None = None, rps: float | None = None,
                 tpm: float | None = None, port: int = 0, batch_delay: float = 0.5,
                 batch_fail_every: int | None = None, batch_expire: bool = False,
                 batch_max_requests: int = 50_000, batch_max_bytes: int = 200 * 1024 * 1024) -> None:
        Endpoint(latency_ms, rpm, rps, tpm)  # the arguments' errors here, not in the child
        check_options(batch_delay, batch_fail_every, batch_max_requests, batch_max_bytes)
        self.args = ["--openai", "--port", str(port), "--latency-ms", repr(latency_ms),
                     "--batch-delay", repr(float(batch_delay)), "--batch-max-requests", str(batch_max_requests),
                     "--batch-max-bytes", str(batch_max_bytes)]
        for flag, value in (("--rpm", rpm), ("--rps", rps), ("--tpm", tpm), ("--batch-fail-every", batch_fail_every)):
            if value is not None:
                self.args += [flag, repr(value)]
        if batch_expire:
            self.args.append("--batch-expire")
        self.base_url = ""
        self._child: Any = None

    def __enter__(self) -> DemoOpenAI:
        from .demo_process import Child

        self._child = Child(self.args).__enter__()
        self.base_url = self._child.url
        return self

    def __exit__(self, *exc: Any) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.__exit__()

    def stats(self) -> dict[str, Any]:
        """``{"answered", "rate_limited", "errors", "batch_submitted", "batch_submitted_twice"}`` so far."""
        import json
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.base_url[:-len("/v1")] + "/stats", timeout=30) as response:
            return json.loads(response.read())
