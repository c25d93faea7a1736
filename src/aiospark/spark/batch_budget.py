"""A :class:`aiospark.Budget` in the batch lane: requests reserved at submit, reconciled at collect.

A batch's price is committed when it is submitted, so the budget is spent there:
:func:`~aiospark.spark.batch_lane.submit_batches` reserves each request's estimate on the driver's
ledger -- at the batch price: ``cost=fn.budget_cost()`` estimates at the live price, times the
price's batch factor -- and submits no request the pot cannot cover (those rows stay in no batch).
:func:`~aiospark.spark.batch_lane.collect_batches` then settles each ended batch once on the driver:
what its answers billed (their ``usage``, at the batch price) replaces what was reserved, and a
request the provider did not answer is given back. So the pot holds against billed usage; the
overshoot is bounded by the batch's (billed - estimate), 0 when estimates are upper bounds
(prompt estimate + ``max_tokens``). In another process (collect run by another job) nothing was
reserved there, and the billed amount is charged.

Only a driver ledger (``Budget(limit)``); a Redis pot is refused by name. ``fallback="live"`` with a
budget is refused at collect: its live calls would be charged by the operator, which cannot tell a
batch's answer (paid at submit) from a call; collect with ``on_error="row"`` and send the error rows
through ``unordered_wait(..., budget=...)``.

Example::

    budget = aiospark.Budget(5.00, cost=chat.budget_cost())         # $5, billed
    aiospark.submit_batches(df, chat, journal=j, budget=budget)    # never more than $5 submitted
    aiospark.collect_batches(df, chat, journal=j, budget=budget)   # budget.spent: what was billed
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..budget.billed import BilledCost
from ..connectors.openai.price import whole_usage
from .budget import Budget

__all__ = ["BatchBudget"]


class BatchBudget:
    """One Budget for one batch-lane function (picklable: the tasks compute the estimates)."""

    def __init__(self, budget: Any, function: Any, what: str):
        if not isinstance(budget, Budget):
            raise TypeError(f"{what}(budget=...) takes an aiospark.Budget, got {type(budget).__name__}")
        if budget._ledger is None:
            raise ValueError(f"{what}(budget=...): the batch lane reserves requests on the driver's ledger; a "
                             "Budget(redis=...) pot is not supported here: pass Budget(limit, cost=...)")
        self.budget = budget
        cost = budget.cost
        self.usage = cost.usage if isinstance(cost, BilledCost) else None
        self.factor = 1.0
        if self.usage == "cost":
            if function.price is None:
                raise ValueError(f"{what}(budget=...): a budget in money needs the function's price=")
            self.factor = function.price.factor("batch")
        self.price = function.price

    def units(self, row: Any) -> float:
        """A request's estimate at the batch price (in a task; 1 without a ``cost``)."""
        cost = self.budget.cost
        return 1.0 if cost is None else float(cost(row)) * self.factor

    def reserve(self, task: str, units: float) -> bool:
        """Take ``units`` for ``task`` (an uploaded file) from the pot, or nothing if it cannot cover them."""
        ledger = self.budget._ledger
        assert ledger is not None
        granted, _ = ledger.lease(task, units, units)
        return granted > 0 or units == 0

    def settle(self, task: str, batch_id: str, reserved: Mapping[str, float], results: Mapping[str, Any]) -> float:
        """The batch ended: replace what ``task`` reserved with what the answers billed (once per batch
        and Budget); returns the billed units."""
        billed = 0.0
        for cid, found in results.items():
            if not isinstance(found, Mapping):
                continue  # the provider did not answer it: not billed, its reservation comes back
            billed += self._billed(found, reserved.get(cid, 0.0))
        ledger = self.budget._ledger
        assert ledger is not None
        ledger.release(task, sum(reserved.values()), used=billed, request=f"batch-settle:{batch_id}")
        return billed

    def _billed(self, answer: Mapping[str, Any], estimate: float) -> float:
        if self.budget.cost is None:
            return 1.0
        if self.usage is None:  # a plain cost(row): what it said, for each request answered
            return estimate
        raw = answer.get("usage")
        usage: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        amounts = {k: float(v) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                   if isinstance(v := usage.get(k), (int, float)) and not isinstance(v, bool)
                   and 0 <= v < math.inf and float(v).is_integer()}
        if any(usage.get(k) is not None for k in ("prompt_tokens", "completion_tokens", "total_tokens")
               if k not in amounts):
            return estimate  # a count that is not a token count: the bill is unknown, the estimate stays
        amounts = whole_usage(amounts)
        details = usage.get("prompt_tokens_details")
        if isinstance(details, Mapping) and isinstance(details.get("cached_tokens"), (int, float)):
            amounts["cached_prompt_tokens"] = float(details["cached_tokens"])
        if self.usage == "cost":
            return self.price.money(amounts, "batch") if amounts else estimate
        if self.usage == "total_tokens" and "total_tokens" not in amounts and amounts:
            return amounts.get("prompt_tokens", 0.0) + amounts.get("completion_tokens", 0.0)
        return amounts.get(self.usage, estimate)
