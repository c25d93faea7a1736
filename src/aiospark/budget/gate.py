"""One task's side of a budget: a :class:`~aiospark.core.durable.BudgetGate` that spends from a
lease and asks its :class:`LeaseSource` (the driver's ledger over HTTP, or Redis) for more.

``take(value)`` is asked before every attempt (retries included). It answers True at once while
the task's lease covers the attempt's cost; else it returns an awaitable that waits for one refill
(a single round trip in flight per task: the calls that find the lease empty queue behind it, first
come first served). A refused refill means the pot cannot cover the next call: that call, and every
later call of the task that costs more than what the pot had left, is refused without asking again
(a task does not hammer the driver with 1,500 refusals). Units that other tasks give back after
that are not seen by this task: the job may spend a little less than its limit, never more.

A task that cannot reach its source fails the waiting calls, and every later one, with
:class:`BudgetUnavailable`: no call ever starts without budget.

Example::

    gate = LeaseGate(HttpLeases(address, budget_id, secret, task="3.0.0"), cost=lambda row: row["tokens"])
    op = AsyncWaitOperator(fetch, out.append, budget=gate)
    ...
    await gate.aclose()       # the task ended: unused units go back
"""
from __future__ import annotations

import asyncio
import logging
import math
import numbers
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..core.errors import error_line
from ..core.usage import bill_attempt
from .billed import BilledCost
from .source import LeaseSource

__all__ = ["BudgetCostError", "BudgetUnavailable", "LeaseGate"]

log = logging.getLogger("aiospark")

#: a lease aims to last about this long at the task's spending rate
LEASE_SECONDS = 1.0
#: ... and is at least this big (the ledger caps it by the task's share of what is left)
START_LEASE = 64.0


class BudgetUnavailable(RuntimeError):
    """The task could not get units from the budget's ledger (driver or Redis): no call started."""


class BudgetCostError(ValueError):
    """The budget's ``cost(row)`` raised or gave no finite number >= 0 for this row."""


