"""HTTP transports (pyreqwest, aiohttp): the HttpLookup suite on each, and what a transport must keep.

Real servers on 127.0.0.1 only: the connector suite's aiohttp server, nginx (tests/support/nginx.py),
and small raw-socket HTTP/1.1 servers below that count connections, hang, or act as a proxy.
"""
import asyncio
import inspect
import os
import ssl
import subprocess
import sys
import tempfile

import pytest

from aiospark.connectors import ConnectorError, ConnectorTimeout, HttpLookup, HttpStatusError
from aiospark.connectors.http import HttpClient, http_client
from aiospark.connectors.http.choose import resolve_transport

from . import test_http_lookup as lookup_suite

TRANSPORTS = ["pyreqwest", "aiohttp"]


def run(coro):
    return asyncio.run(coro)


# --- the HttpLookup suite, on the transport 'auto' does not pick -----------------------------------

_SUITE = sorted(n for n, f in vars(lookup_suite).items()
                if n.startswith("test_") and callable(f) and not hasattr(f, "pytestmark"))


@pytest.mark.parametrize("name", _SUITE)
def test_lookup_suite_on_aiohttp(name, http_server, monkeypatch):
    monkeypatch.setenv("AIOSPARK_HTTP_TRANSPORT", "aiohttp")
    fn = getattr(lookup_suite, name)
    given = {"http_server": http_server, "monkeypatch": monkeypatch}
    fn(**{p: given[p] for p in inspect.signature(fn).parameters})


# --- raw HTTP/1.1 servers --------------------------------------------------------------------------

class RawServer:
    """Answers every request with ``body`` over keep-alive connections; counts connections and
    the most requests in flight at once. ``hang=True``: reads requests, never answers."""

    def __init__(self, body=b'{"name":"pen"}', hang=False, delay=0.0):
        self.body, self.hang, self.delay = body, hang, delay
        self.connections = self.closed = self.requests = self.in_flight = self.max_in_flight = 0
        self.lines = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _conn(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.lines.append(head.split(b"\r\n", 1)[0].decode())
                length = [int(h.split(b":")[1]) for h in head.lower().split(b"\r\n")
                          if h.startswith(b"content-length:")]
                if length:
                    await reader.readexactly(length[0])
                self.requests += 1
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                if self.hang:
                    await reader.read()  # until the client closes
                    raise ConnectionResetError
                await asyncio.sleep(self.delay)
                self.in_flight -= 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(self.body)).encode() + b"\r\n\r\n" + self.body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_keep_alive_and_connection_bound(transport):
    async def main():
        async with RawServer(delay=0.01) as srv:
            src = HttpLookup(srv.url + "/item/{id}", "name STRING", max_connections=4, transport=transport)
            await src.open()
            try:
                for i in range(20):  # one after another: one connection, kept alive
                    assert await src.lookup((i,)) == [{"name": "pen"}]
                assert srv.connections == 1
                rows = await asyncio.gather(*(src.lookup((i,)) for i in range(60)))
                assert rows == [[{"name": "pen"}]] * 60
                assert srv.max_in_flight <= 4 and srv.connections <= 4
            finally:
                await src.close()
    run(main())


def test_pyreqwest_hands_the_gil_over_once_per_loop_iteration_with_responses(monkeypatch):
    """The loop thread sleeps (letting pyreqwest's thread take the GIL) once per loop iteration in
    which responses arrived, never once per response, and not at all while none arrive."""
    hp = pytest.importorskip("aiospark.connectors.http._pyreqwest")
    slept = []
    monkeypatch.setattr(hp, "time", type("Clock", (), {"sleep": staticmethod(slept.append)}))

    async def main():
        hand_over = hp._HandOver()
        for _ in range(5):  # five responses in one iteration
            hand_over.response_arrived()
        assert slept == []  # not in the middle of the work at hand
        await asyncio.sleep(0)
        assert slept == [hp.HAND_OVER_SECONDS]
        await asyncio.sleep(0)
        assert len(slept) == 1  # an iteration without responses: no sleep
        hand_over.response_arrived()
        await asyncio.sleep(0)
        assert len(slept) == 2

        async with RawServer() as srv:  # the transport calls it for its responses
            slept.clear()
            src = HttpLookup(srv.url + "/item/{id}", "name STRING", transport="pyreqwest")
            await src.open()
            try:
                rows = await asyncio.gather(*(src.lookup((i,)) for i in range(40)))
                await asyncio.sleep(0)
            finally:
                await src.close()
            assert rows == [[{"name": "pen"}]] * 40
            assert 0 < len(slept) <= 40
    run(main())


