"""A TCP proxy on 127.0.0.1 that loses replies: the request reaches the server, the server acts
on it and answers, and the proxy closes the client's connection instead of passing the answer on.

That is what a read timeout or a reset after the server acted looks like to a client that retries:
the server sees the request twice. ``ReplyDropper(upstream_port, drop=...)`` drops the first reply to
each distinct request key that ``drop(request_bytes, first_reply_chunk)`` returns (None: pass it on).

Example::

    with ReplyDropper(port, drop=lambda req, reply: req if b"EVALSHA" in req else None) as proxy:
        client = connect(port=proxy.port)    # every EVALSHA is answered only on its second sending
        proxy.dropped                        # how many replies were lost
"""
from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable

HOST = "127.0.0.1"


class ReplyDropper:
    def __init__(self, upstream_port: int, drop: Callable[[bytes, bytes], bytes | None]):
        self.upstream_port = upstream_port
        self._drop = drop
        self._keys: set[bytes] = set()
        self._lock = threading.Lock()
        self.dropped = 0
        self.requests = 0
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((HOST, 0))
        self._server.listen(128)
        self.port = self._server.getsockname()[1]
        self._stopped = False

    def __enter__(self) -> ReplyDropper:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._server.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection((HOST, self.upstream_port), timeout=30)
        except OSError:
            client.close()
            return
        request = b""  # bytes the client sent since the server last answered
        try:
            while True:
                ready, _, _ = select.select([client, upstream], [], [], 60)
                if not ready:
                    return
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    request += data
                    upstream.sendall(data)
                if upstream in ready:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    if request:
                        with self._lock:
                            self.requests += 1
                            key = self._drop(request, data)
                            lose = key is not None and key not in self._keys
                            if lose:
                                self._keys.add(key)  # type: ignore[arg-type]
                                self.dropped += 1
                        if lose:
                            return  # the server acted; the client sees its connection closed
                        request = b""
                    client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()


def http_body(request: bytes) -> bytes:
    """The body of one HTTP request (what stays the same when a client signs a retry anew)."""
    return request.partition(b"\r\n\r\n")[2]
