"""The budget's pure parts: the ledger never hands out more than its limit (threads racing for
leases and giving units back), a gate spends from its lease and refills from a real ledger (in
process or over the driver's real HTTP collector), refuses once the pot is spent without asking
again, prices rows with cost(row) (its errors are the row's), and fails with BudgetUnavailable when
its source cannot be reached -- no call starts without budget."""
from __future__ import annotations

import asyncio
import pickle
import random
import threading

import pytest

from aiospark.budget import BudgetCostError, BudgetUnavailable, LeaseGate, LeaseSource, Ledger
from aiospark.budget.http_leases import HttpLeases
from tests.core._util import run
from tests.core._util import run_operator as operator_run


class LedgerSource(LeaseSource):
    """A task's leases straight from a Ledger in this process (what the HTTP endpoint does)."""

    def __init__(self, ledger, task="t"):
        self.ledger, self.task, self.where = ledger, task, "a ledger in this process"
        self.asked = 0

    async def lease(self, need, want, used):
        self.asked += 1
        await asyncio.sleep(0)  # a round trip: other calls queue behind it
        return self.ledger.lease(self.task, need, want, used)

    async def release(self, units, used, refused):
        self.ledger.release(self.task, units, used, refused)


def test_concurrent_leases_never_exceed_the_limit():
    ledger = Ledger(10_000)
    held = {}
    lock = threading.Lock()
    over = []

    # `held` never runs ahead of the ledger: a release is written down before it is made, a lease
    # after it is granted, so sum(held) <= what the ledger has handed out at every instant.
    def task(name, seed):
        rng = random.Random(seed)
        mine = 0.0
        for _ in range(2000):
            if rng.random() < 0.2 and mine:
                back = rng.uniform(0, mine)
                mine -= back
                with lock:
                    held[name] = mine
                assert ledger.release(name, back) == pytest.approx(back)
            else:
                granted, _left = ledger.lease(name, rng.choice([1, 2, 5]), rng.choice([1, 64, 500, 5000]))
                mine += granted
                with lock:
                    held[name] = mine
            if ledger.spent > 10_000 + 1e-6:
                over.append(ledger.spent)
            with lock:
                if sum(held.values()) > 10_000 + 1e-6:
                    over.append(sum(held.values()))

    threads = [threading.Thread(target=task, args=(f"t{i}", i)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not over
    assert abs(ledger.spent - sum(held.values())) < 1e-6 and ledger.spent <= 10_000


def test_a_release_never_puts_back_more_than_the_task_holds():
    ledger = Ledger(100)
    assert ledger.lease("a", 1, 10) == (10.0, 90.0)
    assert ledger.release("a", 50) == 10.0 and ledger.release("b", 5) == 0.0
    assert ledger.left == 100 and ledger.spent == 0


def test_lease_sizes_start_small_and_share_what_is_left():
    ledger = Ledger(500)
    assert ledger.lease("a", 1, 64)[0] == 64       # min(64, 500 / 2)
    assert ledger.lease("b", 1, 64)[0] == 64       # min(64, 436 / 4)
    granted, left = ledger.lease("a", 1, 10_000)   # a fast task asks for more: its share, not the pot
    assert granted == (500 - 128) // 4 and left == 500 - 128 - granted
    assert ledger.lease("c", 400, 1)[0] == 0        # more than is left: refused, nothing taken
    assert ledger.lease("c", 1, 1)[0] == 1


@pytest.mark.parametrize("bad", [float("nan"), -1, float("inf"), "1", None, True])
def test_malformed_requests_are_refused(bad):
    with pytest.raises(ValueError):
        Ledger(10).lease("a", bad, 1)


def run_operator(function, values, gate, **kw):
    async def main():
        try:
            return await operator_run(function, values, budget=gate, capacity=kw.pop("capacity", 8), **kw)
        finally:
            await gate.aclose()

    return run(main()).values()


def test_two_gates_share_a_ledger_and_start_at_most_its_limit():
    ledger = Ledger(50)
    calls = []

    async def f(v):
        calls.append(v)
        await asyncio.sleep(0)
        return v

    gates = [LeaseGate(LedgerSource(ledger, f"t{i}")) for i in range(2)]
    outs = [run_operator(f, range(100 * i, 100 * i + 100), g, on_error=lambda v, e: [type(e).__name__])
            for i, g in enumerate(gates)]
    assert len(calls) == 50 and ledger.spent == 50 and ledger.started == 50
    assert sum(o.count("BudgetExhausted") for o in outs) == 150
    # once refused, a gate does not ask the ledger again for every row
    assert all(g.source.asked <= 10 for g in gates), [g.source.asked for g in gates]
    assert sum(g.refused for g in gates) == 150 and ledger.refused == 150


def test_unused_units_go_back_when_the_task_ends():
    ledger = Ledger(1000)

    async def f(v):
        return v

    gate = LeaseGate(LedgerSource(ledger))
    assert len(run_operator(f, range(10), gate)) == 10
    assert ledger.spent == 10 and ledger.left == 990 and ledger.holders == 0


def test_cost_prices_rows_and_its_errors_are_the_rows_errors():
    ledger = Ledger(100)

    def cost(v):
        if v == 3:
            raise KeyError("tokens")
        return -1 if v == 4 else 10

    async def f(v):
        return v

    gate = LeaseGate(LedgerSource(ledger), cost=cost)
    out = run_operator(f, range(20), gate, capacity=1, on_error=lambda v, e: [f"{type(e).__name__}: {e}"])
    assert out[:3] == [0, 1, 2] and "cost function" in out[3] and "KeyError" in out[3]
    assert out[4].startswith("BudgetCostError") and "finite number >= 0, got -1" in out[4]
    assert out[5:12] == list(range(5, 12))    # 100 units: 10 rows of 10 (0-2 and 5-11)
    assert all(o.startswith("BudgetExhausted") for o in out[12:]) and ledger.spent == 100
    with pytest.raises(BudgetCostError):
        LeaseGate(LedgerSource(ledger), cost=cost).take(3)


def test_a_batch_costs_the_sum_over_its_rows():
    gate = LeaseGate(LedgerSource(Ledger(10)), cost=lambda row: row * 2, batched=True)
    assert gate.cost_of([1, 2, 3]) == 12
    assert LeaseGate(LedgerSource(Ledger(10)), batched=True).cost_of([1, 2, 3]) == 3


def test_an_unreachable_driver_fails_rows_and_never_calls():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    calls = []

    async def f(v):
        calls.append(v)
        return v

    gate = LeaseGate(HttpLeases(f"http://127.0.0.1:{port}/budget", "id", "secret", "t"))
    out = run_operator(f, range(5), gate, on_error=lambda v, e: [f"{type(e).__name__}: {e}"])
    assert calls == [] and len(out) == 5
    assert all(o.startswith("BudgetUnavailable: could not get budget units from the driver's budget ledger")
               and "no call starts without budget" in o for o in out), out
    assert "secret" not in repr(gate.source)


def test_leases_over_the_drivers_http_collector():
    from aiospark.spark.budget import Budget  # the driver side: the ledger behind the collector

    budget = Budget(30)
    ticket = pickle.loads(pickle.dumps(budget))  # what a task receives
    calls = []

    async def f(v):
        calls.append(v)
        return v

    out = run_operator(f, range(50), ticket.gate("1.0.0"), on_error=lambda v, e: [type(e).__name__])
    assert len(calls) == 30 and out.count("BudgetExhausted") == 20
    assert budget.spent == 30 and budget.left == 0 and budget.started == 30 and budget.refused == 20
    assert budget._secret not in repr(ticket) and budget._secret not in repr(budget)
    with pytest.raises(BudgetUnavailable):
        forged = pickle.loads(pickle.dumps(budget))
        forged._secret = "0" * 32
        gate = forged.gate("x")
        asyncio.run(_take(gate))


async def _take(gate):
    granted = gate.take(1)
    return granted if isinstance(granted, bool) else await granted


def test_the_collector_refuses_malformed_lease_requests_without_a_crash():
    import json
    import urllib.error
    import urllib.request

    from aiospark.budget.signing import sign
    from aiospark.spark.budget import Budget

    budget = Budget(10)
    ticket = pickle.loads(pickle.dumps(budget))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for body, code in ((["not", "a", "dict"], 400), ({"id": ["x"], "op": "lease"}, 400),
                       ({"id": "not-a-budget", "op": "lease"}, 403),
                       ({"id": budget.id, "task": "t", "request": "r1", "op": "lease", "need": "1", "want": 1}, 400),
                       ({"id": budget.id, "task": "t", "op": "lease", "need": 1, "want": 1}, 400),  # no request id
                       ({"id": budget.id, "task": "t", "request": "r2", "op": "spend"}, 400)):
        data = json.dumps(body).encode()
        request = urllib.request.Request(ticket.address, data=data, method="POST",
                                         headers=sign(budget._secret, "POST", "/budget", data))
        with pytest.raises(urllib.error.HTTPError) as info:
            opener.open(request, timeout=5)
        assert info.value.code == code, body
    assert budget.left == 10


def test_a_task_that_dies_keeps_its_lease_and_the_cap_still_holds():
    ledger = Ledger(100)
    calls = []

    async def f(v):
        calls.append(v)
        return v

    dead = LeaseGate(LedgerSource(ledger, "dead"))
    assert run(_take(dead)) is True            # leased (its share), then the task dies: no aclose()
    held = ledger.spent
    assert held >= 1
    out = run_operator(f, range(200), LeaseGate(LedgerSource(ledger, "alive")),
                       on_error=lambda v, e: [type(e).__name__])
    assert len(calls) == 100 - held and ledger.spent == 100
    assert out.count("BudgetExhausted") == 200 - len(calls)


def test_a_redis_password_never_shows(monkeypatch):
    from aiospark.spark.budget import Budget

    monkeypatch.setenv("REDIS_PASSWORD", "from-env-s3cret")
    shown = Budget(5, redis="redis://:url-s3cret@127.0.0.1:1/0", name="n")
    ticket = pickle.loads(pickle.dumps(shown))
    gate = ticket.gate("t")
    for text in (repr(shown), str(shown), repr(ticket), repr(gate.source)):
        assert "s3cret" not in text, text
    with pytest.raises(ConnectionError) as info:
        _ = shown.spent    # nobody listens on port 1
    assert "s3cret" not in str(info.value) and "127.0.0.1:1" in str(info.value)
    env_only = Budget(5, redis="redis://127.0.0.1:1/0", name="n")
    assert env_only._redis._password.reveal() == "from-env-s3cret" and "s3cret" not in repr(env_only)
