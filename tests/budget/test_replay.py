"""A budget cannot be over-spent by a replay: a lease or release delivered twice (the client retried
after the server acted and the reply was lost) changes the pot once, whether the pot is the driver's
ledger (over its real HTTP collector) or a counter in a real Redis; a release never gives back units
that were spent; a request captured on the wire cannot be sent again, nor one signed with a wrong
secret or a stale clock, nor the old bearer header."""
from __future__ import annotations

import asyncio
import json
import pickle
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from aiospark.budget import Ledger
from aiospark.budget.signing import NONCE_HEADER, Verifier, sign
from aiospark.connectors.redis.budget_leases import RedisLeases, budget_key
from tests.core._util import run
from tests.core._util import run_operator as operator_run
from tests.support.reply_dropper import ReplyDropper, http_body
from tests.support.servers import RedisServer

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def test_a_replayed_release_gives_back_nothing_twice():
    # lease 50, release(40, used=10) twice (a retry with no id, or one the ledger forgot): 10 units
    # were spent and stay spent
    ledger = Ledger(100)
    assert ledger.lease("t", need=1, want=50) == (50.0, 50.0)
    assert ledger.release("t", 40, used=10) == 40
    assert ledger.release("t", 40, used=10) == 0
    assert ledger.spent == 10 and ledger.left == 90


def test_the_ledger_answers_a_replayed_request_with_its_first_answer():
    ledger = Ledger(100)
    first = ledger.lease("t", need=1, want=30, request="lease-1")
    assert ledger.lease("t", need=1, want=30, request="lease-1") == first == (30.0, 70.0)
    assert ledger.spent == 30 and ledger.leases == 1
    assert ledger.release("t", 20, used=10, refused=3, request="release-1") == 20
    assert ledger.release("t", 20, used=10, refused=3, request="release-1") == 20   # the first answer
    assert ledger.spent == 10 and ledger.refused == 3
    assert ledger.lease("u", need=1, want=5, request="lease-2") == (5.0, 85.0)      # a new id: a new lease


def request_of(address, budget_id, secret, message, headers=None):
    body = json.dumps({"id": budget_id, "task": "t", "request": uuid.uuid4().hex, **message}).encode()
    path = urllib.parse.urlsplit(address).path
    headers = headers if headers is not None else sign(secret, "POST", path, body)
    return urllib.request.Request(address, data=body, method="POST", headers=headers)


def status_of(request):
    try:
        with _opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_the_driver_refuses_a_captured_forged_stale_or_bearer_request():
    from aiospark import Budget

    budget = Budget(100)
    ticket = pickle.loads(pickle.dumps(budget))       # what a task gets: the collector's address
    lease = {"op": "lease", "need": 1, "want": 10}
    captured = request_of(ticket.address, budget.id, budget._secret, lease)
    assert status_of(captured) == (200, {"granted": 10.0, "left": 90.0})
    code, reply = status_of(captured)                 # the same bytes again, its nonce already seen
    assert code == 403 and "replayed" in reply["error"]
    forged = request_of(ticket.address, budget.id, "0" * 32, lease)
    assert status_of(forged) == (403, {"error": "a wrong signature"})
    body = json.dumps({"id": budget.id, "task": "t", "request": "r", **lease}).encode()
    stale = urllib.request.Request(ticket.address, data=body, method="POST",
                                   headers=sign(budget._secret, "POST", "/budget", body, now=time.time() - 3600))
    code, reply = status_of(stale)
    assert code == 403 and "off the driver's clock" in reply["error"]
    bearer = request_of(ticket.address, budget.id, budget._secret, lease, headers={"X-Aiospark-Secret": budget._secret})
    assert status_of(bearer) == (403, {"error": "not signed"})
    assert budget.spent == 10 and budget._secret not in repr(ticket)


def test_a_forgotten_nonce_is_never_accepted_again():
    now = [1000.0]
    verifier = Verifier(max_nonces=3, clock=lambda: now[0])
    signed = [(sign("s", "POST", "/p", b"x", now=1000.0 + i), i) for i in range(4)]
    assert all(verifier.check("s", "POST", "/p", b"x", h) is None for h, _ in signed)
    # four nonces in a memory of three: the oldest was forgotten, and its timestamp with it
    assert verifier.check("s", "POST", "/p", b"x", signed[0][0]) == "a replayed request"
    assert verifier.check("s", "POST", "/p", b"x", signed[3][0]) == "a replayed request"
    # a new nonce no newer than the forgotten one is refused too (it could be the forgotten one)
    assert verifier.check("s", "POST", "/p", b"x", sign("s", "POST", "/p", b"x", now=1000.0)) == "a replayed request"
    assert verifier.check("s", "POST", "/p", b"x", sign("s", "POST", "/p", b"x", now=1000.5)) is None
    assert verifier.check("s", "POST", "/p", b"y", signed[1][0]) == "a wrong signature"   # another body
    now[0] = 1000.0 + 301
    assert "off the driver's clock" in verifier.check("s", "POST", "/p", b"x", sign("s", "POST", "/p", b"x",
                                                                                      now=1000.0))
    headers = dict(sign("s", "POST", "/p", b"x", now=now[0]))
    headers[NONCE_HEADER] = "another"
    assert verifier.check("s", "POST", "/p", b"x", headers) == "a wrong signature"


