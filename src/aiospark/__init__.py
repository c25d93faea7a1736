"""aiospark: Flink-style Async I/O for PySpark.

Many calls in flight per Spark task, a bounded number of them, per-call timeouts, retries, and
ordered or unordered output. The core engine (``aiospark.core``) is pure asyncio; the Spark entry
points are imported lazily so ``import aiospark`` stays cheap on the workers.
"""
from typing import TYPE_CHECKING, Any

from .core import (
    AsyncFunction,
    AsyncFunctionError,
    AsyncTimeoutError,
    AsyncWaitOperator,
    BadInput,
    BlockedLoopWarning,
    CancellationIgnoredWarning,
    OrderedQueue,
    Record,
    ResultFuture,
    RetryStrategy,
    UnorderedQueue,
    Watermark,
    retry_if_empty,
    retry_on,
)
from .core.adaptive import AdaptiveConcurrency
from .core.context import idempotency_key, time_left
from .core.durable import BudgetExhausted
from .core.metrics import OperatorMetrics
from .core.ratelimit import RateLimit
from .core.usage import record_usage

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and IDEs (nothing runs here)
    from .budget.billed import BilledCost as BilledCost
    from .journal import Journal as Journal
    from .spark.batch_lane import BatchesPending as BatchesPending
    from .spark.batch_lane import BatchSubmission as BatchSubmission
    from .spark.batch_lane import collect_batches as collect_batches
    from .spark.batch_lane import submit_batches as submit_batches
    from .spark.budget import Budget as Budget
    from .spark.lookup_join import lookup_join as lookup_join
    from .spark.lookup_join import lookup_udf as lookup_udf
    from .spark.metrics import Metrics as Metrics
    from .spark.plan import RunPlan as RunPlan
    from .spark.plan import plan as plan
    from .spark.progress import ProgressOptions as ProgressOptions
    from .spark.schema import OutputSchemaError as OutputSchemaError
    from .spark.session import local_session as local_session
    from .spark.udf import AsyncUDF as AsyncUDF
    from .spark.udf import async_udf as async_udf
    from .spark.wait import ordered_wait as ordered_wait
    from .spark.wait import unordered_wait as unordered_wait

_SPARK_EXPORTS = {
    "ordered_wait": ("aiospark.spark.wait", "ordered_wait"),
    "unordered_wait": ("aiospark.spark.wait", "unordered_wait"),
    "async_udf": ("aiospark.spark.udf", "async_udf"),
    "AsyncUDF": ("aiospark.spark.udf", "AsyncUDF"),
    "OutputSchemaError": ("aiospark.spark.schema", "OutputSchemaError"),
    "local_session": ("aiospark.spark.session", "local_session"),
    "lookup_join": ("aiospark.spark.lookup_join", "lookup_join"),
    "Metrics": ("aiospark.spark.metrics", "Metrics"),
    "Budget": ("aiospark.spark.budget", "Budget"),
    "BilledCost": ("aiospark.budget.billed", "BilledCost"),
    "ProgressOptions": ("aiospark.spark.progress", "ProgressOptions"),
    "lookup_udf": ("aiospark.spark.lookup_join", "lookup_udf"),
    "Journal": ("aiospark.journal", "Journal"),  # imports pyarrow: lazy too
    "plan": ("aiospark.spark.plan", "plan"),
    "RunPlan": ("aiospark.spark.plan", "RunPlan"),
    "submit_batches": ("aiospark.spark.batch_lane", "submit_batches"),
    "collect_batches": ("aiospark.spark.batch_lane", "collect_batches"),
    "BatchSubmission": ("aiospark.spark.batch_lane", "BatchSubmission"),
    "BatchesPending": ("aiospark.spark.batch_lane", "BatchesPending"),
}


def __getattr__(name: str) -> Any:  # Spark entry points load pyspark only when first used
    target = _SPARK_EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'aiospark' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


__all__ = [
    "AdaptiveConcurrency", "BudgetExhausted", "OperatorMetrics", "RateLimit", "idempotency_key", "record_usage",
    "time_left",
    "AsyncFunction", "AsyncFunctionError", "AsyncTimeoutError", "AsyncWaitOperator", "BadInput",
    "BlockedLoopWarning", "CancellationIgnoredWarning", "OrderedQueue",
    "Record", "ResultFuture", "RetryStrategy", "UnorderedQueue", "Watermark", "retry_if_empty", "retry_on",
    *_SPARK_EXPORTS,
]
