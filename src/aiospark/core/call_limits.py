"""What each attempt of a call waits for and is charged before it starts: the rate limit (with
the call's ``cost``), a ``Retry-After`` pause of the whole limit, and the budget.

:class:`CallLimits` is a part of :class:`~aiospark.core.calls.Caller` (a mixin: the attempt loop
calls these on its hot path, as methods of the caller, without a second object to go through).
The caller sets, from ``make_limiter(rate_limit)``, ``_reserve`` (a token bucket: how long to wait),
else ``_acquire`` (a limiter to await), ``_cost``, ``_pause`` and ``_paused_for``, and ``budget``.

Example (what an attempt does, in :meth:`~aiospark.core.calls.Caller._attempts`)::

    cost = caller.cost_of(value)               # CostError for a cost function that raises
    await caller._wait_for_rate_limit(cost)
    await caller._spend(value)                 # BudgetExhausted once the budget is spent
"""
from __future__ import annotations

import asyncio
import math
import numbers
from collections.abc import Callable
from typing import Any

from .durable import BudgetExhausted, BudgetGate
from .errors import describe_input, error_line
from .metrics import OperatorMetrics


class CostError(ValueError):
    """The rate limit's ``cost(value)`` raised or gave no finite number >= 0 for this input."""

    aiospark_not_an_answer = True  # no call was made: never a row's recorded answer


class CallLimits:
    """The rate limit, cost and budget of a :class:`~aiospark.core.calls.Caller`'s attempts
    (see the module docstring); the caller's ``__init__`` sets the state declared here."""

    metrics: OperatorMetrics
    budget: BudgetGate | None
    _reserve: Any
    _acquire: Any
    _cost: Callable[[Any], float] | None
    _pause: Callable[[float], None] | None
    _paused_for: Callable[[], float] | None

    async def _wait_for_rate_limit(self, cost: float | None) -> None:
        if self._reserve is not None:
            delay = self._reserve() if cost is None else self._reserve(cost)
            if delay > 0.0:
                self.metrics.rate_limited += 1
                await asyncio.sleep(delay)
                # a Retry-After seen while this call slept holds it back too
                # polls a clock, not an event (ASYNC110): each round sleeps the limiter's own delay
                while self._paused_for is not None and self._paused_for() > 0.0:  # noqa: ASYNC110
                    await asyncio.sleep(self._reserve() if cost is None else self._reserve(cost))
        elif self._acquire is not None:
            if await (self._acquire() if cost is None else self._acquire(cost)):
                self.metrics.rate_limited += 1

    async def _spend(self, value: Any) -> None:
        """Charge this attempt to the budget, or raise :class:`BudgetExhausted` (never retried)."""
        budget = self.budget
        if budget is None:  # no budget: nothing to charge
            return
        granted = budget.take(value)
        if not isinstance(granted, bool):
            granted = await granted
        if not granted:
            refusal = getattr(budget, "refusal", None)
            raise BudgetExhausted(refusal(value) if callable(refusal) else
                                  "the budget is spent: this row's call was not started (rerun with a "
                                  "larger aiospark.Budget; with a journal, only the rows not done are called)")

    def cost_of(self, value: Any) -> float:
        """What one attempt for ``value`` is charged against the rate limit (its ``cost``)."""
        cost_fn = self._cost
        if cost_fn is None:  # a limit without a cost function charges 1 per call
            return 1.0
        try:
            cost = cost_fn(value)
        except Exception as exc:
            raise CostError(f"the rate limit's cost function {_name(cost_fn)} raised {error_line(exc)}") from exc
        if isinstance(cost, bool) or not isinstance(cost, numbers.Real) or not 0 <= float(cost) < math.inf:
            raise CostError(f"the rate limit's cost function {_name(cost_fn)} must return a finite "
                            f"number >= 0, got {describe_input(cost, 80)}")
        return float(cost)

    def _pause_for(self, exc: Exception) -> None:
        """A failed attempt that says when to come back (``retry_after`` seconds, e.g. a 429's
        Retry-After) pauses the whole limit: the service is telling every caller, not this one."""
        retry_after = getattr(exc, "retry_after", None)
        pause = self._pause
        if pause is not None and isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool) \
                and retry_after > 0:
            pause(float(retry_after))


def _name(function: Any) -> str:
    return repr(getattr(function, "__qualname__", None) or type(function).__name__)
