"""What an ``aiospark.Budget`` becomes inside a pickled task: where to get leases, how to price a
row, and the Budget's secret (never shown). Each task makes its own gate from it.

Example (what the Spark layer does in each task)::

    gate = ticket.gate(task="3.1.0", batched=False)
    ... run the operator with budget=gate ...
    await gate.aclose()
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from .gate import LeaseGate
from .http_leases import HttpLeases
from .source import LeaseSource, SharedPot

__all__ = ["BudgetTicket"]


class BudgetTicket:
    """A Budget on a worker (see the module docstring)."""

    def __init__(self, budget_id: str, name: str, limit: float, cost: Callable[[Any], Any] | None,
                 address: str | None, secret: str,
                 pot: SharedPot | None = None):
        self.budget_id = budget_id
        self.name = name
        self.limit = limit
        self.cost = cost
        self.address = address
        self._secret = secret
        self.pot = pot   # a pot shared by several jobs (Redis), else the driver's ledger at ``address``

    def __repr__(self) -> str:
        where = self.pot.shown if self.pot is not None else self.address
        return f"<aiospark budget {self.name!r} limit={self.limit:g} at {where}>"

    def gate(self, task: str, batched: bool = False, count: Callable[[Any], int] | None = None) -> LeaseGate:
        """A new gate for one task attempt (its own lease); ``count``: see :class:`LeaseGate`."""
        attempt = f"{task}/{uuid.uuid4().hex[:8]}"  # one name per gate: what it holds is kept under it
        source: LeaseSource
        if self.pot is not None:
            source = self.pot.source(self.limit, attempt)
        else:
            source = HttpLeases(self.address or "", self.budget_id, self._secret, attempt)
        return LeaseGate(source, self.cost, batched, count, self.limit)