def test_no_hand_over_where_sleeps_are_coarse(monkeypatch):
    """HAND_OVER_SECONDS is 0 on Windows (a sleep lasts a millisecond or more there): no sleeps."""
    hp = pytest.importorskip("aiospark.connectors.http._pyreqwest")
    slept = []
    monkeypatch.setattr(hp, "time", type("Clock", (), {"sleep": staticmethod(slept.append)}))
    monkeypatch.setattr(hp, "HAND_OVER_SECONDS", 0.0)

    async def main():
        hand_over = hp._HandOver()
        hand_over.response_arrived()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    run(main())
    assert slept == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_timeout_and_cancellation_abort_the_request(transport):
    async def main():
        async with RawServer(hang=True) as srv:
            src = HttpLookup(srv.url + "/item/{id}", "name STRING", timeout=0.3, transport=transport)
            await src.open()
            try:
                with pytest.raises(ConnectorTimeout, match="no response within 0.3s"):
                    await src.lookup((1,))
                # aiohttp aborts a cancelled request at once; pyreqwest 0.15 does not (its Rust
                # future runs on), so there the request ends at the transport's own timeout
                client = HttpClient(transport=transport, timeout=None if transport == "aiohttp" else 1.0)
                task = asyncio.ensure_future(client.get(srv.url + "/item/2?key=s3cret"))
                while srv.requests < 2:
                    await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                for _ in range(500):  # the server sees the connection go: the request was aborted
                    if srv.closed >= 2:
                        break
                    await asyncio.sleep(0.01)
                assert srv.closed >= 2
                await client.close()
            finally:
                await src.close()
    run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_row_that_times_out_takes_its_request_down(transport):
    """The operator's timeout cancels the call; the request ends with it, also on pyreqwest
    (which does not abort cancelled requests itself: it gets the call's deadline as its timeout)."""
    from aiospark.core import AsyncWaitOperator

    async def main():
        async with RawServer(hang=True) as srv:
            client = HttpClient(transport=transport, timeout=None)  # no timeout of its own

            async def fetch(i):
                return (await client.get(f"{srv.url}/item/{i}")).json()

            out = []
            op = AsyncWaitOperator(fetch, out.append, ordered=False, capacity=10, timeout=0.3)
            await op.open()
            for i in range(3):
                await op.process_element(i)
            t0 = asyncio.get_running_loop().time()
            with pytest.raises(Exception, match="timed out|Timeout"):
                await op.finish()  # no timeout handler: a timed-out row fails the operator
            await op.close()
            for _ in range(300):  # the server sees every connection go within a moment
                if srv.closed >= 3:
                    break
                await asyncio.sleep(0.01)
            assert srv.requests == 3 and srv.closed == 3
            assert asyncio.get_running_loop().time() - t0 < 2.0
            await client.close()
    run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_proxy_from_environment(transport, monkeypatch):
    async def main():
        async with RawServer(body=b'{"name":"via proxy"}') as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            monkeypatch.setenv("http_proxy", proxy.url)
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            src = HttpLookup("http://items.invalid/item/{id}", "name STRING", transport=transport)
            await src.open()
            try:
                assert await src.lookup((7,)) == [{"name": "via proxy"}]
            finally:
                await src.close()
            assert proxy.lines == ["GET http://items.invalid/item/7 HTTP/1.1"]
    run(main())


@pytest.fixture(scope="module")
def self_signed():
    d = tempfile.mkdtemp()
    cert, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", cert], check=True,
                   capture_output=True)
    return cert, key


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tls_certificates_are_verified(transport, self_signed):
    async def main():
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(*self_signed)

        async def answer(reader, writer):
            try:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                pass
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=ctx)
        port = server.sockets[0].getsockname()[1]
        src = HttpLookup(f"https://127.0.0.1:{port}/item/{{id}}", "name STRING", transport=transport,
                         auth_token="tls-s3cret")
        await src.open()
        try:
            with pytest.raises(ConnectorError) as info:
                await src.lookup((1,))
            assert "tls-s3cret" not in str(info.value)
        finally:
            await src.close()
            server.close()
    run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_retry_after_and_http_client_against_nginx(transport, nginx):
    async def main():
        src = HttpLookup(nginx.url("/busy/{id}"), "name STRING", transport=transport)
        await src.open()
        try:
            with pytest.raises(HttpStatusError) as info:
                await src.lookup((1,))
            assert info.value.status == 429 and info.value.retryable and info.value.retry_after == 1.0
        finally:
            await src.close()
        async with HttpClient(transport=transport, headers={"X-Api-Key": "k3y-s3cret"}) as client:
            resp = await client.get(nginx.url("/item/1"))
            assert resp.ok and resp.json()["name"] == "pen"
            resp = await client.post(nginx.url("/batch"), json={"keys": [1, 2]})
            assert len(resp.raise_for_status().json()["results"]) == 2
            resp = await client.get(nginx.url("/busy/1"))
            with pytest.raises(HttpStatusError) as info:
                resp.raise_for_status()
            assert info.value.retry_after == 1.0 and "k3y-s3cret" not in repr(client)
        shared = http_client(transport=transport)
        assert http_client(transport=transport) is shared
        assert (await shared.get(nginx.url("/missing/1"))).status == 404
        await shared.close()
    run(main())


