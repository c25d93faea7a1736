"""An OpenAI-compatible server on 127.0.0.1 for tests and benchmarks (aiohttp.web, in a thread).

Routes (under ``/v1``, JSON in and out, like vLLM / Ollama / TGI's OpenAI front ends):

* ``POST /v1/embeddings`` -- ``{"model", "input": str | [str], "dimensions"?, "encoding_format"?}``
  -> ``{"object": "list", "data": [{"index", "embedding"}], "usage": {"prompt_tokens",
  "total_tokens"}}``. Vectors are deterministic (:func:`vector`): ``dimensions`` values (default
  8) of the form ``k/256`` (exact in FLOAT), derived from the text's SHA-256.
* ``POST /v1/chat/completions`` -- ``{"model", "messages", ...}`` -> one choice whose content is
  :func:`answer` of the last user message, with ``usage``. With ``response_format`` (structured
  output) the content is :func:`structured_answer`'s instead, and a schema that breaks OpenAI's
  strict-mode rules gets 400.

Tokens are counted as whitespace-separated words (:func:`tokens`), so tests can predict usage.
With ``api_key`` set, a request without ``Authorization: Bearer <api_key>`` gets 401 (whose body,
like a careless server's, echoes the header it got). Failures are injected by text, so they work
from Spark executors too: an input (embedding text or last user message) that

* is ``"boom"``            -> 500 for the whole request;
* is ``"bad-request"``     -> 400 with an OpenAI-style error body;
* is ``"echo-auth"``       -> 500 whose body echoes the request's headers (Authorization included);
* is ``"malformed"``       -> 200 with a body that is not JSON;
* is ``"bad-json"``        -> 200 with ``Content-Type: application/json`` and a body that is not JSON;
* is ``"no-data"``         -> 200 with a JSON object that has no ``data`` / ``choices``;
* is ``"short"``           -> 200 with one embedding fewer than inputs (embeddings) / no choices;
* starts with ``"throttle"`` -> 429 with ``Retry-After: <server.retry_after>`` the first
  ``server.throttle_times`` times that exact text is seen, then success.

``fail_next(n, status, retry_after)`` makes the next ``n`` requests fail whatever they hold.
``rate_limit=R`` (requests per second) enforces a token bucket of ``R`` requests refilled at ``R``
per second, like OpenAI's: a request beyond it gets 429, and every answer advertises the bucket in
``x-ratelimit-limit-requests`` / ``-remaining-requests`` / ``-reset-requests`` (the time until
full, e.g. ``"340ms"``); ``refused`` counts its 429s. ``ratelimit_headers`` (a dict) is added to
every answer as is (malformed values for tests).
``latency`` (seconds per request) and ``per_input`` (seconds per input) slow every answer down
(the benchmark's fixed service time). Counters: ``requests`` (per path), ``batch_sizes``,
``seen`` (every request: path, time.monotonic(), inputs, Authorization header).

Example::

    with OpenAIServer(api_key="sk-test") as srv:
        print(srv.base_url)            # http://127.0.0.1:<port>/v1

Run on its own (benchmarks): ``python -m tests.support.openai_server --port 8765 --latency 0.02``.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
import time
from collections import Counter
from typing import Any

from aiohttp import web

from tests.support.openai_structured import structured_answer

DEFAULT_DIMENSIONS = 8


def vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The embedding the server returns for ``text``: ``k/256`` values (exact as float32)."""
    out: list[float] = []
    counter = 0
    while len(out) < dimensions:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend(b / 256 for b in digest)
        counter += 1
    return out[:dimensions]


def tokens(text: str) -> int:
    """Tokens the server counts for ``text``: its whitespace-separated words (at least 1)."""
    return max(1, len(str(text).split()))


def answer(prompt: str) -> str:
    """The chat answer the server gives to the last user message ``prompt``."""
    return f"echo: {prompt}"


