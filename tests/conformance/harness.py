"""Run one ``async def check(arg: str) -> str`` inside aiospark calls, through every entry point.

A check receives a JSON string (the servers' addresses, a per-run directory, the row number under
``"row"``) and returns a string describing what it saw; the tests compare those strings. The same
check runs

* directly through the core ``AsyncWaitOperator`` on a plain ``asyncio.run`` loop, ordered and
  unordered (cheap: no Spark), and
* through ``aiospark.unordered_wait``, ``aiospark.ordered_wait`` (with an ``AsyncFunction``) and
  ``aiospark.async_udf`` (a plain ``async def``) on the real, shared local Spark session, where the
  calls run in Spark's Python worker processes on aiospark's worker event loop.

Checks live at module level in ``tests.conformance.checks*`` so that the workers can import them
(they are pickled by reference).
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiospark
from aiospark.core import AsyncWaitOperator, Record

Check = Callable[[str], Awaitable[str]]

CORE_ENTRIES = ("core-ordered", "core-unordered")
SPARK_ENTRIES = ("unordered_wait", "ordered_wait", "async_udf")
ENTRIES = CORE_ENTRIES + SPARK_ENTRIES

# A hang fails the test instead of blocking the suite (far beyond what any check needs).
GUARD_SECONDS = 120.0


class CheckFunction(aiospark.AsyncFunction):
    """``{"id", "arg"}`` in, ``[{"id", "out"}]`` out; on timeout, the fallback row (when given)."""

    def __init__(self, check: Check, fallback: str | None) -> None:
        self.check = check
        self.fallback = fallback

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": row["id"], "out": await self.check(row["arg"])}]

    def timeout(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        if self.fallback is None:
            return super().timeout(row)  # the default: fail with AsyncTimeoutError
        return [{"id": row["id"], "out": self.fallback}]


def _udf_for(check: Check) -> Callable[[str], Awaitable[str]]:
    # A fresh `async def` per test (cloudpickle ships it by value, `check` by reference).
    async def call(arg: str) -> str:
        return await check(arg)

    call.__name__ = f"udf_{getattr(check, '__name__', 'check')}"
    return call


def run_check(entry: str, check: Check, config: dict[str, Any], *, spark: Any = None, rows: int = 6,
              timeout: float = 60.0, capacity: int = 100, fallback: str | None = None) -> list[str]:
    """Run ``check`` once per row through ``entry``; returns the outputs in row order.

    ``fallback`` is what a timed-out call yields: ``AsyncFunction.timeout`` returns it for the core
    and the wait entry points; ``async_udf`` has no timeout hook, so it runs with ``on_error="null"``
    and its NULLs are reported as ``fallback``.
    """
    args = [json.dumps({**config, "row": i}) for i in range(rows)]
    if entry in CORE_ENTRIES:
        outputs = _run_core(entry == "core-ordered", check, args, timeout, capacity, fallback)
    elif entry in SPARK_ENTRIES:
        if spark is None:
            raise ValueError(f"entry point {entry} needs the Spark session")
        outputs = _run_spark(entry, spark, check, args, timeout, capacity, fallback)
    else:
        raise ValueError(f"unknown entry point {entry!r}; one of {ENTRIES}")
    assert sorted(outputs) == list(range(rows)), f"rows lost or duplicated: {sorted(outputs)}"
    return [outputs[i] for i in range(rows)]


def _run_core(ordered: bool, check: Check, args: list[str], timeout: float, capacity: int,
              fallback: str | None) -> dict[int, str]:
    emitted: list = []

    async def main() -> None:
        op = AsyncWaitOperator(CheckFunction(check, fallback), emitted.append, ordered=ordered,
                               timeout=timeout, capacity=capacity)
        await op.open()
        try:
            for i, arg in enumerate(args):
                await op.process_element({"id": i, "arg": arg})
            await op.finish()
        finally:
            await op.close()

    async def guarded() -> None:
        await asyncio.wait_for(main(), GUARD_SECONDS)

    asyncio.run(guarded())
    records = [e.value for e in emitted if isinstance(e, Record)]
    if ordered:
        assert [r["id"] for r in records] == list(range(len(args))), "ordered output out of input order"
    return {r["id"]: r["out"] for r in records}


def _run_spark(entry: str, spark: Any, check: Check, args: list[str], timeout: float, capacity: int,
               fallback: str | None) -> dict[int, str]:
    # Two partitions: both local[2] worker processes run calls, several per task.
    df = spark.createDataFrame([(i, a) for i, a in enumerate(args)], "id INT, arg STRING").repartition(2, "id")
    if entry == "async_udf":
        udf = aiospark.async_udf("string", timeout=timeout, capacity=capacity,
                                 on_error="fail" if fallback is None else "null")(_udf_for(check))
        rows = df.select("id", udf("arg").alias("out")).collect()
        return {r["id"]: (fallback if r["out"] is None and fallback is not None else r["out"]) for r in rows}
    wait = aiospark.ordered_wait if entry == "ordered_wait" else aiospark.unordered_wait
    out = wait(df, CheckFunction(check, fallback), "id INT, out STRING", timeout=timeout, capacity=capacity)
    return {r["id"]: r["out"] for r in out.collect()}
