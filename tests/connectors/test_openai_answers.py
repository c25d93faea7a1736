"""Answers that are not answers (issue 45, parts 1, 5 and 6), against a scripted OpenAI-compatible
server on 127.0.0.1 that sends exactly the answers and headers real providers send, through both
transports (aiohttp and the official SDK) and the core operator with ``default_retry()``.
"""
from __future__ import annotations

import warnings

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from aiospark import AsyncFunctionError
from aiospark.connectors import ConnectorError, HttpStatusError
from aiospark.connectors.openai import NotAnAnswer, OpenAIChat, OpenAIEmbeddings, default_retry

from ._openai_support import CLIENTS, ScriptedServer, chat_reply, error_reply, invoke_all, run, through_operator


def NULL(value, exc):  # the operator's on_error: the row's result is None
    return [None]


USAGE = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}

NOT_ANSWERS = [  # (what the endpoint sent, the reason named, words of the error)
    (chat_reply(None, finish_reason="content_filter", usage=USAGE), "content_filter", "content filter"),
    (chat_reply(message={"role": "assistant", "content": None, "refusal": "I can't help with that."},
                usage=USAGE), "refusal", "I can't help with that."),
    (chat_reply(message={"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        finish_reason="tool_calls", usage=USAGE), "tool_calls", "called a tool"),
    (chat_reply(message=None, finish_reason="stop", usage=USAGE), "no_message", "no message"),
    (chat_reply("The answer is forty", finish_reason="length", usage=USAGE), "length", "max_tokens=16"),
    (chat_reply("", finish_reason="length", usage={**USAGE, "completion_tokens_details": {"reasoning_tokens": 5}}),
     "length", "all of it spent reasoning"),
    (chat_reply("", finish_reason="stop", usage={**USAGE, "completion_tokens_details": {"reasoning_tokens": 5}}),
     "empty_after_reasoning", "reasoned but wrote no answer"),
    (chat_reply(None, finish_reason="stop", usage=USAGE), "no_content", "no content"),
    # Anthropic-compatible servers say "max_tokens" for a cut-off (before: the cut text as an answer)
    (chat_reply("The answer is forty", finish_reason="max_tokens", usage=USAGE), "length",
     "cut off at max_tokens=16 (finish_reason 'max_tokens')"),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("sent, reason, words", NOT_ANSWERS, ids=[r for _, r, _ in NOT_ANSWERS])
def test_an_answer_that_is_not_an_answer_is_an_error_naming_why_paid_and_not_retried(client, sent, reason, words):
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: sent
        fn = OpenAIChat("m", base_url=srv.base_url, client=client, max_tokens=16)
        with pytest.raises(AsyncFunctionError) as info:
            run(through_operator(fn, ["question"], retry=default_retry()))
        error = info.value.__cause__
        assert isinstance(error, NotAnAnswer) and error.reason == reason and not error.retryable, error
        assert words in str(error)
        assert srv.count() == 1  # the same request would get the same non-answer: asked once
        # what the provider billed is counted, answer or not
        out, op = run(through_operator(fn, ["question"], retry=default_retry(), on_error=NULL))
        assert out == [None] and op.metrics.usage["total_tokens"] == 12


@pytest.mark.parametrize("client", CLIENTS)
def test_a_refusal_or_cut_off_on_the_structured_path_is_not_retried(client):
    struct = StructType([StructField("label", StringType(), False)])
    with ScriptedServer() as srv:
        for sent, reason in ((chat_reply(message={"role": "assistant", "content": None, "refusal": "no"}), "refusal"),
                             (chat_reply('{"label": "po', finish_reason="length"), "length")):
            srv.seen.clear()
            srv.reply = lambda path, body, n, sent=sent: sent
            fn = OpenAIChat("m", base_url=srv.base_url, client=client, response_format=struct)
            with pytest.raises(AsyncFunctionError) as info:
                run(through_operator(fn, ["question"], retry=default_retry()))
            assert isinstance(info.value.__cause__, NotAnAnswer) and info.value.__cause__.reason == reason
            assert srv.count() == 1
        # a malformed JSON answer stays retryable (SPEC 5): asked again, answered right
        srv.seen.clear()
        srv.reply = lambda path, body, n: chat_reply('{"label": ' if n == 0 else '{"label": "pos"}')
        out, op = run(through_operator(fn, ["question"], retry=default_retry()))
        assert out == [{"label": "pos"}] and srv.count() == 2


@pytest.mark.parametrize("client", CLIENTS)
def test_an_empty_plain_answer_without_reasoning_is_an_answer(client):
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: chat_reply("")
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)
        assert run(invoke_all(fn, ["q"])) == [[""]]


@pytest.fixture
def own_quota_stops(monkeypatch):
    """A quota stop lasts its cool-down in the process, keyed by base_url (+ key): a later test
    whose scripted server got the same port would find its requests refused unsent."""
    from aiospark.connectors.openai import endpoint

    monkeypatch.setattr(endpoint, "_QUOTA_SPENT", {})


@pytest.mark.parametrize("client", CLIENTS)
def test_insufficient_quota_stops_the_calls_instead_of_retrying_every_row(client, own_quota_stops):
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: error_reply(
            429, "You exceeded your current quota, please check your plan and billing details.",
            code="insufficient_quota", type_="insufficient_quota", headers={"retry-after-ms": "20"})
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)
        # one slot: the first answer is in before any other row goes (nothing is held before it)
        out, op = run(through_operator(fn, [f"q{i}" for i in range(20)], retry=default_retry(), on_error=NULL,
                                       capacity=1))
        assert out == [None] * 20
        assert srv.count() == 1  # one answer said it; no row asks again, no retry
        assert op.metrics.retries == 0
        results = run(invoke_all(fn, ["again"]))
        (error,) = results
        assert isinstance(error, HttpStatusError) and not error.retryable and "insufficient_quota" in str(error)
        assert "quota" in str(error) and "add credit" in str(error)
    with ScriptedServer() as srv:  # an ordinary 429 stays retryable
        srv.reply = lambda path, body, n: (error_reply(429, "slow down", code="rate_limit_exceeded",
                                                       headers={"retry-after-ms": "10"}) if n == 0 else chat_reply("ok"))
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)
        out, op = run(through_operator(fn, ["q"], retry=default_retry()))
        assert out == ["ok"] and op.metrics.retries == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_insufficient_quota_stops_only_its_account_and_only_until_one_request_asks_again(client, monkeypatch,
                                                                                          own_quota_stops):
    # the account has no credit until the test adds it. Before: once one 429 insufficient_quota was
    # seen, every later request of the worker failed unsent for as long as its client lived (the
    # review: still blocked 360 s after credit was added), whatever the model or path.
    import asyncio

    from aiospark.connectors.openai import endpoint

    monkeypatch.setattr(endpoint, "QUOTA_COOLDOWN", 1.0, raising=False)
    credit = {"on": False}
    quota = error_reply(429, "You exceeded your current quota", code="insufficient_quota", type_="insufficient_quota")
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: (
            (200, {}, {"object": "list", "model": "e", "usage": {"prompt_tokens": 1, "total_tokens": 1},
                       "data": [{"index": 0, "embedding": [1.0, 2.0]}]}) if path.endswith("/embeddings")
            else chat_reply("paid") if credit["on"] or body["model"] == "other-key" else quota)
        spent = OpenAIChat("m", base_url=srv.base_url, client=client, api_key="sk-account-A-0123456789")
        same_account = OpenAIEmbeddings("e", base_url=srv.base_url, client=client, api_key="sk-account-A-0123456789")
        other_account = OpenAIChat("other-key", base_url=srv.base_url, client=client,
                                   api_key="sk-account-B-0123456789")

        async def go():
            for fn in (spent, same_account, other_account):
                await fn.open()
            try:
                first = await asyncio.gather(spent.async_invoke("q"), return_exceptions=True)
                credit["on"] = True
                sent = srv.count()
                # within the cool-down: the account's other calls fail unsent; another key's go
                during = await asyncio.gather(spent.async_invoke("q2"), same_account.async_invoke("t"),
                                              return_exceptions=True)
                unsent = srv.count() - sent
                other = await other_account.async_invoke("q3")
                await asyncio.sleep(1.5)  # the cool-down is over: one request asks again
                after = await spent.async_invoke("q4"), await same_account.async_invoke("t2")
                return first, during, unsent, other, after
            finally:
                for fn in (spent, same_account, other_account):
                    await fn.close()

        first, during, unsent, other, after = run(go())
        assert isinstance(first[0], HttpStatusError) and "insufficient_quota" in str(first[0])
        assert all(isinstance(e, HttpStatusError) and "not sent" in str(e) for e in during) and unsent == 0
        assert other == ["paid"]
        assert after == (["paid"], [[1.0, 2.0]])


@pytest.mark.parametrize("client", CLIENTS)
def test_a_200_whose_body_is_an_error_is_a_retryable_error_carrying_the_providers_message(client):
    # a gateway (OpenRouter and the like) answering 200 {"error": {...}} for an upstream failure.
    # Before: "the answer has no 'choices'", not retryable, the provider's message lost.
    failure = (200, {}, {"error": {"message": "Upstream provider overloaded", "code": 502}})
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: failure if n == 0 else chat_reply("ok")
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)
        (error,) = run(invoke_all(fn, ["q"]))
        assert isinstance(error, ConnectorError) and error.retryable, repr(error)
        assert "Upstream provider overloaded" in str(error) and "code 502" in str(error)
        srv.seen.clear()
        srv.reply = lambda path, body, n: failure if n == 0 else chat_reply("ok")
        out, op = run(through_operator(fn, ["q"], retry=default_retry()))
        assert out == ["ok"] and op.metrics.retries == 1 and srv.count() == 2


