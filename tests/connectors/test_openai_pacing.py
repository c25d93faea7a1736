"""Pacing by the endpoint's ``x-ratelimit-*`` headers (aiospark.connectors.openai.pacing).

The parsing and the pacing arithmetic run on a controllable clock; the functions run against the
real test server (tests/support/openai_server.py), which enforces a token bucket and advertises it
in OpenAI's headers, through both transports and through Spark. Bounds are counts (429s refused),
or times that a loaded machine can only make longer.
"""
from __future__ import annotations

import asyncio
import math

import pytest
from multidict import CIMultiDict

from aiospark.connectors import HttpStatusError
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings, default_retry
from aiospark.connectors.openai.pacing import Pacer, parse_duration, read_limits
from tests.support.openai_server import OpenAIServer, answer

from ._openai_support import CLIENTS, invoke_all, through_operator


def run(coro, limit: float = 120):
    return asyncio.run(asyncio.wait_for(coro, limit))


# --- parsing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("6m0s", 360.0), ("1.5s", 1.5), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("2", 2.0), ("0.25", 0.25),
    ("0s", 0.0), ("250us", 0.00025), ("1m", 60.0), (" 7s ", 7.0), ("3m20.5s", 200.5), (".5s", 0.5),
])
def test_reset_durations_parse(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "-1", "-1s", "1x", "s", "1.5.2s", "nan", "inf", "5m 3s",
                                  "90000", "25h", None, 5, "ms20", "1s-"])
def test_malformed_reset_durations_are_none(text):
    assert parse_duration(text) is None


def test_limits_read_from_headers_and_malformed_ones_left_out():
    headers = CIMultiDict({"X-RateLimit-Limit-Requests": "60", "x-ratelimit-remaining-requests": "59",
                           "x-ratelimit-reset-requests": "1s", "x-ratelimit-limit-tokens": "150000",
                           "x-ratelimit-remaining-tokens": "149984", "x-ratelimit-reset-tokens": "6m0s"})
    assert read_limits(headers) == {"requests": (60.0, 59.0, 1.0), "tokens": (150000.0, 149984.0, 360.0)}
    assert read_limits({"x-ratelimit-remaining-requests": "9", "x-ratelimit-reset-requests": "6s"}) == {
        "requests": (None, 9.0, 6.0)}
    for bad in ({"x-ratelimit-remaining-requests": "lots", "x-ratelimit-reset-requests": "1s"},
                {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "later"},
                {"x-ratelimit-remaining-requests": "5"},                       # no reset
                {"x-ratelimit-remaining-requests": "-3", "x-ratelimit-reset-requests": "1s"},
                {"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "50",
                 "x-ratelimit-reset-requests": "1s"},                          # remaining > limit
                {}):
        assert read_limits(bad) == {}


# --- the arithmetic, on a controllable clock --------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def headers(remaining, reset, limit=None, dim="requests"):
    h = {f"x-ratelimit-remaining-{dim}": str(remaining), f"x-ratelimit-reset-{dim}": reset}
    if limit is not None:
        h[f"x-ratelimit-limit-{dim}"] = str(limit)
    return h


async def warmed(fn, prompts, **kwargs):
    """``through_operator`` after one answer, in the same open function (its pacer has the headers)."""
    await fn.open()
    await fn.async_invoke("warm-up")
    return await through_operator(fn, prompts, **kwargs)