class OpenAIServer:
    """The server, in a daemon thread with its own event loop. ``start()``/``stop()`` or ``with``."""

    def __init__(self, *, api_key: str | None = None, latency: float = 0.0, per_input: float = 0.0,
                 port: int = 0, retry_after: str = "1", throttle_times: int = 1,
                 rate_limit: float | None = None, ratelimit_headers: dict[str, str] | None = None) -> None:
        self.api_key = api_key
        self.latency = latency
        self.per_input = per_input
        self.port = port
        self.retry_after = retry_after
        self.throttle_times = throttle_times
        self.rate_limit = rate_limit
        self.ratelimit_headers = dict(ratelimit_headers or {})
        self.refused = 0
        self._level = float(rate_limit or 0.0)  # the bucket, full at start
        self._filled = time.monotonic()
        self.requests: Counter = Counter()
        self.batch_sizes: list[int] = []
        self.seen: list[dict] = []
        self._throttled: Counter = Counter()
        self._fail_next: list[tuple[int, str | None]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        """Forget every counter and pending injected failure."""
        with self._lock:
            self.requests.clear()
            self.batch_sizes.clear()
            self.seen.clear()
            self._throttled.clear()
            self._fail_next.clear()
            self.refused = 0
            self._level, self._filled = float(self.rate_limit or 0.0), time.monotonic()

    def fail_next(self, n: int, status: int = 500, retry_after: str | None = None) -> None:
        """The next ``n`` requests get ``status`` (with ``Retry-After: retry_after`` if given)."""
        with self._lock:
            self._fail_next.extend([(status, retry_after)] * n)

    # --- handlers ---------------------------------------------------------------------------

    def _take(self) -> tuple[bool, dict[str, str]]:
        """The rate-limit bucket: (admitted?, the x-ratelimit-* headers to send)."""
        headers = dict(self.ratelimit_headers)
        if not self.rate_limit:
            return True, headers
        rate = float(self.rate_limit)
        with self._lock:
            now = time.monotonic()
            self._level = min(rate, self._level + (now - self._filled) * rate)
            self._filled = now
            ok = self._level >= 1.0
            if ok:
                self._level -= 1.0
            else:
                self.refused += 1
            level = self._level
        headers.update({"x-ratelimit-limit-requests": str(int(rate)),
                        "x-ratelimit-remaining-requests": str(int(level)),
                        "x-ratelimit-reset-requests": f"{round((rate - level) / rate * 1000)}ms"})
        return ok, headers

    @web.middleware
    async def _ratelimit(self, request: web.Request, handler: Any) -> web.StreamResponse:
        ok, headers = self._take()
        if ok:
            resp = await handler(request)
        else:
            resp = web.json_response({"error": {"message": "Rate limit reached for requests",
                                                "type": "requests", "code": "rate_limit_exceeded"}},
                                     status=429, headers={"retry-after-ms": "20"})
        resp.headers.update(headers)
        return resp

    def _check(self, request: web.Request, inputs: list[str], path: str) -> web.Response | None:
        auth = request.headers.get("Authorization")
        with self._lock:
            self.requests[path] += 1
            self.seen.append({"path": path, "time": time.monotonic(), "inputs": list(inputs),
                              "authorization": auth})
            injected = self._fail_next.pop(0) if self._fail_next else None
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return web.json_response({"error": {"message": f"bad credentials: got Authorization {auth!r}",
                                                 "type": "invalid_request_error"}}, status=401)
        if injected is not None:
            status, after = injected
            headers = {"Retry-After": after} if after is not None else {}
            return web.json_response({"error": {"message": "injected failure", "type": "server_error"}},
                                     status=status, headers=headers)
        for text in inputs:
            if text == "boom":
                return web.json_response({"error": {"message": "the model crashed", "type": "server_error"}},
                                         status=500)
            if text == "bad-request":
                return web.json_response({"error": {"message": "this input is not allowed",
                                                     "type": "invalid_request_error"}}, status=400)
            if text == "echo-auth":
                # Authorization first: an error text quotes only the body's start (SDKs send many headers)
                echoed = {"Authorization": request.headers.get("Authorization"), **request.headers}
                return web.Response(status=500, text=json.dumps(echoed), content_type="application/json")
            if text == "malformed":
                return web.Response(status=200, text="<html>not json</html>", content_type="text/html")
            if text == "bad-json":
                return web.Response(status=200, text='{"data": [', content_type="application/json")
            if text == "no-data":
                return web.json_response({"object": "list", "model": "m"})
            if text.startswith("throttle"):
                with self._lock:
                    self._throttled[text] += 1
                    hit = self._throttled[text] <= self.throttle_times
                if hit:
                    return web.json_response({"error": {"message": "rate limit reached", "type": "rate_limit"}},
                                             status=429, headers={"Retry-After": self.retry_after})
        return None

    async def _delay(self, n: int) -> None:
        wait = self.latency + self.per_input * n
        if wait > 0:
            await asyncio.sleep(wait)

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        raw = body.get("input")
        inputs = [raw] if isinstance(raw, str) else list(raw or [])
        with self._lock:
            self.batch_sizes.append(len(inputs))
        failed = self._check(request, [str(t) for t in inputs], "/v1/embeddings")
        if failed is not None:
            return failed
        await self._delay(len(inputs))
        dims = int(body.get("dimensions") or DEFAULT_DIMENSIONS)
        data = [{"object": "embedding", "index": i, "embedding": vector(t, dims)} for i, t in enumerate(inputs)]
        if "short" in inputs:
            data = data[:-1]
        used = sum(tokens(t) for t in inputs)
        return web.json_response({"object": "list", "model": body.get("model"), "data": data,
                                  "usage": {"prompt_tokens": used, "total_tokens": used}})

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body.get("messages") or []
        users = [m.get("content", "") for m in messages if m.get("role") == "user"]
        last = str(users[-1]) if users else ""
        failed = self._check(request, [last], "/v1/chat/completions")
        if failed is not None:
            return failed
        await self._delay(1)
        text = answer(last)
        if body.get("response_format") is not None:
            with self._lock:  # how often this prompt was seen (for "flaky-json:"); reset() forgets it
                self._throttled[("structured", last)] += 1
                before = self._throttled[("structured", last)] - 1
            status, text = structured_answer(body["response_format"], last, before)
            if status != 200:
                return web.json_response({"error": {"message": text, "type": "invalid_request_error"}},
                                         status=status)
        if body.get("system_check"):  # lets tests see that extra_body reached the server
            text += f" [{body['system_check']}]"
        prompt = sum(tokens(m.get("content", "")) for m in messages)
        completion = tokens(text)
        choices = [] if last == "short" else [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]
        return web.json_response({
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": choices,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}})

    # --- lifecycle --------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._ratelimit])
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    def start(self) -> OpenAIServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                self._runner = web.AppRunner(self._app(), access_log=None)
                loop.run_until_complete(self._runner.setup())
                site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=1024)
                loop.run_until_complete(site.start())
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            except BaseException as exc:  # reported to start()'s caller
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="openai-server", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--per-input", type=float, default=0.0, help="seconds per input")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--rate-limit", type=float, default=None,
                        help="requests per second of an advertised token bucket (x-ratelimit-* headers)")
    args = parser.parse_args()
    server = OpenAIServer(api_key=args.api_key, latency=args.latency, per_input=args.per_input,
                          port=args.port, rate_limit=args.rate_limit).start()
    print(server.port, flush=True)  # the parent reads the port from the first line
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
