"""The pot of a budget, kept in one place: it hands out *leases* of units and takes back what a
task did not use.

A :class:`Ledger` lives in the driver process (behind the metrics collector's HTTP server, see
:mod:`aiospark.spark.budget`). Every grant comes out of ``free`` under one lock, so the units handed
out never add up to more than ``limit``: the cap is hard whatever the tasks do. A task gives back
its unused units when it ends; a task that dies keeps its lease (those units count as spent, so the
cap still holds; the job may then spend a little less than its limit).

Lease sizes adapt: a task asks for ``need`` (what its next call costs) and ``want`` (about a
second of its spending, at least :data:`START_LEASE`); it gets at least ``need`` and at most
``free / (2 * tasks holding a lease)``, so a few tasks cannot take the whole pot while the others
starve, and leases shrink as the pot empties. A request that ``free`` cannot cover is refused
(granted 0).

A request may be delivered twice (a task retries when the reply was lost after the driver acted
on it): each request carries an id, and the ledger answers an id it has seen with its first
answer, changing nothing (it remembers the last :data:`REMEMBERED` ids; a replay arrives within
seconds). A release also gives back at most what the task holds minus what it reported using, so
even a replay the ledger forgot cannot hand back units that were spent.

Example::

    ledger = Ledger(500)
    granted, left = ledger.lease("task-1", need=1, want=64)   # (64.0, 436.0)
    ledger.release("task-1", 10, used=54, request="r2")       # ends: 10 units back
    ledger.release("task-1", 10, used=54, request="r2")       # a replay: 10 again, nothing moves
    ledger.spent, ledger.left                                  # (54.0, 446.0)
"""
from __future__ import annotations

import math
import numbers
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["Ledger", "REMEMBERED", "START_LEASE", "check_cost", "check_limit", "check_units"]

#: the first lease of a task (capped by its share of what is left)
START_LEASE = 64.0
#: request ids (and their answers) the ledger remembers to answer replays
REMEMBERED = 10_000


def check_limit(limit: Any) -> float:
    """A budget's ``limit``: a finite number >= 0 (not a bool, not NaN, not inf)."""
    if isinstance(limit, bool) or not isinstance(limit, numbers.Real):
        raise TypeError(f"Budget limit must be a number of units (calls, or what cost(row) returns), "
                        f"got {type(limit).__name__}: {limit!r}")
    value = float(limit)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"Budget limit must be a finite number >= 0 (e.g. Budget(500)), got {limit!r}")
    return value


def check_cost(cost: object) -> Callable[[Any], Any] | None:
    """A budget's ``cost``: None (a call costs 1) or a callable ``cost(row) -> units``."""
    if cost is None or callable(cost):
        return cost
    raise TypeError(f"Budget cost must be a callable cost(row) -> units (a finite number >= 0) or None "
                        f"(every call costs 1), got {type(cost).__name__}: {cost!r}")


