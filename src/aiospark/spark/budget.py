"""``aiospark.Budget``: a hard cap on the units of calls a job starts, on every executor.

Without Redis, the pot is a :class:`~aiospark.budget.ledger.Ledger` in the driver process, served
by the driver's HTTP endpoint (``POST /budget``, where Spark's driver listens, see
:mod:`aiospark.spark.endpoint`). Each task leases units from it and spends them before each attempt;
requests must be signed with the Budget's own secret (shipped inside the pickled task; an HMAC with
a timestamp and a nonce, :mod:`aiospark.budget.signing`) or are refused (403), and carry a request
id the ledger answers once (a retried request never leases or gives back twice).
With ``redis=``, the pot is a counter in Redis that several jobs share by ``name``
(:class:`~aiospark.connectors.redis.budget_leases.RedisPot`, a
:class:`~aiospark.budget.source.SharedPot`).

Example::

    budget = aiospark.Budget(500)                     # 500 calls, at most, in all
    out = aiospark.unordered_wait(df, fetch, "id LONG, body STRING", budget=budget, on_error="row")
    out.write.parquet(path)
    budget.spent, budget.left                          # (500.0, 0.0)
"""
from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..budget.gate import LeaseGate
from ..budget.ledger import Ledger, check_cost, check_limit, check_units
from ..budget.ticket import BudgetTicket
from .endpoint import collector, driver_host, register_endpoint

if TYPE_CHECKING:
    from ..connectors.redis.budget_leases import RedisPot

__all__ = ["Budget"]

_budgets: dict[str, Budget] = {}
_lock = threading.Lock()
PATH = "/budget"


class Budget:
    """At most ``limit`` units of calls start across the whole job, on every executor.

    A call costs 1, or ``cost(row)`` units (a finite number >= 0; ``cost`` gets what a
    ``RateLimit``'s cost gets: the row dict, or the udf's column values as a tuple; a batch call
    costs the sum over its rows). Every attempt is charged, retries included, before it starts.
    Once spent, a row not started becomes an error row saying so (``on_error="row"``) or fails its
    task with :class:`aiospark.BudgetExhausted`. One Budget is one pot: every action run with it
    spends from it. ``cost`` raising (or returning a bad number) is that row's error.

    A :class:`aiospark.BilledCost` (e.g. ``chat.budget_cost()`` of an OpenAI connector with a
    ``price``) charges its estimate before a call and reconciles with the usage the call records
    (the provider's bill) after it, so a budget in tokens or money holds against what was billed,
    over by at most the estimate error of the calls in flight (docs/design.md, "Budgets in tokens
    and money"); ``spent`` is then the billed total once the tasks ended (with ``redis=`` too).

    ``redis="redis://[:password@]host:port/db"`` (password also from ``$REDIS_PASSWORD``) keeps
    the pot in Redis under ``name`` (required then), shared by every job using that name: together
    they start at most ``limit`` units. ``spent`` and ``left`` read it on the driver at any time.

    Example::

        budget = aiospark.Budget(10_000, cost=lambda row: len(row["text"]) // 4)   # ~tokens
        aiospark.unordered_wait(df, summarize, "id LONG, summary STRING", budget=budget)
        dollars = aiospark.Budget(20.0, cost=chat.budget_cost())       # $20 billed (chat has price=)
    """

    def __init__(self, limit: float, *, cost: Callable[[Any], Any] | None = None, redis: str | None = None,
                 name: str | None = None):
        self.limit = check_limit(limit)
        self.cost = check_cost(cost)
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"Budget name must be a non-empty string, got {name!r}")
        self.id = uuid.uuid4().hex
        self.name = name or f"budget-{self.id[:8]}"
        self._secret = secrets.token_hex(16)  # lease requests must carry it (see the module doc)
        self._redis: RedisPot | None = None
        self._ledger: Ledger | None = None
        if redis is not None:
            from ..connectors.redis.budget_leases import RedisPot  # the redis client only with redis=

            if name is None:
                raise ValueError("Budget(redis=...) needs name=: the name jobs share the budget by "
                                 "(its Redis key is aiospark:budget:<name>)")
            self._redis = RedisPot.of(redis, name)
        else:
            self._ledger = Ledger(self.limit)
        with _lock:
            _budgets[self.id] = self

    # ---------------------------------------------------------------- reading (driver)
    @property
    def spent(self) -> float:
        """Units out of the pot: leased to tasks and not given back (so >= the units of the calls
        that started; a task that died keeps its lease). With Redis: by every job of the name."""
        if self._ledger is not None:
            return self._ledger.spent
        return self._pot().spent(self.name)

    @property
    def left(self) -> float:
        """Units that can still start: ``limit - spent`` (never below 0)."""
        if self._ledger is not None:
            return self._ledger.left
        return max(0.0, self.limit - self._pot().spent(self.name))

    @property
    def started(self) -> float | None:
        """Units of the calls that started, as the tasks reported them (None with Redis)."""
        return self._ledger.started if self._ledger is not None else None

    @property
    def refused(self) -> int | None:
        """Attempts refused because the budget was spent, as ended tasks reported them (None with Redis)."""
        return self._ledger.refused if self._ledger is not None else None

    def _pot(self) -> RedisPot:
        assert self._redis is not None  # a Budget has a ledger or a pot
        return self._redis

    def __repr__(self) -> str:
        if self._redis is not None:  # no round trip to Redis in a repr: read .spent for that
            return f"<aiospark.Budget {self.name!r} limit={self.limit:g}, redis={self._redis.url!r}>"
        return f"<aiospark.Budget {self.name!r} limit={self.limit:g} spent={self.spent:g} left={self.left:g}>"

    __str__ = __repr__

    # ---------------------------------------------------------------- shipping (to workers)
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        address = None
        if self._ledger is not None:
            register_endpoint(PATH, _lease_endpoint, _budget_secret)
            address = collector(driver_host()).base + PATH
        return (BudgetTicket, (self.id, self.name, self.limit, self.cost, address, self._secret, self._redis))