@pytest.fixture(scope="module")
def nginx():
    from tests.support.nginx import NginxServer, nginx_binary
    if not nginx_binary():
        pytest.fail("nginx is not installed: apt-get install nginx-light (.ci/run does)")
    with NginxServer() as srv:
        yield srv


def test_transport_is_validated_at_definition():
    with pytest.raises(ValueError, match="transport must be one of 'auto', 'pyreqwest', 'aiohttp'"):
        HttpLookup("http://127.0.0.1:1/item/{id}", "name STRING", transport="curl")
    with pytest.raises(ValueError, match="transport must be one of"):
        HttpClient(transport=None)
    assert resolve_transport("aiohttp") == "aiohttp"


def test_auto_falls_back_to_aiohttp_with_a_log_line(http_server):
    # a platform without pyreqwest (Python 3.10 has no wheel): import blocked in a fresh process
    code = f"""
import asyncio, logging, sys
sys.modules["pyreqwest"] = None
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from aiospark.connectors import HttpLookup
from aiospark.connectors.http.choose import resolve_transport
async def main():
    src = HttpLookup({http_server.base!r} + "/item/{{id}}", "name STRING")
    await src.open()
    try:
        print(await src.lookup((1,)), resolve_transport("auto"))
    finally:
        await src.close()
asyncio.run(main())
try:
    resolve_transport("pyreqwest")
except ImportError as exc:
    print("ImportError:", exc)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "aiohttp" in p.stdout.splitlines()[0]
    assert "pyreqwest is not installed" in p.stderr and "using aiohttp" in p.stderr
    assert "transport='aiohttp'" in p.stdout


# --- one seam: each transport module speaks to one library; the choice (and its fallback) is choose.py's ---

def _imported_modules(path):
    import ast

    tree = ast.parse(open(path, encoding="utf-8").read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def test_the_pyreqwest_transport_builds_no_other_transport():
    """The fallback for URLs reqwest would rewrite (a key of only dots) belongs to the seam that
    chooses (``choose.py``): ``_pyreqwest.py`` imports neither aiohttp nor its transport."""
    import aiospark.connectors.http as package

    here = os.path.dirname(package.__file__)
    imported = _imported_modules(os.path.join(here, "_pyreqwest.py"))
    assert not any("aiohttp" in name for name in imported), imported
    assert {"._aiohttp", "._pyreqwest"} <= _imported_modules(os.path.join(here, "choose.py"))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_key_of_only_dots_reaches_the_server_literally_on_every_transport(transport, http_server):
    """pyreqwest would resolve ``/item/%2E%2E`` to ``/``: the seam sends that URL by aiohttp."""
    if transport == "pyreqwest":
        pytest.importorskip("pyreqwest")
    http_server.items[".."] = {"name": "dots"}
    http_server.items["x"] = {"name": "x"}

    async def main():
        src = HttpLookup(http_server.base + "/item/{id}", "name STRING", transport=transport)
        await src.open()
        try:
            return [await src.lookup(("..",)), await src.lookup(("x",)), await src.lookup(("..",))]
        finally:
            await src.close()

    before = len(http_server.raw_paths)
    assert run(main()) == [[{"name": "dots"}], [{"name": "x"}], [{"name": "dots"}]]
    assert http_server.raw_paths[before:] == ["/item/%2E%2E", "/item/x", "/item/%2E%2E"]


@pytest.mark.parametrize("gone", ["aiospark.connectors.http.transports", "aiospark.connectors.http_transport",
                                  "aiospark.connectors.openai.transport", "aiospark.connectors.openai_transport"])
def test_transport_modules_have_names_that_cannot_be_confused(gone):
    """``http/transport.py`` is the interface, ``http/choose.py`` picks one, ``openai/endpoint.py``
    speaks the OpenAI API over it: no module one letter away, and no alias left behind."""
    import importlib.util

    assert importlib.util.find_spec(gone) is None
    for name in ("aiospark.connectors.http.transport", "aiospark.connectors.http.choose",
                 "aiospark.connectors.openai.endpoint"):
        assert importlib.util.find_spec(name) is not None
