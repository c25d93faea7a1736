"""Real servers on 127.0.0.1 for the conformance suite (kept here on purpose: no aiospark.testing).

* ``HttpServer`` -- an aiohttp.web app on its own event loop in a daemon thread of the test process,
  reachable from Spark's worker processes. It answers
  ``GET /echo`` (the query back as JSON), ``GET /slow?token=T`` (holds the request open until the
  client goes away and records that it went away: the server-side proof that a cancelled call
  closed its connection), ``GET /stats?token=T``, and OpenAI / Anthropic compatible endpoints
  (``POST /v1/chat/completions``, ``/v1/embeddings``, ``/v1/messages``) with the documented JSON shapes.
* ``RedisServer`` / ``PostgresServer`` -- the real server binaries on a free port in a temp dir.
"""
from __future__ import annotations

import asyncio
import base64
import glob
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time

from aiohttp import web

HOST = "127.0.0.1"
# How long /slow holds a request whose client never goes away; far beyond any operator timeout used
# by the tests, short enough that a leaked request does not outlive the suite by much.
SLOW_HOLD_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _embedding(text: str) -> list:
    # Deterministic, so the tests can check the SDK decoded the numbers (not only the shape).
    return [float(len(text)), 0.5, -1.0]


class HttpServer:
    """aiohttp.web in a background thread; ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        self.slow: dict = {}  # token -> "open" | "closed" | "held-to-the-end"
        self.loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="conformance-http", daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> HttpServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_get("/echo", self._echo)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/stats", self._stats)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/messages", self._messages)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind((HOST, 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def _stop(self) -> None:
        self._stopping.set()  # lets held /slow requests end, so cleanup does not wait for them
        await self._runner.cleanup()

    async def _echo(self, request: web.Request) -> web.Response:
        return web.json_response({"path": request.path, "query": dict(request.query)})

    async def _slow(self, request: web.Request) -> web.Response:
        token = request.query.get("token", "")
        self.slow[token] = "open"
        deadline = time.monotonic() + SLOW_HOLD_SECONDS
        # aiohttp does not cancel handlers when the client disconnects (handler_cancellation=False),
        # so watch the connection: the protocol drops its transport in connection_lost().
        while time.monotonic() < deadline and not self._stopping.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                self.slow[token] = "closed"
                return web.Response(text="client went away")
            await asyncio.sleep(0.02)
        self.slow[token] = "held-to-the-end"
        return web.Response(text="too late")

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response({"state": self.slow.get(request.query.get("token", ""), "unknown")})

    @staticmethod
    def _unauthorized(kind: str) -> web.Response:
        return web.json_response({"error": {"message": f"bad {kind} key", "type": "invalid_request_error"}},
                                 status=401)

    async def _chat(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer test":
            return self._unauthorized("OpenAI")
        body = await request.json()
        text = "echo: " + body["messages"][-1]["content"]
        return web.json_response({
            "id": "chatcmpl-conformance", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        })

    async def _embeddings(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer test":
            return self._unauthorized("OpenAI")
        body = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(inputs):
            vector = _embedding(text)
            if body.get("encoding_format") == "base64":  # the SDK asks for this by default
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": vector})
        return web.json_response({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}})

    async def _messages(self, request: web.Request) -> web.Response:
        # The SDK sends the key as x-api-key (the documented header) or, in newer releases, as a bearer token.
        keyed = request.headers.get("x-api-key") == "test" or request.headers.get("Authorization") == "Bearer test"
        if not keyed or "anthropic-version" not in request.headers:
            return self._unauthorized("Anthropic")
        body = await request.json()
        text = "echo: " + body["messages"][-1]["content"]
        return web.json_response({
            "id": "msg_conformance", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 2},
        })


def _wait_until(ready, what: str, proc: subprocess.Popen | None, log: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        if ready():
            return
        time.sleep(0.1)
    tail = open(log, errors="replace").read()[-2000:] if os.path.exists(log) else ""
    raise RuntimeError(f"{what} did not start on {HOST}:\n{tail}")


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


class RedisServer:
    """``redis-server`` on a free port, no persistence, files in a temp dir."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="aiospark-conf-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
        log = os.path.join(self.dir, "redis.log")
        self.proc = subprocess.Popen(
            [binary, "--bind", HOST, "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--logfile", log], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait_until(lambda: _port_open(self.port), "redis-server", self.proc, log)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        shutil.rmtree(self.dir, ignore_errors=True)


class PostgresServer:
    """PostgreSQL from ``/usr/lib/postgresql/*/bin``; as root, it runs as the ``postgres`` user
    (PostgreSQL refuses to run as root) with its data and socket in a temp dir that user owns."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="aiospark-conf-pg-")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "pg.log")
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        found = shutil.which("initdb") or (bins[-1] if bins else None)
        if found is None:
            raise RuntimeError("PostgreSQL server binaries not found (apt-get install -y postgresql)")
        self.bin = os.path.dirname(found)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run(prefix + list(args), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {(done.stderr or done.stdout)[-2000:]}")

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", "--locale=C")
        options = f"-c listen_addresses={HOST} -p {self.port} -k {self.dir} -c fsync=off"
        self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-l", self.log, "-o", options,
                  "-w", "-t", "60", "start")
        _wait_until(lambda: _port_open(self.port), "PostgreSQL", None, self.log)
        return self

    def stop(self) -> None:
        try:
            self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