# --- usage as billed ---------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_cached_and_reasoning_tokens_are_recorded_for_every_attempt(client):
    usage = {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
             "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 30, "audio_tokens": 0}}
    struct = StructType([StructField("label", StringType(), False)])
    with ScriptedServer() as srv:
        # the first attempt's answer is malformed (retried), the second fits: both are billed
        srv.reply = lambda path, body, n: chat_reply('{"label": ' if n == 0 else '{"label": "x"}', usage=usage)
        fn = OpenAIChat("m", base_url=srv.base_url, client=client, response_format=struct)
        out, op = run(through_operator(fn, ["q"], retry=default_retry()))
        assert out == [{"label": "x"}]
        got = {k: op.metrics.usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens",
                                                "cached_prompt_tokens", "reasoning_tokens")}
        assert got == {"prompt_tokens": 200, "completion_tokens": 80, "total_tokens": 280,
                       "cached_prompt_tokens": 128, "reasoning_tokens": 60}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_request_the_row_timeout_abandoned_is_counted(client):
    with ScriptedServer(latency=3.0) as srv:
        fn = OpenAIChat("m", base_url=srv.base_url, client=client, timeout=30)
        out, op = run(through_operator(fn, ["q"], timeout=0.5, on_error=NULL))
        assert out == [None] and srv.count() == 1
        assert op.metrics.usage.get("abandoned_requests") == 1


