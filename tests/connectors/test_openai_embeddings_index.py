"""Embeddings map by index exactly, and a refusal about the request is not split (issue 45, part 3),
against a scripted OpenAI-compatible server on 127.0.0.1, through both transports.
"""
from __future__ import annotations

import pytest

from aiospark.connectors import ConnectorError, HttpStatusError
from aiospark.connectors.openai import OpenAIEmbeddings
from tests.support.openai_server import vector

from ._openai_support import CLIENTS, ScriptedServer, embeddings_reply, error_reply, invoke_all, run


def embed(srv, client, **kwargs):
    return OpenAIEmbeddings("emb", base_url=srv.base_url, client=client, batch_size=64, batch_delay=0.2, **kwargs)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("indices, words", [
    ([0, 0, 0], "repeats the index 0"),                 # a server stamping 0 on every item
    ([0, 1, 1], "repeats the index 1"),                 # index 2 missing
    ([0, 1, 3], "has the index 3, not one of 0..2"),    # out of range
    ([0, -1, 2], "has the index -1"),
    ([0, "1", 2], "has the index '1'"),
    ([0, True, 2], "has the index True"),
])
def test_indices_that_are_not_each_input_once_are_an_error_for_the_request(client, indices, words):
    texts = ["a", "b", "c"]
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: embeddings_reply(body["input"], indices=indices)
        results = run(invoke_all(embed(srv, client), texts))
        assert srv.count() == 1
        for r in results:  # every row of the request gets the error; none a wrong or NULL vector
            assert isinstance(r, ConnectorError) and not isinstance(r, HttpStatusError) and words in str(r), r


@pytest.mark.parametrize("client", CLIENTS)
def test_answers_are_placed_by_index_whatever_their_order(client):
    with ScriptedServer() as srv:
        # shuffled, and index 0 left out (protobuf's default: Gemini's OpenAI layer omits it)
        def reply(path, body, n):
            status, headers, answer = embeddings_reply(body["input"], indices=["omit", 1, 2])
            answer["data"].reverse()
            return status, headers, answer

        srv.reply = reply
        assert run(invoke_all(embed(srv, client), ["a", "b", "c"])) == [[vector(t, 4)] for t in "abc"]
        # one text, no index: its place is certain
        srv.reply = lambda path, body, n: embeddings_reply(body["input"], indices=["omit"] * len(body["input"]))
        assert run(invoke_all(embed(srv, client), ["d"])) == [[vector("d", 4)]]


@pytest.mark.parametrize("client", CLIENTS)
def test_items_without_any_index_are_an_error_not_placed_by_position(client):
    # a server answering in reverse order and saying no index. Before: placed by position, so
    # "a" got the vector of "c" and "c" that of "a", silently.
    with ScriptedServer() as srv:
        def reply(path, body, n):
            status, headers, answer = embeddings_reply(body["input"], indices=["omit"] * len(body["input"]))
            answer["data"].reverse()
            return status, headers, answer

        srv.reply = reply
        results = run(invoke_all(embed(srv, client), ["a", "bb", "ccc"]))
        assert srv.count() == 1
        assert all(isinstance(r, ConnectorError) and "have no 'index'" in str(r) for r in results), results


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("dimensions", [None, 2])
def test_vectors_of_different_lengths_in_one_answer_are_an_error(client, dimensions):
    # before: a 2-value and a 1-value vector in one answer were both accepted (and, without
    # dimensions=, nothing compared them)
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: embeddings_reply(body["input"], vectors=[[0.5, 0.25], [0.5]])
        results = run(invoke_all(embed(srv, client, dimensions=dimensions), ["a", "b"]))
        assert srv.count() == 1
        assert all(isinstance(r, ConnectorError) and "1 values" in str(r) for r in results), results


@pytest.mark.parametrize("client", ["pyreqwest", "aiohttp"])  # the SDK's own model refuses most of these itself
@pytest.mark.parametrize("bad", [["0.5", 0.25], [True, 0.5], [None, 0.5], [float("nan"), 0.5], [1e400, 0.5],
                                 [10 ** 400, 0.5], [], [[0.5]]])
def test_vector_elements_are_checked(client, bad):
    import json

    with ScriptedServer() as srv:
        def reply(path, body, n):
            status, headers, answer = embeddings_reply(body["input"], vectors=[bad, [0.5, 0.25]])
            # json.dumps writes NaN / Infinity, which Python's json (and many servers) send
            return status, headers, json.dumps(answer).replace("1e400", "Infinity")

        srv.reply = reply
        results = run(invoke_all(embed(srv, client), ["a", "b"]))
        assert all(isinstance(r, ConnectorError) and "data" in str(r) for r in results), results


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refusal_about_the_request_is_not_split_in_halves(client, status):
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: error_reply(status, "Incorrect API key provided / no such model")
        texts = [f"text {i}" for i in range(64)]
        results = run(invoke_all(embed(srv, client), texts))
        assert srv.count() == 1  # before: 127 requests (halved down to every single text)
        assert all(isinstance(r, HttpStatusError) and r.status == status and not r.retryable for r in results)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_refusal_of_one_text_is_still_split_out(client):
    with ScriptedServer() as srv:
        def reply(path, body, n):
            if "too long" in body["input"]:
                return error_reply(400, "This model's maximum context length is 8192 tokens")
            return embeddings_reply(body["input"])

        srv.reply = reply
        texts = ["a", "b", "too long", "c"]
        results = run(invoke_all(embed(srv, client), texts))
        assert isinstance(results[2], HttpStatusError) and results[2].status == 400
        assert [r for i, r in enumerate(results) if i != 2] == [[vector(t, 4)] for t in "abc"]
