"""A budget's lease sources behind one interface (issue 47): the driver's ledger over HTTP and a
real redis-server are both a ``LeaseSource``; a Redis budget ships a ``SharedPot`` that makes its
tasks' sources; the Redis code lives in ``connectors/redis`` and the old module is gone."""
from __future__ import annotations

import asyncio
import importlib
import pickle
import uuid

import pytest

from aiospark.budget import LeaseGate, LeaseSource, Ledger, SharedPot
from aiospark.budget.http_leases import HttpLeases
from aiospark.spark.budget import Budget
from tests.support.servers import RedisServer


def test_a_redis_budget_ships_a_pot_whose_sources_lease_from_redis():
    with RedisServer() as server:
        budget = Budget(10, redis=server.url, name=f"iface-{uuid.uuid4().hex}")
        ticket = pickle.loads(pickle.dumps(budget))
        assert isinstance(ticket.pot, SharedPot) and type(ticket.pot).__module__ == "aiospark.connectors.redis.budget_leases"
        gate = ticket.gate("1.0.0")
        assert isinstance(gate.source, LeaseSource)

        async def spend():
            taken = [await t if not isinstance(t, bool) else t for t in (gate.take(None) for _ in range(12))]
            await gate.aclose()
            return taken

        assert asyncio.run(spend()).count(True) == 10
        assert budget.spent == 10.0 and budget.left == 0.0


def test_the_drivers_ledger_over_http_is_a_lease_source():
    ticket = pickle.loads(pickle.dumps(Budget(3)))
    assert ticket.pot is None and isinstance(ticket.gate("t").source, HttpLeases)
    assert isinstance(ticket.gate("t").source, LeaseSource)


def test_a_source_that_forgets_part_of_the_interface_fails_where_it_is_made():
    class LeaseOnly(LeaseSource):
        where = "nowhere"

        async def lease(self, need, want, used):
            return 0.0, 0.0

    with pytest.raises(TypeError, match="release"):
        LeaseGate(LeaseOnly())


def test_the_budget_package_holds_no_redis_module_any_more():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("aiospark.budget.redis_leases")


def test_a_request_id_answers_only_the_operation_it_was_first_used_for():
    ledger = Ledger(10)
    assert ledger.lease("t", 1, 4, request="r1") == (4.0, 6.0)
    with pytest.raises(ValueError, match="reuses the id of a lease"):
        ledger.release("t", 4, request="r1")   # a replayed lease's id never gives units back
    assert ledger.release("t", 4, request="r2") == 4.0
    with pytest.raises(ValueError, match="reuses the id of a release"):
        ledger.lease("t", 1, 4, request="r2")
    assert ledger.left == 10.0