def test_a_request_timeout_above_the_row_timeout_warns_at_definition():
    with pytest.warns(UserWarning, match=r"timeout=120.*row timeout of 60 s.*timeout= above 120"):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", timeout=120)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the defaults agree with the entry points' 60 s: no warning
        chat = OpenAIChat("m", base_url="http://127.0.0.1:9/v1")
        OpenAIEmbeddings("m", base_url="http://127.0.0.1:9/v1")
    assert chat.request_timeout == 60.0


# --- Azure-style endpoints ----------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_a_base_url_with_a_query_string_keeps_it_on_every_request(client):
    with ScriptedServer() as srv:
        base = f"http://127.0.0.1:{srv.port}/openai/deployments/gpt4o?api-version=2024-06-01&key=g3mini-S3cret"
        chat = OpenAIChat("gpt4o", base_url=base, client=client)
        embed = OpenAIEmbeddings("emb", base_url=base, client=client)
        assert "api-version=2024-06-01" in repr(chat) and "g3mini-S3cret" not in repr(chat) and "key=***" in repr(chat)
        assert run(invoke_all(chat, ["hi"])) == [["ok"]]
        assert len(run(invoke_all(embed, ["a"]))[0][0]) == 4
        paths = [(s["path"], s["query"]) for s in srv.seen]
        query = {"api-version": "2024-06-01", "key": "g3mini-S3cret"}
        assert paths == [("/openai/deployments/gpt4o/chat/completions", query),
                         ("/openai/deployments/gpt4o/embeddings", query)]
        srv.reply = lambda path, body, n: error_reply(400, f"bad request to {path}?key=g3mini-S3cret")
        (error,) = run(invoke_all(chat, ["hi"]))
        assert isinstance(error, HttpStatusError) and "g3mini-S3cret" not in str(error)
