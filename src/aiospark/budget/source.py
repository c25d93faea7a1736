"""Where a budget's units come from: the interfaces its implementations declare.

A :class:`LeaseSource` is one task attempt's line to the pot: the
:class:`~aiospark.budget.gate.LeaseGate` asks it for a lease when the task's units run out and
gives back what is left when the task ends. Two implement it: the driver's ledger over HTTP
(:class:`~aiospark.budget.http_leases.HttpLeases`) and a counter in Redis shared by several jobs
(:class:`aiospark.connectors.redis.budget_leases.RedisLeases`).

A :class:`SharedPot` is a pot kept outside the driver (``Budget(redis=..., name=...)``): what a
Budget ships to its tasks in place of the driver's address. It reads what every job sharing it
spent, and makes each task attempt's :class:`LeaseSource`; so the budget package never names
Redis, and the Redis code stays in :mod:`aiospark.connectors.redis`.

Both are abstract base classes (an implementation says what it implements, and one that forgets
a method fails where it is made), like the journal's stores (:mod:`aiospark.journal.store`).

Example::

    class Fixed(LeaseSource):        # a pot of 10 units for one task, as a test would write it
        where = "a fixed pot"
        def __init__(self): self.free = 10.0
        async def lease(self, need, want, used):
            granted = min(self.free, max(need, want)) if need <= self.free else 0.0
            self.free -= granted
            return granted, self.free
        async def release(self, units, used, refused, refunded=0.0): self.free += units

    gate = LeaseGate(Fixed())
"""
from __future__ import annotations

import abc

__all__ = ["LeaseSource", "SharedPot"]


class LeaseSource(abc.ABC):
    """One task attempt's source of leases (see the module docstring). Used on one event loop."""

    #: what error messages and logs name (no credentials)
    where: str

    @abc.abstractmethod
    async def lease(self, need: float, want: float, used: float) -> tuple[float, float]:
        """``(granted, left)``: at least ``need`` units, about ``want``, or 0 (refused: the pot
        cannot cover ``need``), and what the pot has left after. ``used``: units the task's
        calls started so far. A retried request never leases twice."""

    @abc.abstractmethod
    async def release(self, units: float, used: float, refused: int, refunded: float = 0.0) -> None:
        """The task ended: give back ``units`` it did not use (never more than it holds minus
        ``used - refunded``, and ``used - refunded`` beyond what it holds is charged: calls billed
        above their estimates); ``refused``: its attempts the pot could not cover; ``refunded``:
        estimates given back because the calls were billed less (a :class:`BilledCost`)."""


class SharedPot(abc.ABC):
    """A budget's pot kept outside the driver, shared by every job using its name (picklable:
    shipped to the tasks inside the Budget)."""

    #: where the pot is, as a repr shows it (no credentials)
    shown: str

    @abc.abstractmethod
    def spent(self, budget: str) -> float:
        """Units out of the pot, by every job sharing it (read on the driver; ``budget``: the
        Budget's name for an error message)."""

    @abc.abstractmethod
    def source(self, limit: float, task: str) -> LeaseSource:
        """Task attempt ``task``'s lease source, capping the shared count at ``limit``."""