def _live_budget(request: dict[str, Any]) -> Budget | None:
    budget_id = request.get("id")
    with _lock:
        budget = _budgets.get(budget_id) if isinstance(budget_id, str) else None
    return budget if budget is not None and budget._ledger is not None else None


def _budget_secret(request: dict[str, Any]) -> str | None:
    """The secret a lease request must be signed with (None: not a live Budget of this driver)."""
    budget = _live_budget(request)
    return budget._secret if budget is not None else None


def _lease_endpoint(request: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """``POST /budget`` on the driver's collector (a signed request): lease or give back units of
    a live Budget, once per request id."""
    budget = _live_budget(request)
    if budget is None or budget._ledger is None:
        return 403, None
    ledger, task, op, rid = budget._ledger, request.get("task"), request.get("op"), request.get("request")
    if not isinstance(task, str) or not task or not (isinstance(rid, str) and 0 < len(rid) <= 64):
        return 400, None
    try:
        if op == "lease":
            granted, left = ledger.lease(task, _units(request, "need"), _units(request, "want"),
                                         _units(request, "used", 0.0), request=rid)
            return 200, {"granted": granted, "left": left}
        if op == "release":
            refused = request.get("refused", 0)
            back = ledger.release(task, _units(request, "units"), _units(request, "used", 0.0),
                                  refused if isinstance(refused, int) else 0, request=rid,
                                  refunded=_units(request, "refunded", 0.0))
            return 200, {"returned": back, "left": ledger.left}
    except ValueError:
        return 400, None
    return 400, None


def _units(request: dict[str, Any], name: str, default: float | None = None) -> float:
    """A number of units of a request (the ledger checks it is finite and >= 0; anything else:
    ValueError, a 400)."""
    return check_units(request.get(name, default), name)


def check_budget(budget: Any) -> Budget | None:
    """``budget=`` of an entry point: None or an :class:`aiospark.Budget`."""
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be an aiospark.Budget (e.g. aiospark.Budget(500)) or None, "
                        f"got {type(budget).__name__}")
    return budget


def task_gate(ticket: BudgetTicket | None, batched: bool, count: Callable[[Any], int] | None = None) -> LeaseGate | None:
    """This task's budget gate (None without a budget); close it with :func:`close_gate`.
    ``count(value)``: the rows of a call whose value is a columnar batch."""
    if ticket is None:
        return None
    from .metrics import task_name

    return ticket.gate(task_name(), batched, count)


def close_gate(wl: Any, gate: Any) -> None:
    """The task ended: give the gate's unused units back (on its loop; waits at most 15 s)."""
    if gate is None:
        return
    import concurrent.futures

    try:
        wl.submit(gate.aclose()).result(timeout=15.0)
    except (concurrent.futures.TimeoutError, RuntimeError) as exc:  # the units stay spent: the cap holds
        import logging

        logging.getLogger("aiospark").warning("aiospark: the budget's unused units were not given back: %s", exc)
