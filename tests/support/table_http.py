"""A real HTTP server on 127.0.0.1 serving a lookup table as JSON, failing for chosen keys (tests only).

The table maps composite keys ``(s, n)`` (a string and an integer) to lists of rows. Endpoints, in
the formats :class:`aiospark.connectors.HttpLookup` speaks:

* ``GET /t/{n}/{s}`` -> the key's rows as a JSON list; 404 for a key not in the table; **500** for a
  key in the failing set. ``s`` is the percent-decoded last path segment (UTF-8), so every string,
  ``/`` and ``..`` included, has exactly one path.
* ``POST /batch`` with ``{"keys": [[s, n], ...]}`` -> ``{"results": [rows | null, ...]}`` aligned with
  the request; **422** when any requested key is failing (HttpLookup then splits the batch until each
  key stands alone, so only failing keys end up with an error -- a 5xx would fail the whole batch).

Example::

    with TableServer() as server:
        server.load({("a", 1): [{"val": "x", "num": 2}]}, failing={("b", 2)})
        source = HttpLookup(server.url + "/t/{n}/{s}", "val STRING, num BIGINT", key_columns=["s", "n"])

``requests`` counts the requests served (a check that lookups really reached the server).
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from tests.support.threaded_http import LoopbackHTTPServer

__all__ = ["TableServer"]

Key = tuple[str, int]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client's pool reuses connections
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.count()
        parts = self.path.split("/")
        if len(parts) != 4 or parts[1] != "t":
            return self._send(400, {"error": f"bad path {self.path[:100]!r}"})
        try:
            key = (unquote(parts[3], errors="strict"), int(parts[2]))
        except ValueError as exc:
            return self._send(400, {"error": f"bad key: {exc}"})
        table, failing = self.server.state
        if key in failing:
            return self._send(500, {"error": "table backend failed for this key"})
        if key not in table:
            return self._send(404, None)
        self._send(200, table[key])

    def do_POST(self) -> None:
        self.server.count()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.path != "/batch" or not isinstance(body, dict) or not isinstance(body.get("keys"), list):
            return self._send(400, {"error": "POST /batch with {'keys': [[s, n], ...]}"})
        keys = [tuple(k) for k in body["keys"]]
        table, failing = self.server.state
        if any(k in failing for k in keys):
            return self._send(422, {"error": "batch holds a key the table backend fails for"})
        self._send(200, {"results": [table.get(k) for k in keys]})


class _Server(LoopbackHTTPServer):
    def __init__(self) -> None:
        super().__init__(_Handler)
        #: (table, failing), replaced as a whole by load(): a request sees one consistent state
        self.state: tuple[dict[Key, list[dict]], set[Key]] = ({}, set())
        self.requests = 0
        self._lock = threading.Lock()

    def count(self) -> None:
        with self._lock:
            self.requests += 1


class TableServer:
    """The table server in a daemon thread; ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self._server = _Server()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="table-http", daemon=True)

    def load(self, table: dict[Key, list[dict]], failing: set[Key]) -> None:
        """Serve ``table`` from now on, failing every key in ``failing``."""
        self._server.state = ({k: list(v) for k, v in table.items()}, set(failing))

    @property
    def requests(self) -> int:
        return self._server.requests

    def __enter__(self) -> TableServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