def test_nothing_is_held_before_any_header_then_the_remaining_budget_is_spread_over_the_reset():
    clock = Clock()
    pacer = Pacer(clock)

    async def go():
        probe = await pacer.admit()
        assert pacer.delay() == 0.0               # no header seen: nothing is known, nothing held
        pacer.update(probe, headers(10, "1s"))
        pacer.finished(probe)
        assert pacer.paced
        # 10 left over 1 s: a gap of 0.1 s after the last send (the probe, at 1000.0)
        assert pacer.delay() == pytest.approx(0.1)
        clock.now += 0.1
        second = await pacer.admit()
        # 9 left (the second went after the answer held) over the 0.9 s left: 0.1 s again
        assert pacer.delay() == pytest.approx(0.1)
        clock.now += 0.05  # the share is of the time left now: 0.85 s / 9 after the last send
        assert pacer.delay() == pytest.approx(0.85 / 9 - 0.05)
        # a fresher answer: 2 left of 10, refilled in 4 s -> 2 s per request
        pacer.update(second, headers(2, "4s", limit=10))
        assert pacer.delay() == pytest.approx(1.95)
        # a stale answer (an older request's) changes nothing
        pacer.update(probe, headers(10, "0s"))
        assert pacer.delay() == pytest.approx(1.95)
        clock.now += 10  # past the reset: the budget is full again, nothing is held back
        assert pacer.delay() == 0.0

    run(go())


def test_nothing_left_waits_for_the_refill_of_what_is_missing():
    clock = Clock()
    pacer = Pacer(clock)

    async def go():
        t = await pacer.admit()
        pacer.update(t, headers(0, "2s", limit=50))      # refills 25 per second
        assert pacer.delay() == pytest.approx(1 / 25)
        clock.now += 0.03
        assert pacer.delay() == pytest.approx(0.01)
        # once one is back, the level (1.5 of 50 at +0.06 s) is spread over the time until full
        clock.now += 0.03
        assert pacer.delay() == pytest.approx(48.5 / (1.5 * 25) - 0.06)
        clock.now += 10                                   # full again: nothing held back
        assert pacer.delay() == 0.0
        t2 = await pacer.admit()
        pacer.update(t2, headers(0, "2s"))                  # no limit: only the reset is known
        assert pacer.delay() == pytest.approx(2.0)
        clock.now += 3                                      # past it, without a fresher answer:
        assert pacer.delay() == 0.0                         # one request goes and finds out,
        probe = await pacer.admit()
        assert pacer.delay() == math.inf                    # the others wait for its answer
        pacer.update(probe, headers(5, "1s"))
        assert pacer.delay() == pytest.approx(0.2)          # 5 left over 1 s

    run(go())


def test_the_level_counts_what_this_worker_sent_after_the_answered_request():
    clock = Clock()
    pacer = Pacer(clock)

    async def go():
        probe = await pacer.admit()
        pacer.update(probe, headers(45, "100ms", limit=50))   # 50/s refill, 5 short of full
        sent = 0
        while pacer.delay() == 0.0 and sent < 100:             # the spread gap is 0 only when full
            await pacer.admit()
            sent += 1
        assert sent == 0
        # without a fresher answer, sending on the clock's schedule spends the level down: it
        # never sends more than the 45 left plus what refills meanwhile
        for _ in range(60):
            while (wait := pacer.delay()) > 0:
                clock.now += wait + 1e-9
            await pacer.admit()
        elapsed = clock.now - 1000.0
        assert 60 <= 45 + 50 * elapsed

    run(go())


def test_tokens_are_paced_by_the_estimate():
    clock = Clock()
    pacer = Pacer(clock)

    async def go():
        t = await pacer.admit(cost=100)
        pacer.update(t, {**headers(1000, "10s", dim="tokens"), **headers(500, "1s")})
        # tokens: 100 of 1000 over 10 s -> 1 s; requests: 1 of 500 over 1 s -> 2 ms
        assert pacer.delay(cost=100) == pytest.approx(1.0)
        assert pacer.delay(cost=10) == pytest.approx(0.1)

    run(go())


