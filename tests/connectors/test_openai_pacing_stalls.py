"""Pacing that cannot stall (issue 45, part 2): each case against a scripted OpenAI-compatible
server on 127.0.0.1 sending exactly those ``x-ratelimit-*`` / ``Retry-After`` headers, through both
transports. Bounds are counts and outcomes; the only times are generous limits that a stall
(the old behaviour: forever) exceeds.
"""
from __future__ import annotations

import asyncio
import math

import pytest

from aiospark.connectors import HttpStatusError
from aiospark.connectors.openai import OpenAIChat, RequestTooLarge
from aiospark.connectors.openai.pacing import MAX_RETRY_AFTER

from ._openai_support import CLIENTS, ScriptedServer, chat_reply, error_reply, invoke_all, run, through_operator


def NULL(value, exc):
    return [None]


@pytest.mark.parametrize("client", CLIENTS)
def test_remaining_zero_without_a_limit_and_the_reset_past_lets_one_request_probe(client):
    # the first answer: nothing left, full again in 200 ms, no limit header; later ones: plenty
    # left. Before: once the reset passed, every request waited 50 ms, forever, and none went.
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: chat_reply("ok", headers={
            "x-ratelimit-remaining-requests": "0" if n == 0 else "50", "x-ratelimit-reset-requests": "200ms"})
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)

        async def go():
            await fn.open()
            try:
                first = await fn.async_invoke("first")
                rest = await asyncio.gather(*(fn.async_invoke(f"q{i}") for i in range(5)))
                return first, rest
            finally:
                await fn.close()

        first, rest = run(go(), 30)
        assert first == ["ok"] and rest == [["ok"]] * 5 and srv.count() == 6
        # after the reset, one request went alone (the probe); the others after its answer
        probe_at = srv.seen[1]["time"]
        assert all(s["time"] >= probe_at for s in srv.seen[2:])


@pytest.mark.parametrize("client", CLIENTS)
def test_a_request_above_the_advertised_token_limit_fails_at_once_and_nothing_waits_for_it(client):
    # the endpoint advertises 30 tokens per window; one request is estimated at 100+ tokens.
    # Before: it waited for a budget that never holds it, holding the pacing turn, and the small
    # requests behind it waited until its row timed out.
    headers = {"x-ratelimit-limit-tokens": "30", "x-ratelimit-remaining-tokens": "30",
               "x-ratelimit-reset-tokens": "1s"}
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: chat_reply("ok", headers=headers, usage={
            "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)
        big = "x" * 400  # 100 tokens by characters / 4 (more with tiktoken's count)
        rows = [big] + [f"{i}" for i in range(14)]

        async def burst():
            await fn.open()
            assert await fn.async_invoke("a") == ["ok"]  # the limit is known from this answer on
            return await through_operator(fn, rows, capacity=32, timeout=30, on_error=NULL)

        out, op = run(burst(), 60)
        assert out[0] is None
        assert out[1:] == ["ok"] * 14
        assert srv.count() == 15 and all(s["body"]["messages"][-1]["content"] != big for s in srv.seen)

        async def alone():
            await fn.open()
            try:
                await fn.async_invoke("a")
                with pytest.raises(RequestTooLarge) as info:
                    await fn.async_invoke(big)
                return info.value
            finally:
                await fn.close()

        error = run(alone(), 30)
        assert "30 tokens" in str(error) and "estimated" in str(error) and "max_tokens" in str(error)
        assert not error.retryable and "OpenAIChat(127.0.0.1" in str(error)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("sent", [{"Retry-After": "1e400"}, {"retry-after-ms": "inf"}, {"Retry-After": "inf"},
                                  {"retry-after-ms": "1e400"}])
def test_an_infinite_retry_after_is_capped_at_a_finite_pause(client, sent):
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: error_reply(429, "slow down", code="rate_limit_exceeded", headers=sent)
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)

        async def go():
            await fn.open()
            try:
                with pytest.raises(HttpStatusError) as info:
                    await fn.async_invoke("q")
                return info.value, fn._pacer.delay()
            finally:
                await fn.close()

        error, pause = run(go(), 30)
        assert error.retryable and error.retry_after == MAX_RETRY_AFTER
        assert math.isfinite(pause) and 0 < pause <= MAX_RETRY_AFTER


@pytest.mark.parametrize("client", CLIENTS)
def test_an_embeddings_batch_above_the_token_limit_is_split_until_it_fits(client):
    from aiospark.connectors.openai import OpenAIEmbeddings

    from ._openai_support import embeddings_reply

    headers = {"x-ratelimit-limit-tokens": "30", "x-ratelimit-remaining-tokens": "30",
               "x-ratelimit-reset-tokens": "100ms"}
    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: embeddings_reply(body["input"], headers=headers)
        fn = OpenAIEmbeddings("emb", base_url=srv.base_url, client=client, batch_size=8, batch_delay=0.2)
        texts = [f"{i:02d}" + "y" * 38 for i in range(4)] + ["z" * 400]  # 10 tokens each; the last 100

        async def go():
            await fn.open()
            try:
                await fn.async_invoke("a")  # the first answer brings the headers
                return await asyncio.gather(*(fn.async_invoke(t) for t in texts), return_exceptions=True)
            finally:
                await fn.close()

        results = run(go(), 60)
        assert all(isinstance(r, list) and len(r[0]) == 4 for r in results[:4]), results
        assert isinstance(results[4], RequestTooLarge)  # alone, it still cannot fit: its row only
        assert max(len(s["body"]["input"]) for s in srv.seen) <= 3  # 30 tokens: at most 3 texts a request


@pytest.mark.parametrize("client", CLIENTS)
def test_a_server_without_rate_limit_headers_is_never_paced_not_even_before_its_first_answer(client):
    # a slow model (2 s per answer) that sends no x-ratelimit-* header. Before: the pacer held every
    # request but one until the first answer (a "probe" before any header was seen), so with a row
    # timeout under two answers' time most rows timed out unsent (the review: 7 of 8 at timeout=4
    # against 3 s answers). Now all go at once: the server holds all 6 at the same time.
    with ScriptedServer(latency=2.0) as srv:
        fn = OpenAIChat("m", base_url=srv.base_url, client=client)
        results = run(invoke_all(fn, [f"q{i}" for i in range(6)]), 60)
        assert results == [["ok"]] * 6
        assert srv.max_in_flight == 6
