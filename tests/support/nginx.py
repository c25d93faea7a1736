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
prior knowledge (h2c) instead of HTTP/1.1.

``tls=True`` serves HTTPS instead: a throwaway CA and a server certificate for ``127.0.0.1`` and
``localhost`` (made with the ``openssl`` CLI in the temp dir; :attr:`NginxServer.ca_file` is the CA's
PEM, to trust as a root), ``listen ... ssl http2`` so ALPN offers ``h2`` and ``http/1.1``, and an
access log of every request's protocol: :meth:`NginxServer.protocols` -> ``['HTTP/2.0', ...]``
(``http2`` does not matter then). Without ``tls`` nothing is logged and no certificate is made.

Files live in a temporary directory removed on ``stop()``; the process dies with ours
(``PR_SET_PDEATHSIG``) when started from the main thread.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from .servers import HOST, ServerNotAvailable, _death_signal, _make_tmpdir, _Server, _tail, free_port

__all__ = ["ITEM_BODY", "NginxServer", "make_certificates", "nginx_binary"]

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
    {access_log}
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    default_type application/json;
    server {{
        listen {host}:{port}{http2};{tls_conf}
        location /item/ {{ return 200 '{body}'; }}
        location /missing/ {{ return 404; }}
        location /busy/ {{ add_header Retry-After 1 always; return 429 '{{"error":"busy"}}'; }}
        location = /batch {{ return 200 '{{"results":[{body},{body}]}}'; }}{locations}
    }}
}}
"""


# the CA may sign server certificates only; the server certificate names 127.0.0.1 and localhost
_CA_EXT = ("basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign",
           "subjectKeyIdentifier=hash")
_SERVER_EXT = """basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
"""


def make_certificates(directory: str) -> tuple[str, str, str]:
    """A throwaway CA and a server certificate it signed, valid for a day, in ``directory``:
    ``(ca_file, cert_file, key_file)`` (PEM). Needs the ``openssl`` CLI."""
    openssl = shutil.which("openssl")
    if not openssl:
        raise ServerNotAvailable("openssl is not installed (apt-get install openssl)")
    ca_key, ca = os.path.join(directory, "ca.key"), os.path.join(directory, "ca.pem")
    key, csr = os.path.join(directory, "server.key"), os.path.join(directory, "server.csr")
    cert, ext = os.path.join(directory, "server.pem"), os.path.join(directory, "server.ext")
    with open(ext, "w") as f:
        f.write(_SERVER_EXT)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        [openssl, "req", "-x509", *ec, "-days", "1", "-subj", "/CN=aiospark test CA",
         *(a for e in _CA_EXT for a in ("-addext", e)), "-keyout", ca_key, "-out", ca],
        [openssl, "req", "-new", *ec, "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr],
        [openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-days", "1",
         "-set_serial", "0x" + os.urandom(8).hex(), "-extfile", ext, "-out", cert],
    ]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise ServerNotAvailable(f"{' '.join(cmd[:3])} failed: {p.stderr.strip()}")
    return ca, cert, key


def nginx_binary() -> str | None:
    """The nginx executable (``$NGINX``, ``PATH``, ``/usr/sbin/nginx``), or None."""
    for cand in (os.environ.get("NGINX"), shutil.which("nginx"), "/usr/sbin/nginx"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class NginxServer(_Server):
    """nginx on a free port of 127.0.0.1 (``workers`` worker processes; ``http2`` for h2c;
    ``tls`` for HTTPS with HTTP/2 and HTTP/1.1 by ALPN, a test CA in :attr:`ca_file`, and the
    protocol of each request in :meth:`protocols`)."""

    #: the PEM file of the CA that signed the server's certificate (``tls=True``, once started)
    ca_file: str | None = None

    def __init__(self, *, workers: int = 1, http2: bool = False, tls: bool = False,
                 binary: str | None = None, locations: str = "") -> None:
        self.workers, self.http2, self.tls = workers, http2, tls
        #: more ``location`` blocks of the server, as nginx config text (e.g. an OpenAI-shaped API)
        self.locations = locations
        self._binary = binary or nginx_binary()

    def __repr__(self) -> str:
        tls = ", tls=True" if self.tls else ""
        return f"NginxServer(port={self.port}, workers={self.workers}, http2={self.http2}{tls})"

    def url(self, path: str = "/") -> str:
        return f"{'https' if self.tls else 'http'}://{HOST}:{self.port}{path}"

    def requests(self) -> list[tuple[str, str]]:
        """``(protocol, request URI)`` of each request answered so far, oldest first
        (``tls=True`` only; nginx logs a request once it has answered it)."""
        if not self.tls or self._tmp is None:
            raise RuntimeError("only a started NginxServer(tls=True) logs its requests")
        try:
            with open(os.path.join(self._tmp, "access.log")) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        return [(proto, uri) for proto, _, uri in (line.partition(" ") for line in lines if line)]

    def protocols(self) -> list[str]:
        """The protocol of each request answered so far (``'HTTP/2.0'``, ``'HTTP/1.1'``), oldest first."""
        return [proto for proto, _ in self.requests()]

    def start(self) -> NginxServer:
        if not self._binary:
            raise ServerNotAvailable("nginx is not installed (apt-get install nginx-light, or set $NGINX)")
        self._tmp = _make_tmpdir("aiospark-nginx-")
        self.port = free_port()
        conf = os.path.join(self._tmp, "nginx.conf")
        access_log, tls_conf, http2 = "access_log off;", "", " http2" if self.http2 else ""
        if self.tls:
            try:
                self.ca_file, cert, key = make_certificates(self._tmp)
            except ServerNotAvailable:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None
                raise
            # one line per request: its protocol, then its URI (the log phase ends each request)
            access_log = (f"log_format aiospark_protocol '$server_protocol $request_uri';\n"
                          f"    access_log {self._tmp}/access.log aiospark_protocol;")
            http2 = " ssl http2"  # nginx 1.22: ALPN offers h2 and http/1.1 on this listener
            tls_conf = (f"\n        ssl_certificate {cert};\n        ssl_certificate_key {key};"
                        "\n        ssl_protocols TLSv1.2 TLSv1.3;")
        with open(conf, "w") as f:
            # as root, workers would switch to 'nobody', who cannot write our temp dir
            f.write(_CONF.format(workers=self.workers, tmp=self._tmp, host=HOST, port=self.port,
                                 body=ITEM_BODY, http2=http2, access_log=access_log, tls_conf=tls_conf,
                                 locations="".join(f"\n        {line}" for line in self.locations.splitlines()),
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
