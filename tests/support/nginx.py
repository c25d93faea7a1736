"""A real nginx on 127.0.0.1 answering small JSON bodies: the fast server of HTTP tests and benchmarks.

nginx answers a fixed small body far faster than any Python client can ask (about ten times),
so a benchmark against it measures the client, not the server.

Example::

    with NginxServer() as srv:
        srv.url("/item/42")   # 'http://127.0.0.1:PORT/item/42' -> {"id":1,"name":"pen","price":1.5}

Routes: ``/item/<anything>`` -> 200 with :data:`ITEM_BODY`; ``/missing/<anything>`` -> 404;
``/busy/<anything>`` -> 429 with ``Retry-After: 1``; ``/batch`` (POST) -> 200 with
``{"results": [ITEM, ITEM]}`` whatever is sent (the benchmark's batch answer is aligned by position,
so it uses one key per batch or its own body). ``http2=True`` listens for cleartext HTTP/2 with
prior knowledge (h2c) instead of HTTP/1.1. Files live in a temporary directory removed on ``stop()``;
the process dies with ours (``PR_SET_PDEATHSIG``) when started from the main thread.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from .servers import HOST, ServerNotAvailable, _death_signal, _make_tmpdir, _Server, _tail, free_port

__all__ = ["ITEM_BODY", "NginxServer", "nginx_binary"]

#: The body every ``/item/...`` request gets (what a small JSON API answers)
ITEM_BODY = '{"id":1,"name":"pen","price":1.5,"tags":["a","b"]}'

_CONF = """
daemon off;
master_process on;
worker_processes {workers};
{user}
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    default_type application/json;
    server {{
        listen {host}:{port}{http2};
        location /item/ {{ return 200 '{body}'; }}
        location /missing/ {{ return 404; }}
        location /busy/ {{ add_header Retry-After 1 always; return 429 '{{"error":"busy"}}'; }}
        location = /batch {{ return 200 '{{"results":[{body},{body}]}}'; }}
    }}
}}
"""


def nginx_binary() -> str | None:
    """The nginx executable (``$NGINX``, ``PATH``, ``/usr/sbin/nginx``), or None."""
    for cand in (os.environ.get("NGINX"), shutil.which("nginx"), "/usr/sbin/nginx"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class NginxServer(_Server):
    """nginx on a free port of 127.0.0.1 (``workers`` worker processes; ``http2`` for h2c)."""

    def __init__(self, *, workers: int = 1, http2: bool = False, binary: str | None = None) -> None:
        self.workers, self.http2 = workers, http2
        self._binary = binary or nginx_binary()

    def __repr__(self) -> str:
        return f"NginxServer(port={self.port}, workers={self.workers}, http2={self.http2})"

    def url(self, path: str = "/") -> str:
        return f"http://{HOST}:{self.port}{path}"

    def start(self) -> "NginxServer":
        if not self._binary:
            raise ServerNotAvailable("nginx is not installed (apt-get install nginx-light, or set $NGINX)")
        self._tmp = _make_tmpdir("aiospark-nginx-")
        self.port = free_port()
        conf = os.path.join(self._tmp, "nginx.conf")
        with open(conf, "w") as f:
            # as root, workers would switch to 'nobody', who cannot write our temp dir
            f.write(_CONF.format(workers=self.workers, tmp=self._tmp, host=HOST, port=self.port,
                                 body=ITEM_BODY, http2=" http2" if self.http2 else "",
                                 user="user root;" if os.geteuid() == 0 else ""))
        log = os.path.join(self._tmp, "error.log")
        self._proc = subprocess.Popen(
            [self._binary, "-p", self._tmp, "-c", conf, "-e", log],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_death_signal(signal.SIGTERM))
        # nginx stops fast on SIGTERM; the finalizer also removes the temp dir
        self._track(signal.SIGTERM)
        deadline = time.monotonic() + 10
        import socket
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                tail = _tail(log)
                self.stop()
                raise ServerNotAvailable(f"nginx exited: {err.strip() or tail}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ServerNotAvailable("nginx did not start listening within 10 s")
