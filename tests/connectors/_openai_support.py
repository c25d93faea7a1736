"""What the OpenAI connector's tests share: the test key, the clients and two drivers (the
server fixtures, ``server`` and ``srv``, are in conftest.py)."""
from __future__ import annotations

import asyncio
from typing import Any

from aiospark.core import AsyncWaitOperator
from tests.support.operator import drive

KEY = "sk-test-S3cretKey-0123456789"
#: every client= the functions take: the HTTP seam's two transports and the official SDK
CLIENTS = ["pyreqwest", "aiohttp", "openai"]


def run(coro: Any, limit: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, limit))


async def invoke_all(fn: Any, values: list[Any]) -> list[Any]:
    """``fn.async_invoke`` for every value at once, between ``open()`` and ``close()``; exceptions
    are returned in place."""
    await fn.open()
    try:
        return await asyncio.gather(*(fn.async_invoke(v) for v in values), return_exceptions=True)
    finally:
        await fn.close()


async def through_operator(fn: Any, values: list[Any], **kwargs: Any) -> tuple[list[Any], AsyncWaitOperator]:
    """Run ``values`` through the core operator; returns (outputs, operator)."""
    out: list[Any] = []
    op = AsyncWaitOperator(fn, lambda e: out.append(e.value), **kwargs)
    await drive(op, values)
    return out, op


# --- a scripted OpenAI-compatible server: each test writes the exact answers and headers ---------

Reply = tuple  # (status, headers, JSON body (a dict) or raw text)


def chat_reply(content: Any = "ok", *, finish_reason: Any = "stop", message: Any = "default",
               usage: dict | None = None, headers: dict | None = None, status: int = 200) -> Reply:
    """A chat completion whose first choice is ``message`` (default: ``{role, content}``);
    ``message=None`` leaves it out of the choice."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason}
    if message == "default":
        message = {"role": "assistant", "content": content}
    if message is not None:
        choice["message"] = message
    body = {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
            "usage": usage if usage is not None else {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    return status, dict(headers or {}), body


def embeddings_reply(inputs: list[str], *, indices: list[Any] | None = None, vectors: list[Any] | None = None,
                     headers: dict | None = None) -> Reply:
    """An embeddings answer: ``vector(text, 4)`` per input, stamped with ``indices`` (default 0..n-1;
    ``"omit"`` leaves an item's ``index`` out)."""
    from tests.support.openai_server import vector

    data = []
    for i, text in enumerate(inputs):
        item: dict[str, Any] = {"object": "embedding", "embedding": vectors[i] if vectors else vector(text, 4)}
        index = i if indices is None else indices[i]
        if index != "omit":
            item["index"] = index
        data.append(item)
    return 200, dict(headers or {}), {"object": "list", "model": "m", "data": data,
                                      "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}}


def error_reply(status: int, message: str, *, code: str | None = None, type_: str = "invalid_request_error",
                headers: dict | None = None) -> Reply:
    return status, dict(headers or {}), {"error": {"message": message, "type": type_, "code": code}}


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 (aiohttp.web in a thread) answering every POST with
    ``reply(path, body, seen_before) -> (status, headers, body)``, which the test sets; by default a
    plain chat answer (``chat_reply()``) or, for a path ending in ``/embeddings``, the vectors of
    the inputs. ``seen``: every request (``path``, ``query``, ``body``, ``time``, ``headers``);
    ``max_in_flight``: the most requests it held at once (unanswered yet).

    Example::

        with ScriptedServer() as srv:
            srv.reply = lambda path, body, n: chat_reply(None, finish_reason="content_filter")
    """

    def __init__(self, latency: float = 0.0) -> None:
        self.reply: Any = None
        self.latency = latency
        self.seen: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def count(self, suffix: str = "") -> int:
        return sum(1 for s in self.seen if s["path"].endswith(suffix))

    async def _handle(self, request: Any) -> Any:
        import json
        import time

        from aiohttp import web

        body = await request.json()
        n = self.count(request.path)
        self.seen.append({"path": request.path, "query": dict(request.query), "body": body, "time": time.monotonic(),
                          "headers": dict(request.headers)})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        if self.reply is not None:
            status, headers, answer = self.reply(request.path, body, n)
        elif request.path.endswith("/embeddings"):
            raw = body.get("input")
            status, headers, answer = embeddings_reply([raw] if isinstance(raw, str) else list(raw))
        else:
            status, headers, answer = chat_reply("ok")
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return web.Response(status=status, text=text, content_type="application/json", headers=headers)

    def __enter__(self) -> ScriptedServer:
        import threading

        from aiohttp import web

        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = runner.addresses[0][1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="scripted-openai", daemon=True)
        self._thread.start()
        ready.wait(30)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