def run_gate(values, gate):
    calls = []

    async def f(v):
        calls.append(v)
        await asyncio.sleep(0)
        return v

    async def main():
        try:
            return await operator_run(f, values, budget=gate, capacity=4)
        finally:
            await gate.aclose()

    return run(main()).values(), calls


def test_lost_replies_of_the_driver_are_retried_and_answered_once():
    from aiospark import Budget

    budget = Budget(100)
    ticket = pickle.loads(pickle.dumps(budget))
    upstream = urllib.parse.urlsplit(ticket.address)
    # every lease and release reaches the ledger, which acts on it; its first reply is lost
    with ReplyDropper(upstream.port, drop=lambda request, reply: http_body(request)) as proxy:
        ticket.address = f"http://127.0.0.1:{proxy.port}{upstream.path}"
        out, calls = run_gate(range(10), ticket.gate("1.0.0"))
    assert len(out) == 10 and len(calls) == 10
    assert proxy.dropped == 2, proxy.dropped              # the lease and the release, each sent twice
    assert budget.spent == 10 and budget.left == 90 and budget.started == 10, budget


def _evalsha_answer(request, reply):
    """The first non-error reply to each EVALSHA/EVAL is lost (a NOSCRIPT error is passed on)."""
    if (b"EVALSHA" in request or b"EVAL" in request) and not reply.startswith(b"-"):
        return request
    return None


def test_a_redis_script_run_twice_for_one_request_counts_once():
    with RedisServer() as server:
        import redis as redis_py

        key = budget_key(f"replay-{uuid.uuid4().hex}")
        direct = redis_py.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
        with ReplyDropper(server.port, drop=_evalsha_answer) as proxy:
            source = RedisLeases(f"redis://127.0.0.1:{proxy.port}/0", None, None, key=key, limit=100)

            async def main():
                granted, left = await source.lease(need=1, want=10, used=0)
                assert (granted, left) == (10.0, 90.0)
                assert float(direct.get(key)) == 10        # redis-py sent it twice; it counted once
                await source.release(units=7, used=3, refused=0)
                assert float(direct.get(key)) == 3
                return proxy.dropped

            assert asyncio.run(main()) == 2, proxy.dropped
        assert direct.hgetall(f"{key}:held") == {}          # the task ended: nothing held under its name
        direct.close()


def test_a_redis_release_never_gives_back_spent_units():
    with RedisServer() as server:
        import redis as redis_py

        key = budget_key(f"release-{uuid.uuid4().hex}")
        direct = redis_py.Redis(host="127.0.0.1", port=server.port, decode_responses=True)

        async def main():
            source = RedisLeases(server.url, None, None, key=key, limit=100, task="t")
            await source.lease(need=1, want=50, used=0)
            await source.release(units=40, used=10, refused=0)
            again = RedisLeases(server.url, None, None, key=key, limit=100, task="t")
            await again.release(units=40, used=10, refused=0)   # the same task's release, a new request

        asyncio.run(main())
        assert float(direct.get(key)) == 10
        direct.close()


@pytest.mark.parametrize("bad", ["", "host:port", "[::1", "h:70000"])
def test_a_malformed_collector_address_is_refused_naming_the_variable(monkeypatch, bad):
    from aiospark.spark.endpoint import configured_host

    monkeypatch.setenv("AIOSPARK_METRICS_HOST", "127.0.0.1")
    monkeypatch.setenv("AIOSPARK_METRICS_BIND", bad)
    if not bad:
        assert configured_host() == ("127.0.0.1", "127.0.0.1")
        return
    with pytest.raises(ValueError, match="AIOSPARK_METRICS_BIND"):
        configured_host()


def test_fractional_costs_give_back_exactly_what_the_task_did_not_use():
    ledger = Ledger(10)
    granted, _left = ledger.lease("t", need=0.1, want=5)
    used = 0.0
    for _ in range(7):
        used += 0.1
    assert ledger.release("t", granted - used, used=used) == granted - used
    assert ledger.spent == pytest.approx(0.7) and ledger.holders == 0
