"""Budgets: at most ``limit`` units of calls start across a whole job (``aiospark.Budget``).

The pure parts, with no pyspark: the :class:`~.ledger.Ledger` that holds the pot (in the driver),
the per-task :class:`~.gate.LeaseGate` that the operator asks before every attempt, and where a
gate's leases come from (a :class:`~.source.LeaseSource`: :class:`~.http_leases.HttpLeases`, the
driver over HTTP, or :class:`aiospark.connectors.redis.budget_leases.RedisLeases`, a counter shared
by several jobs, whose :class:`~.source.SharedPot` a Budget ships). ``aiospark.Budget`` itself,
which ties them to the driver's HTTP collector, is in :mod:`aiospark.spark.budget`.

Example (what a task does)::

    gate = LeaseGate(HttpLeases(address, budget_id, secret, task="3.0.0"))
    op = AsyncWaitOperator(fetch, out.append, budget=gate)
"""
from .billed import BilledCost
from .gate import BudgetCostError, BudgetUnavailable, LeaseGate
from .ledger import Ledger, check_cost, check_limit
from .source import LeaseSource, SharedPot

__all__ = ["BilledCost", "BudgetCostError", "BudgetUnavailable", "LeaseGate", "LeaseSource", "Ledger", "SharedPot", "check_cost",
           "check_limit"]
