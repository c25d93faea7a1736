"""aiospark.connectors.openai against a real OpenAI-compatible server on 127.0.0.1 (no mocks).

Both transports (aiohttp and the official ``openai`` SDK) run the same tests; the functions are
driven as users drive them: directly (open / async_invoke / close) and through the core operator
(``AsyncWaitOperator``) for retries, Retry-After and usage metrics.
"""
from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import time

import cloudpickle
import pytest

from aiospark import AsyncFunctionError, RetryStrategy
from aiospark.connectors import ConnectorError, ConnectorTimeout, HttpStatusError, is_retryable
from aiospark.connectors.clients import SHARED
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings, default_retry, estimate_tokens
from aiospark.connectors.openai import tokens as openai_tokens
from aiospark.lookup import LookupCache
from tests.support.openai_server import OpenAIServer, answer, tokens, vector

from ._openai_support import CLIENTS, KEY, invoke_all, run, through_operator

# --- embeddings -----------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_embeddings_rows_are_batched_and_keep_their_columns(srv, client):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client, batch_size=16,
                          batch_delay=0.05)
    rows = [{"id": i, "text": f"text number {i}"} for i in range(100)]
    results = run(invoke_all(fn, rows))
    assert results == [[{**r, "embedding": vector(r["text"])}] for r in rows]
    assert srv.requests["/v1/embeddings"] == len(srv.batch_sizes) < 100
    assert max(srv.batch_sizes) == 16 and sum(srv.batch_sizes) == 100


@pytest.mark.parametrize("client", CLIENTS)
def test_embeddings_of_bare_values_nulls_and_dimensions(srv, client):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client, dimensions=4)
    results = run(invoke_all(fn, ["a", ("b",), None, {"text": None, "k": 1}]))
    assert results == [[vector("a", 4)], [vector("b", 4)], [None], [{"text": None, "k": 1, "embedding": None}]]
    assert sum(srv.batch_sizes) == 2  # NULLs make no request


def test_equal_texts_in_flight_share_one_slot_and_the_cache_answers_later_ones(srv):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, cache=LookupCache(max_rows=100))

    async def go():
        await fn.open()
        try:
            first = await asyncio.gather(*(fn.async_invoke("same") for _ in range(10)))
            again = await fn.async_invoke("same")
            return first, again, fn.stats()
        finally:
            await fn.close()

    first, again, stats = run(go())
    assert first == [[vector("same")]] * 10 and again == [vector("same")]
    assert srv.batch_sizes == [1] and stats["coalesced"] == 9 and stats["cache_hits"] == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_an_error_for_a_request_reaches_every_row_of_it(srv, client):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client, batch_size=8, batch_delay=0.2)
    results = run(invoke_all(fn, ["x1", "x2", "boom", "x3"]))
    assert len(srv.batch_sizes) == 1
    assert all(isinstance(r, HttpStatusError) and r.status == 500 and r.retryable for r in results)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("text, kind, retryable, words", [
    ("bad-request", HttpStatusError, False, "HTTP 400"),
    ("malformed", ConnectorError, False, "not a JSON object"),
    ("short", ConnectorError, False, "expected 'data' with 1 embedding"),
    ("no-data", ConnectorError, False, "expected 'data' with 1 embedding"),  # an error, not an empty result
    ("bad-json", ConnectorError, False, "JSON"),
])
def test_embedding_error_paths(srv, client, text, kind, retryable, words):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client)
    (result,) = run(invoke_all(fn, [text]))
    assert isinstance(result, kind) and result.retryable is retryable and words in str(result)
    assert "127.0.0.1" in str(result) and "model='emb'" in str(result)


@pytest.mark.parametrize("client", CLIENTS)
def test_non_text_input_and_missing_column_say_what_is_wrong(srv, client):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client, input="body")
    number, missing = run(invoke_all(fn, [42, {"text": "a"}]))
    assert isinstance(number, TypeError) and "must be a string" in str(number)
    assert isinstance(missing, KeyError) and "no column 'body'" in str(missing) and "['text']" in str(missing)


