"""Validation of the arguments every Spark entry point shares, done on the driver at call time."""
from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ..core import AsyncFunction, AsyncWaitOperator, RetryStrategy
from ..core.adaptive import AdaptiveConcurrency
from ..core.function import check_async_function
from ..core.ratelimit import AnyLimiter, RateLimit
from ..core.settings import check_batching, check_capacity, check_retry, check_timeout
from ..runtime.gc_policy import threshold_from_env
from ..runtime.worker_loop import WorkerLoop, loop_choice
from .arrow_lane import PYARROW, ROWS, check_batch_format
from .budget import Budget, check_budget
from .metrics import Metrics

if TYPE_CHECKING:
    from ..budget.ticket import BudgetTicket
    from ..core.durable import BudgetGate, TaskJournal
    from ..core.operator import OnError
    from ..journal import Journal
    from .progress import ProgressOptions

#: the entry points' ``function``: ``async def f(...)`` or an :class:`aiospark.AsyncFunction`
AsyncCallable: TypeAlias = "Callable[..., Awaitable[Any]] | AsyncFunction"
#: ``capacity=``: calls in flight per task (a number), ``"auto"``, or an AdaptiveConcurrency
Capacity: TypeAlias = "int | str | AdaptiveConcurrency"
#: ``rate_limit=``: calls per second per task (a number), a RateLimit, or a shared limiter
#: (``RedisRateLimit``: anything with ``acquire()`` or ``reserve()``)
RateLimitLike: TypeAlias = "float | RateLimit | AnyLimiter | None"
#: ``progress=``: True (or a ProgressOptions) shows each action's progress while it runs
ProgressLike: TypeAlias = "bool | ProgressOptions | None"


def check_rate_limit(rate_limit: Any) -> RateLimit | AnyLimiter | None:
    """``None``, calls per second (a number), a RateLimit, or a shared limiter (``async acquire()``)."""
    if rate_limit is None or callable(getattr(rate_limit, "acquire", None)) or \
            callable(getattr(rate_limit, "reserve", None)):
        return rate_limit
    return RateLimit.coerce(rate_limit)


def check_metrics(metrics: Any, name: str) -> Metrics:
    if metrics is None:
        return Metrics(name)
    if not isinstance(metrics, Metrics):
        raise TypeError(f"metrics must be an aiospark.Metrics (or None), got {type(metrics).__name__}")
    return metrics


