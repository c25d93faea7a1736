"""Validation of the arguments every Spark entry point shares, done on the driver at call time."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..core import AsyncFunction, AsyncWaitOperator, RetryStrategy
from ..core.function import check_async_function
from ..core.operator import check_retry, check_timeout
from ..core.queues import _check_capacity
from ..runtime.worker_loop import WorkerLoop


@dataclass(frozen=True)
class CallOptions:
    """How calls are made in every task: validated once on the driver, pickled to the workers."""

    function: Any
    ordered: bool
    timeout: Optional[float]
    capacity: int
    retry: Optional[RetryStrategy]
    #: identifies the function's definition, so every task of a worker shares one opened instance
    key: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def create(cls, function: Any, *, ordered: bool, timeout: Any, capacity: Any, retry: Any,
               what: str = "function") -> "CallOptions":
        check_async_function(function, what)
        return cls(function, bool(ordered), check_timeout(timeout), _check_capacity(capacity),
                   check_retry(retry))

    async def make_operator(self, wl: WorkerLoop, output: Callable[[Any], None],
                            on_error: Optional[Callable[[Any, BaseException], list]] = None,
                            invoke: Optional[Callable[..., Any]] = None) -> AsyncWaitOperator:
        """Build this task's operator on the worker loop, around the worker's opened function."""
        function = self.function
        if isinstance(function, AsyncFunction):
            function = await wl.opened(self.key, function)
        return AsyncWaitOperator(invoke(function) if invoke else function, output, ordered=self.ordered,
                                 timeout=self.timeout, capacity=self.capacity, retry=self.retry,
                                 on_error=on_error, manage_lifecycle=False)
