"""The driver's HTTP endpoint: one small server in the driver process that tasks talk to.

Metrics reports (``POST /report``, :mod:`aiospark.spark.metrics`) and budget lease requests
(``POST /budget``, :mod:`aiospark.spark.budget`) arrive here; each feature registers its path with
:func:`register_endpoint`, and the server knows nothing of either. A request is read only when it
is at most :data:`MAX_REQUEST_BYTES`, is a JSON object with an ``id`` naming a live object of the
feature, and is signed with that object's secret (an HMAC with a timestamp and a nonce, checked
by :class:`~aiospark.budget.signing.Verifier`: a captured request cannot be sent again); anything
else is refused (411, 413, 400, 403; 404 for a path no feature registered).

Where it listens: ``AIOSPARK_METRICS_HOST`` (``host`` or ``host:port``: the address executors are
told) when set, bound on ``AIOSPARK_METRICS_BIND`` (``addr`` or ``addr:port``; default: the
advertised host and port, any free port without one) -- for a Spark Connect client whose server
runs elsewhere, an address of this machine the cluster reaches, or a tunnel's far end; else, with
a classic session, where Spark's own driver listens (``spark.driver.bindAddress``, advertised to
executors as ``spark.driver.host``), so executors on other hosts reach it with no setting; else
127.0.0.1 (a Connect client whose server is on this machine; :mod:`aiospark.spark.reach` refuses
or warns at definition when it is not).

Example::

    register_endpoint("/budget", handle, secret_of)     # handle(request) -> (status, reply or None)
    url = collector(driver_host()).base + "/budget"      # what the tasks are told
"""
from __future__ import annotations

import json
import os
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..budget.signing import Verifier

__all__ = ["MAX_REQUEST_BYTES", "Collector", "Endpoint", "SecretOf", "collector", "configured_host", "driver_host",
           "register_endpoint", "split_host_port"]

#: The largest request the endpoint reads (a metrics report is the biggest)
MAX_REQUEST_BYTES = 1 << 20
#: signatures, clock window and nonces of every request to this process's collectors
_verifier = Verifier()


#: The JSON endpoints, by path: ``handle(request) -> (status, reply)`` (``reply`` a dict sent back as
#: JSON, or None), reached only by requests signed with ``secret_of(request)`` (None: no such live
#: object, 403). Metrics reports and budget leases are two of them.
Endpoint = Callable[[dict[str, Any]], tuple[int, dict[str, Any] | None]]
SecretOf = Callable[[dict[str, Any]], str | None]
_endpoints: dict[str, tuple[Endpoint, SecretOf]] = {}
_lock = threading.Lock()


def register_endpoint(path: str, handle: Endpoint, secret_of: SecretOf) -> None:
    """Serve ``POST <path>`` with ``handle``, for requests signed with ``secret_of(request)``."""
    with _lock:
        _endpoints[path] = (handle, secret_of)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # http.server's naming
        path = urllib.parse.urlsplit(self.path).path
        found = _endpoints.get(path)
        status, reply = self._answer(path, *found) if found is not None else (404, {"error": "no such endpoint"})
        body = json.dumps(reply).encode() if reply is not None else b""
        self.send_response(status)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, path: str, handle: Endpoint, secret_of: SecretOf) -> tuple[int, dict[str, Any] | None]:
        try:
            size = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return 411, None
        if not 0 <= size <= MAX_REQUEST_BYTES:
            return 413, None
        raw = self.rfile.read(size)
        try:
            request = json.loads(raw)
        except ValueError:
            return 400, None
        if not isinstance(request, dict) or not isinstance(request.get("id"), str):
            return 400, None
        secret = secret_of(request)
        if secret is None:
            return 403, {"error": "not a live Budget or Metrics of this driver"}
        why = _verifier.check(secret, "POST", path, raw, self.headers)
        if why is not None:
            return 403, {"error": why}
        return handle(request)

    def log_message(self, *args: Any) -> None:  # keep the driver's console quiet
        pass


class _CollectorServer(ThreadingHTTPServer):
    # every task of a stage may report at once: socketserver's backlog of 5 would make the kernel
    # drop the connects past it, and those reports wait for SYN retransmits (1 s, 3 s, ...)
    request_queue_size = 128
    daemon_threads = True


class Collector:
    """One HTTP server in the driver process, bound on ``bind`` and advertised as ``host`` (each
    ``host`` or ``host:port``; see the module doc)."""

    def __init__(self, host: str, bind: str) -> None:
        bind_host, bind_port = split_host_port(bind, "AIOSPARK_METRICS_BIND")
        host, port = split_host_port(host, "AIOSPARK_METRICS_HOST")
        if bind_port is None:  # a port forwarded as is (NAT, a tunnel)
            bind_port = port
        self.server = _CollectorServer((bind_host, bind_port or 0), _Handler)
        shown = f"[{host}]" if ":" in host else host
        #: what tasks are told: ``http://host:port``, a feature's path appended
        self.base = f"http://{shown}:{port or self.server.server_address[1]}"
        thread = threading.Thread(target=self.server.serve_forever, name="aiospark-endpoint", daemon=True)
        thread.start()


_collectors: dict[tuple[str, str], Collector] = {}


def split_host_port(text: str, what: str) -> tuple[str, int | None]:
    """``"host"``, ``"host:port"``, ``"[v6]"`` or ``"[v6]:port"`` -> ``(host, port or None)``; a bare
    IPv6 address (several colons) is a host."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if not sep or (rest and port_text is None):
            raise ValueError(f"{what}={text!r}: write an IPv6 address as [addr] or [addr]:port")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    if not host:
        raise ValueError(f"{what}={text!r} has no host: set it to a host or host:port")
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ValueError(f"{what}={text!r}: the port must be a number from 1 to 65535 (0: any free port)")
    return host, int(port_text)


def configured_host() -> tuple[str, str] | None:
    """``(advertised, bind)`` from ``AIOSPARK_METRICS_HOST`` / ``AIOSPARK_METRICS_BIND``, or None."""
    host = os.environ.get("AIOSPARK_METRICS_HOST", "").strip()
    if not host:
        return None
    bind = os.environ.get("AIOSPARK_METRICS_BIND", "").strip() or host
    # a typo fails on the driver, naming the variable
    if split_host_port(host, "AIOSPARK_METRICS_HOST")[1] == 0:
        raise ValueError("AIOSPARK_METRICS_HOST: the advertised port must be from 1 to 65535 (a bind port "
                         "of 0, any free port, goes in AIOSPARK_METRICS_BIND)")
    split_host_port(bind, "AIOSPARK_METRICS_BIND")
    return host, bind


def driver_host() -> tuple[str, str]:
    """``(advertised host, bind address)`` of the endpoint (see the module doc)."""
    configured = configured_host()
    if configured is not None:
        return configured
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    # a Connect client's executors belong to the server: its driver's address is not this process's
    if session is None or type(session).__module__.startswith("pyspark.sql.connect"):
        return "127.0.0.1", "127.0.0.1"
    conf = session.sparkContext.getConf()
    host = conf.get("spark.driver.host", None) or "127.0.0.1"
    return host, conf.get("spark.driver.bindAddress", None) or host


def collector(where: tuple[str, str] | None = None) -> Collector:
    """The driver process's endpoint for ``where`` = ``(host, bind)`` (default: 127.0.0.1),
    started on first use."""
    host, bind = where or ("127.0.0.1", "127.0.0.1")
    with _lock:
        made = _collectors.get((host, bind))
        if made is None:
            made = _collectors[(host, bind)] = Collector(host, bind)
        return made