def check_units(value: Any, what: str) -> float:
    """A number of units in a request: finite and >= 0 (ValueError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return float(value)


class Ledger:
    """The units of one budget (see the module docstring). Thread-safe."""

    def __init__(self, limit: float):
        self.limit = check_limit(limit)
        self._lock = threading.Lock()
        self._free = self.limit
        self._held: dict[str, float] = {}   # task -> units leased to it and not given back
        self._used: dict[str, float] = {}   # task -> units its calls started (as it reported)
        self._refunded: dict[str, float] = {}  # task -> estimates it gave back (billed less: a BilledCost)
        #: units billed beyond the limit: calls in flight when the pot ran dry billed above their estimates
        self.overdrawn = 0.0
        self._open: set[str] = set()        # tasks that hold a lease and have not ended
        self.refused = 0                     # calls refused, as tasks reported at their end
        self.leases = 0                      # leases granted (round trips that got units)
        #: request id -> first answer: (granted, left) of a lease, units given back by a release
        self._answers: OrderedDict[str, tuple[float, float] | float] = OrderedDict()

    def lease(self, task: str, need: float, want: float, used: float = 0.0,
              request: str | None = None) -> tuple[float, float]:
        """``(granted, left)``: at least ``need`` units for ``task`` (0 if they are not there) and
        ``left`` still free after the grant. ``used``: units the task's calls started so far.
        ``request``: the request's id; a replay of it gets the first answer and changes nothing."""
        need, want, used = check_units(need, "need"), check_units(want, "want"), check_units(used, "used")
        with self._lock:
            if request is not None and request in self._answers:
                seen = self._answers[request]
                if not isinstance(seen, tuple):
                    raise ValueError("a lease request reuses the id of a release")
                return seen
            answer = self._lease(task, need, want, used)
            self._remember(request, answer)
            return answer

    def _lease(self, task: str, need: float, want: float, used: float) -> tuple[float, float]:
        # (under the lock)
        self._note_used(task, used)
        if need > self._free + 1e-9 * max(1.0, need):  # (float crumbs: 0.1 * 3 fits in 0.3)
            return 0.0, self._free
        self._open.add(task)
        share = math.floor(self._free / (2 * len(self._open)))  # whole units: no float crumbs
        granted = min(self._free, max(need, min(want, share)))
        self._free -= granted
        if self._free < 1e-9:  # float crumbs of fractional costs: nothing left to lease
            self._free = 0.0
        self._held[task] = self._held.get(task, 0.0) + granted
        self.leases += 1
        return granted, self._free

    def release(self, task: str, units: float, used: float = 0.0, refused: int = 0,
                request: str | None = None, refunded: float = 0.0) -> float:
        """``task`` ended: put back ``units`` it did not use, never more than it holds minus what
        it used (``used - refunded``: so a replayed release gives back nothing twice); returns what
        was put back. What it used beyond what it holds (calls billed above their estimates, a
        :class:`~aiospark.budget.billed.BilledCost`) is charged: out of ``free``, and beyond that
        into :attr:`overdrawn`. ``request``: the request's id; a replay of it gets the first answer
        and changes nothing."""
        units, used = check_units(units, "units"), check_units(used, "used")
        refunded = check_units(refunded, "refunded")
        with self._lock:
            if request is not None and request in self._answers:
                seen = self._answers[request]
                if isinstance(seen, tuple):
                    raise ValueError("a release request reuses the id of a lease")
                return seen
            self._note_used(task, used)
            if refunded > self._refunded.get(task, 0.0):
                self._refunded[task] = refunded
            held = self._held.get(task, 0.0)
            room = held - (self._used.get(task, 0.0) - self._refunded.get(task, 0.0))
            if room < -1e-9:  # in debt: billed beyond its leases; now it holds what it used
                debt = -room
                paid = min(self._free, debt)
                self._free -= paid
                self.overdrawn += debt - paid
                self._held[task] = held + debt
                back = 0.0
            else:
                # (float crumbs: the task computed ``units`` as held - used by other additions)
                back = max(0.0, min(held, units if units <= room + 1e-9 else room))
                self._held[task] = held - back
                self._free = min(self.limit, self._free + back)
            self._open.discard(task)
            if isinstance(refused, int) and not isinstance(refused, bool) and refused > 0:
                self.refused += refused
            self._remember(request, back)
            return back

    def _remember(self, request: str | None, answer: tuple[float, float] | float) -> None:
        if request is None:
            return
        self._answers[request] = answer
        if len(self._answers) > REMEMBERED:
            self._answers.popitem(last=False)

    def _note_used(self, task: str, used: float) -> None:
        if used > self._used.get(task, 0.0):
            self._used[task] = used

    @property
    def spent(self) -> float:
        """Units out of the pot: leased to tasks and not given back (what running tasks hold and
        dead tasks kept included, so it is >= the units of the calls started), plus what ended tasks
        were billed beyond the limit (:attr:`overdrawn`)."""
        with self._lock:
            return self.limit - self._free + self.overdrawn

    @property
    def left(self) -> float:
        """Units that can still be leased."""
        with self._lock:
            return self._free

    @property
    def started(self) -> float:
        """Units of the calls that started, as the tasks reported them (each lease request and each
        task's end carries its count)."""
        with self._lock:
            return sum(self._used.values()) - sum(self._refunded.values())

    @property
    def holders(self) -> int:
        """Tasks that hold a lease now (running, or dead without giving it back)."""
        with self._lock:
            return len(self._open)
