"""A budget cost that charges an estimate before a call and reconciles with what was billed after it.

``Budget(limit, cost=BilledCost(estimate, usage="total_tokens"))``: before each attempt the task's
gate charges ``estimate(row)``; when the call then records the billed amount with
``record_usage(total_tokens=...)`` (the OpenAI connectors do, from the answer's ``usage``), the gate
charges the difference ``billed - estimate`` to the same pot (or gives it back when the estimate
was above). So the pot counts what the provider billed, not what was guessed.

The bound: a call starts only when the pot covers its estimate, and its difference is settled when
it ends; so the billed total goes over ``limit`` by at most the sum of ``billed - estimate`` over
the calls in flight when the pot ran dry (0 when every estimate is an upper bound, e.g. prompt
estimate + ``max_tokens``). An attempt that records no billed amount (a failure, a timeout) keeps
its estimate. Only usage recorded in the call's own Task reconciles (a request shared by several
rows, e.g. batched embeddings, is no one row's bill: their estimates stand).

Example::

    cost = BilledCost(lambda row: len(row["text"]) // 4 + 64, usage="total_tokens")
    budget = aiospark.Budget(1_000_000, cost=cost)    # 1M billed tokens, at most (+ the bound)
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["BilledCost"]


class BilledCost:
    """``cost=`` of a Budget that reconciles (see the module docstring): ``estimate(row)`` before
    a call, the call's recorded ``usage`` amount after it."""

    def __init__(self, estimate: Callable[[Any], Any], usage: str):
        if not callable(estimate):
            raise TypeError(f"BilledCost(estimate=...) must be a function of the row giving the units charged "
                            f"before the call, got {type(estimate).__name__}")
        if not isinstance(usage, str) or not usage:
            raise ValueError(f"BilledCost(usage=...) must name the amount the call records with record_usage "
                             f"(e.g. 'total_tokens' or 'cost'), got {usage!r}")
        self.estimate = estimate
        self.usage = usage
        self.__qualname__ = f"BilledCost({usage!r})"  # what a cost error names

    def __repr__(self) -> str:
        return f"BilledCost(usage={self.usage!r})"

    def __call__(self, row: Any) -> Any:
        """The units charged before the call."""
        return self.estimate(row)

    def billed(self, usage: Mapping[str, float]) -> float | None:
        """The units billed according to amounts a call recorded (None: it recorded none of them)."""
        amount = usage.get(self.usage)
        return None if amount is None else float(amount)
