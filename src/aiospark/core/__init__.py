"""aiospark.core: Flink's async-wait semantics on pure asyncio (no Spark here).

Example::

    import asyncio
    from aiospark.core import AsyncWaitOperator

    async def main():
        async def enrich(x):
            await asyncio.sleep(0.01)
            return {"id": x, "score": x * 2}
        emitted = []
        op = AsyncWaitOperator(enrich, emitted.append, ordered=False, capacity=100, timeout=5)
        await op.open()
        for i in range(1000):
            await op.process_element(i)
        await op.finish()
        await op.close()

    asyncio.get_event_loop_policy().new_event_loop().run_until_complete(main())  # or await main()
"""
from .context import time_left
from .elements import Record, StreamElement, Watermark
from .errors import AsyncFunctionError, AsyncTimeoutError, BadInput, BlockedLoopWarning, CancellationIgnoredWarning
from .function import AsyncFunction
from .operator import AsyncWaitOperator
from .queues import ElementQueue, OrderedQueue, UnorderedQueue
from .result_future import ResultFuture
from .retry import RetryStrategy, retry_if_empty, retry_on

__all__ = [
    "AsyncFunction", "AsyncFunctionError", "AsyncTimeoutError", "AsyncWaitOperator", "BadInput", "BlockedLoopWarning",
    "CancellationIgnoredWarning", "ElementQueue", "OrderedQueue",
    "Record", "ResultFuture", "RetryStrategy", "StreamElement", "UnorderedQueue", "Watermark",
    "retry_if_empty", "retry_on", "time_left",
]
