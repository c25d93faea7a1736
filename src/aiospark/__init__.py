"""aiospark: Flink-style Async I/O for PySpark.

Many calls in flight per Spark task, a bounded number of them, per-call timeouts, retries, and
ordered or unordered output. The core engine (``aiospark.core``) is pure asyncio; the Spark entry
points are imported lazily so ``import aiospark`` stays cheap on the workers.
"""
from .core import (AsyncFunction, AsyncFunctionError, AsyncTimeoutError, AsyncWaitOperator, OrderedQueue,
                   Record, ResultFuture, RetryStrategy, UnorderedQueue, Watermark, retry_if_empty, retry_on)

__version__ = "0.1.0"

__all__ = [
    "AsyncFunction", "AsyncFunctionError", "AsyncTimeoutError", "AsyncWaitOperator", "OrderedQueue",
    "Record", "ResultFuture", "RetryStrategy", "UnorderedQueue", "Watermark", "retry_if_empty", "retry_on",
]