# --- chat -----------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_chat_prompts_messages_and_extra_fields(srv, client):
    fn = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, client=client, input="q", output="a",
                    system="be brief", max_tokens=20, temperature=0, extra_body={"system_check": "extra"})
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "second"}]
    results = run(invoke_all(fn, [{"id": 1, "q": "hello there"}, "bare", messages, {"id": 2, "q": None}]))
    assert results == [[{"id": 1, "q": "hello there", "a": answer("hello there") + " [extra]"}],
                       [answer("bare") + " [extra]"], [answer("second") + " [extra]"],
                       [{"id": 2, "q": None, "a": None}]]
    assert srv.requests["/v1/chat/completions"] == 3


@pytest.mark.parametrize("client", CLIENTS)
def test_chat_error_paths(srv, client):
    fn = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, client=client)
    boom, malformed, short, bad_messages, empty = run(invoke_all(fn, ["boom", "malformed", "short", [1], []]))
    assert isinstance(boom, HttpStatusError) and boom.status == 500 and boom.retryable
    assert isinstance(malformed, ConnectorError) and "not a JSON object" in str(malformed)
    assert isinstance(short, ConnectorError) and "no 'choices'" in str(short) and not short.retryable
    no_data, bad_json = run(invoke_all(fn, ["no-data", "bad-json"]))
    assert isinstance(no_data, ConnectorError) and "no 'choices'" in str(no_data) and not no_data.retryable
    assert isinstance(bad_json, ConnectorError) and not bad_json.retryable
    assert isinstance(bad_messages, TypeError) and "{role, content}" in str(bad_messages)
    assert isinstance(empty, ValueError) and "empty" in str(empty)


# --- retries, Retry-After, usage --------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_429_is_retried_no_sooner_than_retry_after(srv, client):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client)
    out, op = run(through_operator(fn, [{"text": "throttle-me"}],
                                   retry=RetryStrategy.fixed_delay(3, 0.01, exception_predicate=is_retryable)))
    assert out == [{"text": "throttle-me", "embedding": vector("throttle-me")}]
    first, second = [s["time"] for s in srv.seen]
    assert second - first >= 0.99  # Retry-After: 1 wins over the 10 ms back-off
    assert op.metrics.retries == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_usage_reaches_the_operator_metrics_once_per_request(srv, client):
    emb = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client, batch_size=5, batch_delay=0.2)
    texts = [f"w{i} x y" for i in range(10)]  # 3 tokens each on the server
    out, op = run(through_operator(emb, texts))
    assert len(out) == 10 and sorted(srv.batch_sizes) == [5, 5]
    estimated = sum(estimate_tokens(t) for t in texts)
    assert op.metrics.usage == {"prompt_tokens": 30, "total_tokens": 30, "estimated_prompt_tokens": estimated,
                                "prompt_estimate_error_tokens": abs(estimated - 30)}

    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, client=client)
    out, op = run(through_operator(chat, ["one two", "three"]))
    prompt, completion = tokens("one two") + tokens("three"), tokens(answer("one two")) + tokens(answer("three"))
    # per request: |estimate - counted| (one-two: 2 vs 2; three: 2 vs 1)
    error = abs(estimate_tokens("one two") - 2) + abs(estimate_tokens("three") - 1)
    assert op.metrics.usage == {"prompt_tokens": prompt, "completion_tokens": completion,
                                "total_tokens": prompt + completion,
                                "estimated_prompt_tokens": estimate_tokens("one two") + estimate_tokens("three"),
                                "prompt_estimate_error_tokens": error}


