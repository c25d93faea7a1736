"""The standard library's threaded HTTP server, with the listen backlog a real server has (tests only).

``socketserver`` listens with a backlog of 5. A job with ``capacity=100`` opens up to 100 connections
at once; on a loaded machine the kernel then drops connection attempts past the fifth queued one and
the client's connect waits for SYN retransmits (1 s, 3 s, 7 s, ...), up to its timeout. A call retried
after such a connect error counts twice at the server, and a test asserting exact call counts flakes.
nginx and aiohttp's server listen with 511 and 128; this server uses 128.

Example::

    server = LoopbackHTTPServer(Handler)      # 127.0.0.1, a free port
    threading.Thread(target=server.serve_forever, daemon=True).start()
"""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["LoopbackHTTPServer"]


class LoopbackHTTPServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) with a listen backlog of 128."""

    request_queue_size = 128
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
