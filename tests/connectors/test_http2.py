"""HTTP/2 over TLS against a real nginx: which protocol each transport speaks where ALPN offers h2.

nginx (tests/support/nginx.py, ``NginxServer(tls=True)``) serves HTTPS with a certificate from a
throwaway CA, offers ``h2`` and ``http/1.1`` by ALPN, and logs each request's protocol.

The clients trust that CA through ``SSL_CERT_FILE``, which both transports read from the environment:
pyreqwest's rustls-platform-verifier loads its Linux roots with rustls-native-certs (openssl-probe's
``SSL_CERT_FILE``/``SSL_CERT_DIR``), aiohttp uses Python's default SSL context
(``set_default_verify_paths``). Both may read it once per process, so each client runs in a fresh
interpreter with the variable set (or removed, to see the certificate refused). No product option is
involved: verification stays on, only the roots differ.
"""
import json
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest

from tests.support.nginx import NginxServer, nginx_binary

# The child prints one JSON line, then leaves with os._exit: pyreqwest's Tokio thread can abort the
# interpreter's finalization ("PyGILState_Release: thread state ... must be current", exit -6) after
# all work is done, which is pyo3/Tokio teardown and not what these tests are about.
_CHILD = """
import asyncio, json, os, sys
from aiospark.connectors import ConnectorError, HttpLookup
async def main():
    src = HttpLookup({url!r}, "name STRING, price DOUBLE", transport={transport!r})
    await src.open()
    try:
        return [await src.lookup((k,)) for k in {keys!r}]
    finally:
        await src.close()
try:
    out = {{"rows": asyncio.run(main())}}
except ConnectorError as exc:
    out = {{"error": type(exc).__name__, "message": str(exc)}}
print(json.dumps(out), flush=True)
sys.stderr.flush()
os._exit(0)
"""


@pytest.fixture(scope="module")
def tls_nginx():
    if not nginx_binary():
        pytest.fail("nginx is not installed: apt-get install nginx-light (.ci/run does)")
    with NginxServer(tls=True) as srv:
        yield srv


def lookup_in_child(srv, transport, keys, *, trust_ca=True):
    """Run ``HttpLookup(...).lookup`` for each key in a fresh interpreter: its JSON answer."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    if trust_ca:
        env["SSL_CERT_FILE"] = srv.ca_file
    code = _CHILD.format(url=srv.url("/item/{id}"), transport=transport, keys=list(keys))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def protocols_of(srv, keys):
    """The protocol nginx logged for ``/item/<key>`` of each key (waits for the log lines, which
    nginx writes when it finishes a request)."""
    wanted = {f"/item/{k}" for k in keys}
    deadline = time.monotonic() + 10
    while True:
        served = [(proto, uri) for proto, uri in srv.requests() if uri in wanted]
        if {uri for _, uri in served} == wanted or time.monotonic() > deadline:
            return sorted(served, key=lambda s: s[1])


ROWS = [[{"name": "pen", "price": 1.5}]] * 3


def test_nginx_offers_h2_and_http1_by_alpn(tls_nginx):
    """The server side of the tests below: the certificate chains to ``ca_file`` for 127.0.0.1,
    ALPN picks h2 when the client offers it, http/1.1 when that is all the client speaks."""
    for offered, chosen in ((["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1")):
        ctx = ssl.create_default_context(cafile=tls_nginx.ca_file)
        ctx.set_alpn_protocols(offered)
        with socket.create_connection((tls_nginx.host, tls_nginx.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.selected_alpn_protocol() == chosen


def test_pyreqwest_verifies_against_the_ca_from_ssl_cert_file(tls_nginx):
    keys = ["pyreqwest-ca-1", "pyreqwest-ca-2", "pyreqwest-ca-3"]
    assert lookup_in_child(tls_nginx, "pyreqwest", keys) == {"rows": ROWS}
    assert [uri for _, uri in protocols_of(tls_nginx, keys)] == [f"/item/{k}" for k in keys]


def test_pyreqwest_speaks_http2_where_alpn_offers_it(tls_nginx):
    keys = ["pyreqwest-h2-1", "pyreqwest-h2-2", "pyreqwest-h2-3"]
    assert lookup_in_child(tls_nginx, "pyreqwest", keys) == {"rows": ROWS}
    assert protocols_of(tls_nginx, keys) == [("HTTP/2.0", f"/item/{k}") for k in keys]


def test_aiohttp_speaks_http1_1_over_tls(tls_nginx):
    keys = ["aiohttp-1", "aiohttp-2", "aiohttp-3"]
    assert lookup_in_child(tls_nginx, "aiohttp", keys) == {"rows": ROWS}
    assert protocols_of(tls_nginx, keys) == [("HTTP/1.1", f"/item/{k}") for k in keys]


@pytest.mark.parametrize("transport", ["pyreqwest", "aiohttp"])
def test_without_the_ca_the_certificate_is_refused(tls_nginx, transport):
    key = f"{transport}-untrusted"
    out = lookup_in_child(tls_nginx, transport, [key], trust_ca=False)
    assert out.get("error") == "ConnectorError", out
    assert "certificate" in out["message"].lower(), out["message"]
    assert f"/item/{key}" not in [uri for _, uri in tls_nginx.requests()]  # refused before any request