def test_default_retry_retries_5xx_but_not_4xx(srv):
    fn = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY)
    srv.fail_next(2, status=503)
    out, op = run(through_operator(fn, ["fine"], retry=default_retry()))
    assert out == [answer("fine")] and op.metrics.retries == 2

    with pytest.raises(AsyncFunctionError) as info:
        run(through_operator(fn, ["bad-request"], retry=default_retry()))
    assert isinstance(info.value.__cause__, HttpStatusError) and info.value.__cause__.status == 400
    assert srv.requests["/v1/chat/completions"] == 4  # 3 for 'fine', 1 for the 400


@pytest.mark.parametrize("client", CLIENTS)
def test_timeouts_and_refused_connections_are_retryable_errors(client):
    with OpenAIServer(latency=2.0) as slow:
        fn = OpenAIChat("chat", base_url=slow.base_url, client=client, timeout=0.3)
        (result,) = run(invoke_all(fn, ["hi"]))
        assert isinstance(result, ConnectorTimeout) and result.retryable and "0.3s" in str(result)
        port = slow.port
    fn = OpenAIChat("chat", base_url=f"http://127.0.0.1:{port}/v1", client=client, timeout=5)
    (result,) = run(invoke_all(fn, ["hi"]))
    assert isinstance(result, ConnectorError) and result.retryable and "connect" in str(result)


# --- limits ---------------------------------------------------------------------------------

def test_requests_per_minute_spaces_requests(srv):
    # 60/min = 1 per second with a burst of 6: 8 requests take about 2 s
    fn = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, requests_per_minute=60)
    start = time.monotonic()
    results = run(invoke_all(fn, [f"q{i}" for i in range(8)]))
    assert results == [[answer(f"q{i}")] for i in range(8)]
    times = sorted(s["time"] - start for s in srv.seen)
    assert sum(t < 0.9 for t in times) == 6
    assert times[-1] >= 1.8 and times[-1] < 15


def test_tokens_per_minute_charges_the_estimate_then_what_was_used(srv, monkeypatch):
    # 600/min = 10 tokens/s, burst 60. 80 one-letter words: estimated ceil(159/4) = 40 tokens,
    # used 80 (the server counts words): the 40 more are charged after the answer, so the next
    # request waits about (80 - 60) / 10 = 2 s. Without the correction it would not wait at all.
    monkeypatch.setattr(openai_tokens, "_encoder", None)  # characters / 4, even where tiktoken loads
    monkeypatch.setattr(openai_tokens, "_tokenizer_tried", True)
    text = " ".join(["a"] * 80)
    assert estimate_tokens(text) == 40
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, tokens_per_minute=600)

    async def go():
        await fn.open()
        try:
            await fn.async_invoke(text)
            await fn.async_invoke("b")
        finally:
            await fn.close()

    run(go())
    first, second = [s["time"] for s in srv.seen]
    assert second - first >= 1.5 and second - first < 15


# --- secrets --------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_the_api_key_never_shows(srv, client):
    fn = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, client=client, headers={"api-key": "azure-K3y-xyz"})
    assert KEY not in repr(fn) and KEY not in str(fn) and "***" in repr(fn)
    assert "azure-K3y-xyz" not in repr(fn)
    echoed, = run(invoke_all(fn, ["echo-auth"]))
    assert srv.seen[-1]["authorization"] == f"Bearer {KEY}"  # the key was sent ...
    for text in (str(echoed), repr(echoed), repr(pickle.loads(pickle.dumps(echoed)))):
        assert KEY not in text and "azure-K3y-xyz" not in text  # ... and scrubbed from the echo
    assert "Bearer ***" in str(echoed)
    with pytest.raises(AsyncFunctionError) as info:  # the operator's failure names the input, not the key
        run(through_operator(fn, ["echo-auth"]))
    assert KEY not in str(info.value) and KEY not in str(info.value.__cause__)

    wrong = OpenAIChat("chat", base_url=srv.base_url, api_key="sk-wrong-but-secret", client=client)
    refused, = run(invoke_all(wrong, ["hi"]))
    assert isinstance(refused, HttpStatusError) and refused.status == 401 and not refused.retryable
    assert "sk-wrong-but-secret" not in str(refused) and "***" in str(refused)