class LeaseGate:
    """A task's budget gate (see the module docstring). Used on one event loop."""

    def __init__(self, source: LeaseSource, cost: Callable[[Any], Any] | None = None,
                 batched: bool = False, count: Callable[[Any], int] | None = None, limit: float | None = None):
        self.source = source
        #: the whole budget's limit, when known: a call estimated above it can never start
        self.limit = limit
        self._cost = cost
        self._batched = batched
        #: the rows of a batch call whose value is not a list (a columnar batch; only without ``cost``)
        self._count = count
        self._lease = 0.0
        self.used = 0.0          # units of the attempts let through, and billed beyond their estimates
        self.refunded = 0.0      # units given back to the lease: estimates above what was billed
        #: a cost that reconciles with the billed usage (see aiospark.budget.billed)
        self._billed = cost if isinstance(cost, BilledCost) else None
        self.refused = 0         # attempts refused (budget spent)
        self.round_trips = 0
        self._waiting: deque[tuple[float, asyncio.Future[bool]]] = deque()
        self._refill: asyncio.Task[None] | None = None
        self._left_seen: float | None = None  # what the pot had left when it refused us
        self._broken: str | None = None       # why the source cannot be reached
        self._first_grant: float | None = None
        self._closed = False

    # ------------------------------------------------------------------ the gate
    def take(self, value: Any) -> bool | Awaitable[bool]:
        cost = self.cost_of(value)
        if self._billed is not None:  # the attempt's billed usage settles its estimate (if it goes)
            bill_attempt(_Attempt(self, self._billed, cost))
        if self._broken is not None:
            raise BudgetUnavailable(self._broken)
        if cost == 0.0:
            return True  # costs nothing: spends nothing
        if not self._waiting and cost <= self._lease + _slack(cost):
            self._lease -= cost
            self.used += cost
            return True
        if self._hopeless(cost):
            self.refused += 1
            return False
        return self._wait(cost)

    def cost_of(self, value: Any) -> float:
        """Units of one attempt for ``value`` (a batch: the sum over its rows; no cost: 1 a row)."""
        if self._batched and isinstance(value, list):
            return float(len(value)) if self._cost is None else sum(self._one_cost(self._cost, v) for v in value)
        if self._count is not None and self._cost is None:
            return float(self._count(value))
        return 1.0 if self._cost is None else self._one_cost(self._cost, value)

    @staticmethod
    def _one_cost(cost_fn: Callable[[Any], Any], value: Any) -> float:
        name = repr(getattr(cost_fn, "__qualname__", None) or type(cost_fn).__name__)
        try:
            cost = cost_fn(value)
        except Exception as exc:
            raise BudgetCostError(f"the budget's cost function {name} raised {error_line(exc)}") from exc
        if isinstance(cost, bool) or not isinstance(cost, numbers.Real) or not 0 <= float(cost) < math.inf:
            shown = repr(cost)
            raise BudgetCostError(f"the budget's cost function {name} must return a finite number >= 0, "
                                  f"got {shown if len(shown) <= 80 else shown[:77] + '...'}")
        return float(cost)

    def settle(self, delta: float) -> None:
        """A call was billed ``delta`` units more than its estimate (less, when negative): charge
        it to the lease (which may go below 0: the next refill covers that debt first, and a
        task ending in debt reports it, see :meth:`Ledger.release`), or give it back."""
        if delta > 0.0:
            self._lease -= delta
            self.used += delta
        elif delta < 0.0:
            self._lease -= delta
            self.refunded -= delta
            if self._waiting:
                self._serve()

    def _hopeless(self, cost: float) -> bool:
        return self._left_seen is not None and cost > self._lease + self._left_seen + _slack(cost)

    def refusal(self, value: Any) -> str:
        """Why the attempt for ``value`` was refused, for its error."""
        try:
            cost = self.cost_of(value)
        except Exception:  # (its cost was computed once already; here only for the message)
            cost = None
        if cost is not None and self.limit is not None and cost > self.limit + _slack(cost):
            return (f"this row's call is estimated at {cost:g} units, more than the whole budget of {self.limit:g}: "
                    "it was not started (raise the Budget's limit, or lower the estimate, e.g. max_tokens)")
        return ("the budget is spent: this row's call was not started (rerun with a larger aiospark.Budget; with a "
                "journal, only the rows not done are called)")

    async def _wait(self, cost: float) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._waiting.append((cost, future))
        if self._refill is None or self._refill.done():
            self._refill = loop.create_task(self._refill_loop())
        return await future

    def _serve(self) -> None:
        """Hand the lease to the waiting calls in order; refuse those the pot cannot cover."""
        waiting = self._waiting
        while waiting:
            cost, future = waiting[0]
            if future.done():  # cancelled while waiting (its deadline): it spends nothing
                waiting.popleft()
            elif cost <= self._lease + _slack(cost):
                waiting.popleft()
                self._lease -= cost
                self.used += cost
                future.set_result(True)
            elif self._hopeless(cost):
                waiting.popleft()
                self.refused += 1
                future.set_result(False)
            else:
                return

    async def _refill_loop(self) -> None:
        while True:
            self._serve()
            if not self._waiting or self._closed:
                return
            need = self._waiting[0][0] - self._lease
            try:
                self.round_trips += 1
                granted, left = await self.source.lease(need, self._want(need), self.used)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._broken = (f"could not get budget units from {self.source.where} ({type(exc).__name__}: "
                                f"{exc}); no call starts without budget")
                for _cost, future in self._waiting:
                    if not future.done():
                        future.set_exception(BudgetUnavailable(self._broken))
                self._waiting.clear()
                return
            if granted >= need:
                if self._first_grant is None:
                    self._first_grant = time.monotonic()
                self._lease += granted
            else:  # refused: the pot has ``left``, less than the next call costs
                self._lease += granted  # (0: a source never grants less than asked)
                self._left_seen = left if left < need else 0.0  # (a confused source: refuse, never loop)

    def _want(self, need: float) -> float:
        """About :data:`LEASE_SECONDS` of this task's spending, at least :data:`START_LEASE`."""
        want = START_LEASE
        if self._first_grant is not None:
            elapsed = time.monotonic() - self._first_grant
            if elapsed > 0:
                want = max(want, self.used / elapsed * LEASE_SECONDS)
        return max(want, need)

    # ------------------------------------------------------------------ the end
    async def aclose(self) -> None:
        """The task ended: stop refilling and give the unused units back (a failure to give them
        back is logged: those units stay spent, the cap holds)."""
        self._closed = True
        refill, self._refill = self._refill, None
        if refill is not None and not refill.done():
            refill.cancel()
            await asyncio.wait([refill])
        for _cost, future in self._waiting:
            if not future.done():
                future.cancel()
        self._waiting.clear()
        units, self._lease = max(0.0, self._lease), 0.0  # (a debt is used - refunded beyond the leases)
        try:
            if self.refunded:  # (only a BilledCost gives back: a source of plain costs takes three)
                await self.source.release(units, self.used, self.refused, refunded=self.refunded)
            else:
                await self.source.release(units, self.used, self.refused)
        except Exception as exc:
            log.warning("aiospark: could not give %s unused budget units back to %s (%s: %s); they stay "
                        "spent", units, self.source.where, type(exc).__name__, exc)


def _slack(cost: float) -> float:
    """Float crumbs: three calls of 0.1 fit a budget of 0.3 (0.1 + 0.1 + 0.1 is 0.30000000000000004)."""
    return 1e-9 * max(1.0, abs(cost))


class _Attempt:
    """One attempt's charge under a :class:`BilledCost`: its billed usage replaces its estimate."""

    __slots__ = ("gate", "cost", "estimate", "billed")

    def __init__(self, gate: LeaseGate, cost: BilledCost, estimate: float):
        self.gate = gate
        self.cost = cost
        self.estimate = estimate
        self.billed = False

    def bill(self, amounts: Mapping[str, float]) -> None:
        billed = self.cost.billed(amounts)
        if billed is None or not 0.0 <= billed < math.inf:
            return
        # the first bill replaces the estimate; a second request of the same attempt adds to it
        delta = billed if self.billed else billed - self.estimate
        self.billed = True
        self.gate.settle(delta)