@dataclass(frozen=True)
class CallOptions:
    """How calls are made in every task: validated once on the driver, pickled to the workers."""

    function: AsyncCallable
    ordered: bool
    timeout: float | None
    capacity: int | AdaptiveConcurrency
    retry: RetryStrategy | None
    rate_limit: RateLimit | AnyLimiter | None = None
    metrics: Metrics | None = None
    #: inputs per call (None: one), and how long a batch waits to fill
    batch_size: int | None = None
    batch_delay: float = 0.01
    #: ``value -> key``: calls for equal keys run one at a time (``unordered_wait(key=...)``)
    order_key: Callable[[Any], Any] | None = None
    #: identifies the function's definition, so every task of a worker shares one opened instance
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: an aiospark.Budget (a BudgetTicket once pickled to a worker): see aiospark.spark.budget
    budget: Budget | BudgetTicket | None = None
    #: what a batch call gets: "rows" (a list of dicts) or "pyarrow" (see aiospark.spark.arrow_lane)
    batch_format: str = ROWS

    @classmethod
    def create(cls, function: AsyncCallable, *, ordered: bool, timeout: float | None, capacity: Capacity,
               retry: RetryStrategy | None, rate_limit: RateLimitLike = None, metrics: Metrics | None = None,
               what: str = "function", name: str = "aiospark", batch_size: int | None = None,
               batch_delay: float = 0.01, order_key: Callable[[Any], Any] | None = None,
               budget: Budget | None = None, batch_format: str = ROWS, journal: Journal | None = None) -> CallOptions:
        """Validate every option (each error says what to change) and freeze them.

        Example::

            options = CallOptions.create(fetch, ordered=True, timeout=5.0, capacity=100, retry=None)
        """
        check_async_function(function, what)
        threshold_from_env()  # a bad AIOSPARK_GC_THRESHOLD or AIOSPARK_LOOP fails here, not in every task
        loop_choice()
        queue_capacity, adaptive = check_capacity(capacity)
        timeout = check_timeout(timeout)
        # the columnar lane never waits for a slice to fill: its batch_delay does not apply
        batch_size, batch_delay = check_batching(batch_size, batch_delay, queue_capacity,
                                                 None if batch_format == PYARROW else timeout)
        if batch_size is not None and getattr(function, "batches_itself", False):
            raise ValueError(f"{type(function).__name__} sends rows in batches by itself (its own batch_size=): "
                             f"drop the entry point's batch_size=")
        if order_key is not None and batch_size is not None:
            raise ValueError(f"{name}: key= and batch_size= do not go together (calls of one key run one at a "
                             "time, a batch would run them at once); use one or the other")
        rate_limit, budget = check_rate_limit(rate_limit), check_budget(budget)
        batch_format = check_batch_format(batch_format, batch_size=batch_size, capacity=adaptive or queue_capacity,
                                          rate_limit=rate_limit, budget=budget, journal=journal, name=name)
        return cls(function, bool(ordered), timeout, adaptive or queue_capacity,
                   check_retry(retry), rate_limit, check_metrics(metrics, name),
                   batch_size=batch_size, batch_delay=batch_delay, order_key=order_key,
                   budget=budget, batch_format=batch_format)

    @property
    def max_capacity(self) -> int:
        """The most queue entries in flight per task: rows, or slices in the pyarrow lane."""
        if self.batch_format == PYARROW:  # check_batch_format: a number of rows, and batch_size
            assert isinstance(self.capacity, int) and self.batch_size is not None
            return max(1, self.capacity // self.batch_size)
        return check_capacity(self.capacity)[0]

    async def make_operator(self, wl: WorkerLoop, output: Callable[[list[Any]], None],
                            on_error: OnError | None = None,
                            invoke: Callable[..., Any] | None = None, budget: BudgetGate | None = None,
                            identify: Callable[[Any], str | None] | None = None, journal: TaskJournal | None = None,
                            idempotency: Callable[[Any], str] | None = None) -> AsyncWaitOperator:
        """Build this task's operator on the worker loop, around the worker's opened function
        (``identify``/``journal``: see :mod:`aiospark.spark.journaled`). It emits plain values,
        a list at a time, to ``output`` (the bridge's pump: rows carry no event time)."""
        function = self.function
        if isinstance(function, AsyncFunction):
            function = await wl.opened(self.key, function)
        rate_limit = self.rate_limit
        if callable(getattr(rate_limit, "acquire", None)) and callable(getattr(rate_limit, "open", None)):
            rate_limit = await wl.opened(self.key + ":rate_limit", rate_limit)  # one per worker, shared
        elif isinstance(rate_limit, RateLimit):
            # a worker runs its tasks one after another: the next task of this definition goes on
            # with the bucket the last one left, so many short tasks (the dedup shuffle's) do not
            # each start with a fresh burst; still a limit per running task
            rate_limit = wl.kept(self.key + ":bucket", rate_limit.bucket)
        # the pyarrow lane's slices are the operator's elements: it batches nothing itself
        columnar = self.batch_format == PYARROW
        return AsyncWaitOperator(invoke(function) if invoke else function, output, ordered=self.ordered,
                                 timeout=self.timeout, capacity=self.max_capacity if columnar else self.capacity,
                                 retry=self.retry, on_error=on_error, rate_limit=rate_limit,
                                 batch_size=None if columnar else self.batch_size,
                                 batch_delay=self.batch_delay, key=self.order_key, manage_lifecycle=False,
                                 budget=budget, identify=identify, journal=journal, values=True,
                                 idempotency=idempotency)