def test_the_key_comes_from_OPENAI_API_KEY_unless_disabled(srv, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    from_env = OpenAIEmbeddings("emb", base_url=srv.base_url)
    assert "api_key=***" in repr(from_env) and KEY not in repr(from_env)
    assert run(invoke_all(from_env, ["a"])) == [[vector("a")]]
    # a pickled function (what Spark ships to workers) still works, and its repr still hides the key
    shipped = cloudpickle.loads(cloudpickle.dumps(from_env))
    assert KEY not in repr(shipped) and run(invoke_all(shipped, ["b"])) == [[vector("b")]]
    no_env = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key_env=None)
    assert "api_key=None" in repr(no_env)
    (refused,) = run(invoke_all(no_env, ["a"]))
    assert isinstance(refused, HttpStatusError) and refused.status == 401
    assert srv.seen[-1]["authorization"] is None  # no key, no Authorization header


def test_one_shared_client_per_configuration(srv):
    a = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY)
    b = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, timeout=60)  # same configuration

    async def go():
        await a.open()
        await b.open()
        key = a._transport._key
        shared = key == b._transport._key and SHARED.users(key) == 2
        await a.close()
        await b.close()
        return shared, SHARED.users(key)

    assert run(go()) == (True, 0)


# --- validation -----------------------------------------------------------------------------

@pytest.mark.parametrize("cls, kwargs, error, match", [
    (OpenAIEmbeddings, {"model": ""}, ValueError, "model must be"),
    (OpenAIEmbeddings, {"base_url": "ftp://h/v1"}, ValueError, "http"),
    (OpenAIEmbeddings, {"base_url": "127.0.0.1:8000/v1"}, ValueError, "http"),
    (OpenAIEmbeddings, {"base_url": "http://u:p@h/v1"}, ValueError, "api_key="),
    (OpenAIEmbeddings, {"base_url": "http://h/v1#x"}, ValueError, "fragment"),
    (OpenAIEmbeddings, {"base_url": "http://h/v1?api-version"}, ValueError, "query string does not parse"),
    (OpenAIEmbeddings, {"batch_size": 0}, ValueError, "batch_size"),
    (OpenAIEmbeddings, {"batch_size": True}, ValueError, "batch_size"),
    (OpenAIEmbeddings, {"batch_delay": -1}, ValueError, "batch_delay"),
    (OpenAIEmbeddings, {"dimensions": 0}, ValueError, "dimensions"),
    (OpenAIEmbeddings, {"requests_per_minute": 0}, ValueError, "requests_per_minute"),
    (OpenAIEmbeddings, {"tokens_per_minute": -5}, ValueError, "tokens_per_minute"),
    (OpenAIEmbeddings, {"client": "requests"}, ValueError, "'aiohttp'"),
    (OpenAIEmbeddings, {"input": ""}, ValueError, "input"),
    (OpenAIEmbeddings, {"cache": {}}, TypeError, "LookupCache"),
    (OpenAIEmbeddings, {"headers": {"Authorization": "x"}}, ValueError, "api_key="),
    (OpenAIEmbeddings, {"timeout": 0}, ValueError, "timeout"),
    (OpenAIChat, {"temperature": 3}, ValueError, "temperature"),
    (OpenAIChat, {"max_tokens": 0}, ValueError, "max_tokens"),
    (OpenAIChat, {"system": 5}, TypeError, "system"),
])
def test_bad_arguments_fail_at_definition(cls, kwargs, error, match):
    args = {"model": "m", "base_url": "http://127.0.0.1:1/v1", **kwargs}
    with pytest.raises(error, match=match):
        cls(args.pop("model"), **args)


