"""The OpenAI functions send through aiospark's HTTP transport seam, the one ``HttpLookup`` and
``HttpClient`` use: ``client="auto"`` (default) is pyreqwest where it is installed, else aiohttp,
and ``AIOSPARK_HTTP_TRANSPORT`` decides for them as for the HTTP connector.

Which library sent a request is read from the ``User-Agent`` it carried to a real server on
127.0.0.1 (each library sends its own). The rest of the connector's behaviour on each transport
(pacing, quotas, timeouts, secrets, structured outputs) is the ``client`` parametrization of the
other ``test_openai*`` files.
"""
from __future__ import annotations

import pytest

from aiospark.connectors.http import HttpClient
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings

from ._openai_support import ScriptedServer, invoke_all, run

FUNCTIONS = [OpenAIChat, OpenAIEmbeddings]
PATHS = {OpenAIChat: "/chat/completions", OpenAIEmbeddings: "/embeddings"}


def _agents(srv: ScriptedServer) -> list[str]:
    return [s["headers"].get("User-Agent", "") for s in srv.seen]


async def _post_with_http_client(url: str) -> None:
    async with HttpClient() as client:  # the HTTP connector's default transport
        await client.post(url, json={"model": "m", "input": "hi", "messages": [{"role": "user", "content": "hi"}]})


@pytest.mark.parametrize("cls", FUNCTIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("env", [None, "pyreqwest", "aiohttp"])
def test_the_default_client_is_the_http_connectors_transport(cls, env, monkeypatch):
    if env is None:
        monkeypatch.delenv("AIOSPARK_HTTP_TRANSPORT", raising=False)
    else:
        monkeypatch.setenv("AIOSPARK_HTTP_TRANSPORT", env)
    if env != "aiohttp":
        pytest.importorskip("pyreqwest")
    with ScriptedServer() as srv:
        fn = cls("m", base_url=srv.base_url)
        (answer,) = run(invoke_all(fn, ["hi"]))
        assert not isinstance(answer, BaseException), answer
        run(_post_with_http_client(srv.base_url + PATHS[cls]))
        by_function, by_http_client = _agents(srv)
    assert by_function == by_http_client  # one seam: the same library for both
    assert ("aiohttp" if env == "aiohttp" else "pyreqwest") in by_function


@pytest.mark.parametrize("cls", FUNCTIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("client", ["pyreqwest", "aiohttp"])
def test_client_names_the_transport_whatever_the_environment_says(cls, client, monkeypatch):
    if client == "pyreqwest":
        pytest.importorskip("pyreqwest")
    monkeypatch.setenv("AIOSPARK_HTTP_TRANSPORT", "aiohttp" if client == "pyreqwest" else "pyreqwest")
    with ScriptedServer() as srv:
        fn = cls("m", base_url=srv.base_url + "?api-version=2024-06-01", client=client)
        assert f"client={client!r}" in repr(fn)
        (answer,) = run(invoke_all(fn, ["hi"]))
        assert not isinstance(answer, BaseException), answer
        (agent,) = _agents(srv)
        assert client in agent
        (seen,) = srv.seen
        assert seen["query"] == {"api-version": "2024-06-01"}  # base_url's query on every request
        assert seen["headers"]["Content-Type"].startswith("application/json")


def test_auto_is_the_default_and_a_wrong_client_names_every_choice():
    assert OpenAIChat("m", base_url="http://127.0.0.1:1/v1").client == "auto"
    with pytest.raises(ValueError, match="'auto'.*'pyreqwest'.*'aiohttp'.*'openai'"):
        OpenAIEmbeddings("m", base_url="http://127.0.0.1:1/v1", client="httpx")


@pytest.mark.parametrize("bad", [{"temperature": float("nan")}, {"logit_bias": {"1": float("inf")}}, {"stop": {"a"}}])
def test_an_extra_body_json_cannot_carry_is_refused_at_definition(bad):
    with pytest.raises(ValueError, match="extra_body must hold JSON values only"):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", api_key="k", extra_body=bad)


@pytest.mark.parametrize("client", ["pyreqwest", "aiohttp", "openai"])
def test_an_answer_cut_mid_body_is_a_failed_post_on_every_client_not_a_refused_connection(client):
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    def serve() -> None:  # headers promise 200 bytes, 10 arrive, then the connection closes
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
                             b'{"id": "x"')

    threading.Thread(target=serve, daemon=True).start()
    try:
        fn = OpenAIChat("chat", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", client=client, timeout=10)
        (result,) = run(invoke_all(fn, ["hi"]))
    finally:
        listener.close()
    text = str(result)
    assert isinstance(result, Exception) and "cannot connect" not in text and "/chat/completions" in text, text
