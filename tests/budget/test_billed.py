"""Budgets that count billed usage (aiospark.BilledCost), the pure parts: the ledger charges a
task's calls billed beyond its leases (out of what is free, then as ``overdrawn``) and takes back
estimates above the bill, once per request; a gate reconciles each attempt with the usage its own
Task records (never with usage recorded in another Task, e.g. a batcher's request for many rows);
a Redis pot (a real redis-server) does the same in its release script."""
from __future__ import annotations

import asyncio

import pytest

import aiospark
from aiospark.budget import BilledCost, LeaseGate, LeaseSource, Ledger
from aiospark.core.usage import record_usage
from tests.core._util import run


class LedgerSource(LeaseSource):
    """A task's leases straight from a Ledger in this process (what the HTTP endpoint does)."""

    def __init__(self, ledger, task="t"):
        self.ledger, self.task, self.where = ledger, task, "a ledger in this process"

    async def lease(self, need, want, used):
        await asyncio.sleep(0)
        return self.ledger.lease(self.task, need, want, used)

    async def release(self, units, used, refused, refunded=0.0):
        self.ledger.release(self.task, units, used, refused, refunded=refunded)


def test_a_task_billed_beyond_its_lease_is_charged_once_out_of_what_is_free():
    ledger = Ledger(100)
    assert ledger.lease("a", 10, 10) == (10.0, 90.0)
    assert ledger.release("a", 0, used=30, request="r1") == 0.0   # billed 30 on a lease of 10
    assert (ledger.spent, ledger.left, ledger.overdrawn) == (30.0, 70.0, 0.0)
    assert ledger.release("a", 0, used=30, request="r1") == 0.0   # a replay: nothing moves
    assert ledger.release("a", 0, used=30, request="r2") == 0.0   # a replay the ledger forgot: neither
    assert (ledger.spent, ledger.left) == (30.0, 70.0)


def test_billed_beyond_the_limit_shows_as_overdrawn_and_in_spent():
    ledger = Ledger(10)
    assert ledger.lease("a", 10, 10) == (10.0, 0.0)
    ledger.release("a", 0, used=25)
    assert (ledger.spent, ledger.left, ledger.overdrawn) == (25.0, 0.0, 15.0)


def test_estimates_above_the_bill_come_back_to_the_pot():
    ledger = Ledger(100)
    ledger.lease("a", 10, 10)
    assert ledger.release("a", 4, used=10, refunded=4, request="r") == 4.0  # estimated 10, billed 6
    assert (ledger.spent, ledger.left, ledger.started) == (6.0, 94.0, 6.0)
    assert ledger.release("a", 4, used=10, refunded=4, request="r2") == 0.0  # never twice
    assert ledger.spent == 6.0
    with pytest.raises(ValueError, match="refunded"):
        ledger.release("b", 0, used=1, refunded=float("nan"))


async def _call(gate, row, billed, where="here"):
    """One attempt as the operator makes it: take, then the call records its usage."""
    granted = gate.take(row)
    if not isinstance(granted, bool):
        granted = await granted
    if not granted:
        return False
    await asyncio.sleep(0)
    if where == "here":
        record_usage(total_tokens=billed)
    else:  # a request made in another Task (a batcher's): no one row's bill
        await asyncio.get_running_loop().create_task(_record(billed))
    return True


async def _record(billed):
    record_usage(total_tokens=billed)


def test_a_gate_charges_the_bill_not_the_estimate_both_ways():
    ledger = Ledger(1000)
    cost = BilledCost(lambda row: row["estimate"], usage="total_tokens")

    async def main():
        gate = LeaseGate(LedgerSource(ledger), cost)
        rows = [({"estimate": 10}, 4), ({"estimate": 10}, 25), ({"estimate": 5}, 5)]
        assert all(await asyncio.gather(*(asyncio.create_task(_call(gate, row, b)) for row, b in rows)))
        assert (gate.used, gate.refunded) == (10 + 10 + 5 + 15, 6)
        await gate.aclose()

    run(main())
    assert (ledger.spent, ledger.left, ledger.started) == (34.0, 966.0, 34.0)  # 4 + 25 + 5 billed


def test_usage_recorded_in_another_task_leaves_the_estimate_charged():
    ledger = Ledger(1000)

    async def main():
        gate = LeaseGate(LedgerSource(ledger), BilledCost(lambda row: 10, usage="total_tokens"))
        assert await asyncio.create_task(_call(gate, {}, 3, where="elsewhere"))
        assert await asyncio.create_task(_call(gate, {}, 99, where="elsewhere"))
        await gate.aclose()

    run(main())
    assert ledger.spent == 20.0


def test_a_gate_in_debt_stops_and_the_overshoot_is_the_calls_in_flight():
    """Limit 100, estimates of 10 billed 40: the calls in flight when the pot ran dry are billed,
    the rest is refused. Billed <= limit + (in flight) * (40 - 10)."""
    ledger = Ledger(100)
    in_flight = 4

    async def main():
        gate = LeaseGate(LedgerSource(ledger), BilledCost(lambda row: 10, usage="total_tokens"))
        started = 0
        for _ in range(10):  # waves of `in_flight` concurrent calls
            done = await asyncio.gather(*(asyncio.create_task(_call(gate, {}, 40)) for _ in range(in_flight)))
            started += sum(done)
        await gate.aclose()
        return started

    started = run(main())
    assert 0 < started < 40
    assert ledger.spent == 40.0 * started
    assert ledger.spent <= 100 + in_flight * (40 - 10)
    assert ledger.overdrawn == ledger.spent - 100 if ledger.spent > 100 else ledger.overdrawn == 0


def test_billed_cost_arguments_are_checked():
    with pytest.raises(TypeError, match="function of the row"):
        BilledCost(5, usage="total_tokens")
    with pytest.raises(ValueError, match="record_usage"):
        BilledCost(lambda row: 1, usage="")
    assert "total_tokens" in repr(BilledCost(lambda row: 1, usage="total_tokens"))
    assert aiospark.BilledCost is BilledCost



def test_a_redis_release_charges_a_debt_once_and_takes_estimates_back():
    import uuid

    import redis as redis_py

    from aiospark.connectors.redis.budget_leases import RedisLeases, budget_key
    from tests.support.servers import RedisServer

    with RedisServer() as server:
        direct = redis_py.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
        debt, refund = budget_key(f"debt-{uuid.uuid4().hex}"), budget_key(f"refund-{uuid.uuid4().hex}")

        async def main():
            source = RedisLeases(server.url, None, None, key=debt, limit=100, task="t")
            assert (await source.lease(need=10, want=10, used=0))[0] == 10.0
            await source.release(units=0, used=30, refused=0)               # billed 30 on a lease of 10
            again = RedisLeases(server.url, None, None, key=debt, limit=100, task="t")
            await again.release(units=0, used=30, refused=0)                # a replay it forgot: nothing
            other = RedisLeases(server.url, None, None, key=refund, limit=100, task="t")
            await other.lease(need=10, want=10, used=0)
            await other.release(units=4, used=10, refused=0, refunded=4)    # estimated 10, billed 6

        asyncio.run(main())
        assert (float(direct.get(debt)), float(direct.get(refund))) == (30.0, 6.0)
        direct.close()