def test_client_openai_without_the_sdk_says_pip_install_openai(tmp_path):
    code = ("import sys, asyncio; sys.modules['openai'] = None\n"  # as if the SDK were not installed
            "from aiospark.connectors.openai import OpenAIChat\n"
            "fn = OpenAIChat('m', base_url='http://127.0.0.1:1/v1', client='openai')\n"
            "try:\n    asyncio.run(fn.open())\nexcept ImportError as e:\n    print('ERR', e)\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert "ERR" in out.stdout and "pip install openai" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("client", CLIENTS)
def test_a_refused_text_is_split_out_of_its_batch(srv, client):
    fn = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, client=client, batch_size=8, batch_delay=0.2)
    texts = ["a", "b", "c", "bad-request", "d", "e"]
    results = run(invoke_all(fn, texts))
    refused = results[3]
    assert isinstance(refused, HttpStatusError) and refused.status == 400 and not refused.retryable
    assert [r for i, r in enumerate(results) if i != 3] == [[vector(t)] for t in texts if t != "bad-request"]
    assert srv.batch_sizes[0] == 6 and 1 in srv.batch_sizes  # the whole batch, then halves down to one


def test_a_429_retry_after_pauses_the_workers_limits(srv):
    fn = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, requests_per_minute=6000)
    srv.fail_next(1, status=429, retry_after="1")

    async def go():
        await fn.open()
        try:
            with pytest.raises(HttpStatusError):
                await fn.async_invoke("first")
            return await fn.async_invoke("second")  # not retried: a new request, held by the pause
        finally:
            await fn.close()

    assert run(go()) == [answer("second")]
    first, second = [s["time"] for s in srv.seen]
    assert 0.95 <= second - first < 15


# --- token estimates --------------------------------------------------------------------------

def test_estimates_are_characters_over_4_without_a_tokenizer(monkeypatch):
    monkeypatch.setattr(openai_tokens, "_encoder", None)
    assert [estimate_tokens(t) for t in ("", "abc", "abcd", "abcde", "x" * 400)] == [1, 1, 1, 2, 100]


def test_tiktoken_that_cannot_load_its_encoding_falls_back_and_says_so_once(tmp_path):
    # tiktoken downloads its encoding at first use; with no network (as here and in CI) and an
    # empty cache it cannot: the estimates stay characters / 4 and one warning says why
    pytest.importorskip("tiktoken")
    code = ("import asyncio, logging; logging.basicConfig(level=logging.WARNING)\n"
            "from aiospark.connectors.openai import function as b\n"
            "print('LOADED', asyncio.run(b.load_tokenizer(20)), asyncio.run(b.load_tokenizer(20)))\n"
            "print('ESTIMATE', b.estimate_tokens('x' * 40))\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "TIKTOKEN_CACHE_DIR": str(tmp_path),
           "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}  # never reaches out
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "LOADED False False" in out.stdout and "ESTIMATE 10" in out.stdout, out.stdout + out.stderr
    assert out.stderr.count("tiktoken could not load") + out.stderr.count("tiktoken did not load") == 1, out.stderr
    assert "characters / 4" in out.stderr


def test_retry_after_ms_wins_and_a_malformed_one_falls_back_to_retry_after():
    from aiospark.connectors.openai.endpoint import retry_after_of

    assert retry_after_of({"retry-after-ms": "250", "Retry-After": "2"}) == 0.25
    assert retry_after_of({"retry-after-ms": "soon", "Retry-After": "2"}) == 2.0
    assert retry_after_of({"retry-after-ms": "soon"}) is None


@pytest.mark.parametrize("client", CLIENTS)
def test_a_refused_connection_says_so_in_one_line_naming_the_source_once(client):
    fn = OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", client=client, timeout=5)
    (result,) = run(invoke_all(fn, ["hi"]))
    text = str(result)
    assert isinstance(result, ConnectorError) and result.retryable and "cannot connect" in text
    assert text.count("OpenAIChat(") == 1 and text.count("127.0.0.1:9") == 1 and "\n" not in text, text
