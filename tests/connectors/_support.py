"""Helpers of the connector tests: constants and a small aiohttp JSON server on 127.0.0.1."""

import asyncio
import base64
import json
import threading
from urllib.parse import parse_qs, unquote

from aiohttp import web

from tests.support.servers import free_port

REDIS_PASSWORD = "r3dis-Pa55word"
HTTP_TOKEN = "t0ken-S3cret"

# Keys that must be looked up literally, never interpreted.
TRICKY = ["a/b", "../etc/passwd", "..", ".", "100%", "50% off", "it's", 'say "hi"', "x'; DROP TABLE t; --",
          "naïve café ☕ 日本", "sp ace", "q?x=1&y=2", "#frag", "{id}", "back\\slash", "+plus"]


class HttpStub:
    """aiohttp server in a thread. Routes (all GET unless noted):

    /item/<id>             object row from ``items``; 404 if absent
    /multi/<id>            list of rows from ``multi`` ([] if absent)
    /wrapped/<id>          {"data": {"item": row}}
    /q?id=<id>             like /item but the key is in the query string
    /pair/<a>/<b>          {"a": a, "b": b}
    /slow/<id>?delay=s     row after sleeping
    /status/<code>?retry_after=...  that status, optional Retry-After header
    /auth/<id>             needs "Authorization: Bearer HTTP_TOKEN", else 401
    /basic/<id>            needs HTTP basic auth reader:b4sic-pw, else 401
    /text/<id>             200 with a non-JSON body
    POST /batch            {"keys": [...]} -> {"results": {str(k): row}}; key "boom" -> 500;
                           key "reject" -> 400 (the whole batch); a body over 1 MiB -> 413
    /echo/<id>, POST /echo 500 whose body is the request's headers as JSON (a server that echoes)
    """

    def __init__(self):
        self.items = {}
        self.multi = {}
        self.raw_paths = []
        self.batch_bodies = []
        self.port = None

    async def handle(self, request):
        raw = request.raw_path
        self.raw_paths.append(raw)
        path, _, query = raw.partition("?")
        parts = [unquote(p) for p in path.split("/")[1:]]
        head, args = parts[0], parts[1:]
        qs = {k: v[0] for k, v in parse_qs(query).items()}
        if request.method == "POST" and head == "batch":
            body = await request.json()
            self.batch_bodies.append(body)
            if "boom" in body["keys"]:
                return web.Response(status=500, text="batch failed")
            if "reject" in body["keys"]:
                return web.Response(status=400, text="key 'reject' is not allowed")
            results = {}
            for k in body["keys"]:
                text = k if isinstance(k, str) else json.dumps(k)
                if text in self.items:
                    results[text] = self.items[text]
            return web.json_response({"results": results})
        if head == "echo":
            return web.json_response({"error": "upstream failed", "request_headers": dict(request.headers)},
                                     status=500)
        if head == "item":
            row = self.items.get(args[0])
            return web.json_response(row) if row is not None else web.Response(status=404)
        if head == "q":
            row = self.items.get(qs.get("id"))
            return web.json_response(row) if row is not None else web.Response(status=404)
        if head == "multi":
            return web.json_response(self.multi.get(args[0], []))
        if head == "wrapped":
            row = self.items.get(args[0])
            return web.json_response({"data": {"item": row}})
        if head == "pair":
            return web.json_response({"a": args[0], "b": args[1]})
        if head == "slow":
            await asyncio.sleep(float(qs.get("delay", "0.2")))
            return web.json_response({"id": args[0]})
        if head == "status":
            headers = {"Retry-After": qs["retry_after"]} if "retry_after" in qs else {}
            return web.Response(status=int(args[0]), text=f"status {args[0]}", headers=headers)
        if head == "auth":
            if request.headers.get("Authorization") != f"Bearer {HTTP_TOKEN}":
                return web.Response(status=401, text="unauthorized")
            return web.json_response({"id": args[0]})
        if head == "basic":
            want = "Basic " + base64.b64encode(b"reader:b4sic-pw").decode()
            if request.headers.get("Authorization") != want:
                return web.Response(status=401, text="unauthorized")
            return web.json_response({"id": args[0]})
        if head == "text":
            return web.Response(text="<html>not json</html>")
        return web.Response(status=400, text="unknown route")

    def start(self):
        ready = threading.Event()
        self.loop = asyncio.new_event_loop()

        def run():
            asyncio.set_event_loop(self.loop)
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self.handle)
            self.runner = web.AppRunner(app, access_log=None)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.runner.cleanup())
            self.loop.close()

        self.thread = threading.Thread(target=run, name="http-stub", daemon=True)
        self.thread.start()
        assert ready.wait(10), "HTTP stub did not start"
        return self

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"


def dead_port():
    """A port nothing listens on."""
    return free_port()