def test_no_headers_or_malformed_ones_leave_the_worker_unpaced():
    clock = Clock()
    for sent in ({}, {"x-ratelimit-remaining-requests": "many", "x-ratelimit-reset-requests": "1s"},
                 {"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "in a bit"}):
        pacer = Pacer(clock)

        async def go(pacer, sent):
            probe = await pacer.admit()
            pacer.update(probe, sent)
            pacer.finished(probe)
            for _ in range(100):
                assert pacer.delay(cost=10**9) == 0.0
                await pacer.admit(cost=10**9)

        run(go(pacer, sent))
        assert not pacer.paced and pacer.waits == 0


def test_a_probe_without_an_answer_lets_the_next_request_probe():
    async def go():
        clock = Clock()
        pacer = Pacer(clock)
        seen = await pacer.admit()
        pacer.update(seen, headers(0, "1s"))      # nothing left, no limit: after the reset, one probes
        pacer.finished(seen)
        clock.now += 2
        first = await pacer.admit()
        waiter = asyncio.ensure_future(pacer.admit())
        await asyncio.sleep(0.05)
        assert not waiter.done()                 # held behind the probe
        pacer.finished(first)                    # failed without an answer (e.g. refused connection)
        second = await asyncio.wait_for(waiter, 10)
        assert pacer.delay() == math.inf         # the second is the probe now
        pacer.update(second, {})
        assert pacer.delay() == 0.0

    run(go())


def test_a_retry_after_pauses_the_pacer():
    clock = Clock()
    pacer = Pacer(clock)
    pacer.pause(1.5)
    assert pacer.delay() == pytest.approx(1.5)
    clock.now += 2
    assert pacer.delay() == 0.0


# --- against the server, both transports ------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_the_endpoints_bucket_is_respected_and_ignoring_it_is_refused(client):
    # 60 requests at once against a bucket of 20 refilled at 20/s. Paced by the headers, (almost)
    # none is refused; with pacing off, the burst beyond the bucket is (about 40 of them).
    prompts = [f"q{i}" for i in range(60)]
    with OpenAIServer(rate_limit=20) as srv:
        for pace in (True, False):
            srv.reset()
            fn = OpenAIChat("chat", base_url=srv.base_url, client=client)
            fn.pace_by_headers = pace  # OpenAIChat's constructor does not take it yet
            # one answer first: nothing is held before any header is seen (a burst into an unknown
            # budget is the price of never holding a slow model's rows behind its first answer)
            out, _ = run(warmed(fn, prompts, capacity=64, retry=default_retry(20)))
            assert sorted(out) == sorted(answer(p) for p in prompts)
            if pace:
                assert srv.refused <= 3, srv.refused
            else:
                assert srv.refused >= 20, srv.refused


@pytest.mark.parametrize("client", CLIENTS)
def test_a_provider_without_headers_is_not_paced_and_malformed_headers_are_ignored(client):
    for sent in ({}, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "tomorrow",
                      "x-ratelimit-remaining-tokens": "-1", "x-ratelimit-reset-tokens": "9s"}):
        with OpenAIServer(ratelimit_headers=sent, latency=0.1) as srv:
            fn = OpenAIEmbeddings("emb", base_url=srv.base_url, client=client, batch_size=1, batch_delay=0)

            async def go(fn):
                await fn.open()
                try:
                    results = await asyncio.gather(*(fn.async_invoke(f"t{i}") for i in range(30)))
                    return results, fn._pacer
                finally:
                    await fn.close()

            results, pacer = run(go(fn))
            # nothing held: no request waits for anything but the first answer (read as "0 left,
            # reset tomorrow" the malformed ones would hold every request back)
            assert len(results) == 30 and len(srv.seen) == 30
            assert not pacer.paced and pacer.delay(10**9) == 0.0


@pytest.mark.parametrize("client", CLIENTS)
def test_token_headers_space_the_requests(client):
    # every answer says: 100 tokens left of a budget reset in 1 s. Each prompt is estimated at
    # 10 tokens (40 characters), so a request goes about every 0.1 s: 6 requests take ~0.5 s. The
    # remaining is spread over the time left until the reset of the freshest answer, so answers that
    # come late (a loaded machine: 0.41 s seen in CI) shorten the gaps: the bound allows for that.
    sent = {"x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "1s"}
    with OpenAIServer(ratelimit_headers=sent) as srv:
        fn = OpenAIChat("chat", base_url=srv.base_url, client=client)
        prompts = [f"{i:02d}" + "x" * 38 for i in range(6)]

        async def go():
            await fn.open()
            await fn.async_invoke("warm-up")  # the headers are known from here on
            return await invoke_all(fn, prompts)

        results = run(go())
        assert results == [[answer(p)] for p in prompts]
        times = sorted(s["time"] for s in srv.seen)
        assert times[-1] - times[0] >= 0.3 and fn._pacer.waits >= 5


def test_a_429_retry_after_pauses_the_pacer_without_per_minute_limits():
    with OpenAIServer() as srv:
        fn = OpenAIChat("chat", base_url=srv.base_url)
        srv.fail_next(1, status=429, retry_after="1")

        async def go():
            await fn.open()
            try:
                with pytest.raises(HttpStatusError):
                    await fn.async_invoke("first")
                return await fn.async_invoke("second")
            finally:
                await fn.close()

        assert run(go()) == [answer("second")]
        first, second = [s["time"] for s in srv.seen]
        assert 0.95 <= second - first < 30


def test_pace_by_headers_must_be_a_bool():
    with pytest.raises(TypeError, match="pace_by_headers"):
        OpenAIEmbeddings("m", base_url="http://127.0.0.1:1/v1", pace_by_headers="no")


# --- through Spark: the target, with bounds a loaded machine cannot break ---------------

def test_spark_job_paced_by_the_endpoints_headers(spark):
    # 1,000 chat rows, 2 tasks, capacity 64 each, against a bucket of 50 requests/s advertised in
    # the headers. Target (benchmarks/openai_pacing.py): <= 5 % refused with 429 and >= 0.80 of
    # the advertised rate served. Here: the 429 share (pacing keeps it low however slow the
    # machine) and a loose lower bound on the rate.
    import aiospark

    n, rate = 1000, 50
    with OpenAIServer(rate_limit=rate) as srv:
        df = spark.createDataFrame([(i, f"question {i}") for i in range(n)], "id INT, prompt STRING").repartition(2)
        chat = OpenAIChat("chat", base_url=srv.base_url)
        out = aiospark.unordered_wait(df, chat, chat.output_schema(df), capacity=64, retry=default_retry(20))
        rows = out.collect()
        assert {r.id: r.answer for r in rows} == {i: answer(f"question {i}") for i in range(n)}
        served = [s["time"] for s in srv.seen]
        total = len(served) + srv.refused
        assert len(served) == n
        # each task's first burst goes before any header is seen (nothing is held before one:
        # issue 45's review), so up to 2 x 64 - 50 of it may be refused; beyond it, <= 5 %
        assert srv.refused <= 2 * 64 - rate + 0.05 * total, (srv.refused, total)
        span = max(served) - min(served)
        served_rate = (n - 1) / span
        assert served_rate >= 0.25 * rate, served_rate
        assert served_rate <= rate * 1.1 + rate / span  # the bucket enforces this anyway


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("usage", [
    {"prompt_tokens": float("nan"), "completion_tokens": 10**29, "total_tokens": float("inf")},
    {"prompt_tokens": 3, "completion_tokens": 2.5, "total_tokens": "5"},
])
def test_usage_that_is_not_token_counts_is_neither_recorded_nor_charged(client, usage, caplog):
    from tests.connectors._openai_support import ScriptedServer, chat_reply, run

    with ScriptedServer() as srv:
        srv.reply = lambda path, body, n: chat_reply("ok", usage=usage)
        chat = OpenAIChat("m", base_url=srv.base_url, api_key="sk-test", client=client, tokens_per_minute=100_000)
        with caplog.at_level("WARNING", logger="aiospark"):
            out, op = run(through_operator(chat, [f"row {i}" for i in range(6)], capacity=1), limit=60)
    assert len(out) == 6 and srv.count() == 6  # no debt of 1e29 tokens holds the next requests back
    assert all(v < 10**9 for v in op.metrics.usage.values()), op.metrics.usage
    assert "completion_tokens" not in op.metrics.usage and "total_tokens" not in op.metrics.usage
    assert sum("not token counts" in r.getMessage() for r in caplog.records) == 1

