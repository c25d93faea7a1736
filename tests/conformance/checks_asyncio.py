"""Checks of plain asyncio behaviour inside a call (run by the workers: keep them at module level).

Each returns a string of observations; under ``asyncio.run`` every one of them yields the
``EXPECTED_*`` string next to it, whatever the Python version.
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import sys
import threading
import weakref

EXPECTED_CURRENT_TASK = ("Task weakref named running in-all-tasks same-after-await same-after-timer "
                         "cancelled-inside still-same renamed")


async def current_task(arg: str) -> str:
    """``asyncio.current_task()`` is a real, weak-referenceable, named, cancellable Task that stays
    the same object across awaits (what httpx/anyio/tenacity rely on)."""
    task = asyncio.current_task()
    seen = [type(task).__name__ if isinstance(task, asyncio.Task) else f"not-a-Task:{type(task).__name__}"]
    try:
        ref = weakref.ref(task)
        seen.append("weakref" if ref() is task else "weakref-to-something-else")
    except TypeError as exc:
        seen.append(f"weakref-failed:{exc}")
    name = task.get_name() if task is not None else None
    seen.append("named" if isinstance(name, str) and name else f"unnamed:{name!r}")
    seen.append("running" if task is not None and not task.done() else "done?")
    seen.append("in-all-tasks" if task in asyncio.all_tasks() else "not-in-all-tasks")
    await asyncio.sleep(0)
    seen.append("same-after-await" if asyncio.current_task() is task else "changed-after-await")
    await asyncio.sleep(0.001)
    seen.append("same-after-timer" if asyncio.current_task() is task else "changed-after-timer")
    # A task may cancel itself and go on after catching it, as under asyncio.run.
    task.cancel()
    try:
        await asyncio.sleep(10)
        seen.append("cancel-ignored")
    except asyncio.CancelledError:
        seen.append("cancelled-inside")
        if hasattr(task, "uncancel"):  # 3.11+: leave the task as if never cancelled
            task.uncancel()
    seen.append("still-same" if asyncio.current_task() is task else "changed-after-cancel")
    task.set_name(f"conformance-{json.loads(arg)['row']}")
    seen.append("renamed" if task.get_name() == f"conformance-{json.loads(arg)['row']}" else "rename-lost")
    return " ".join(seen)


async def _double_later(x: int) -> int:
    await asyncio.sleep(0.001 * x)
    return 2 * x


async def _fail_soon() -> None:
    await asyncio.sleep(0.001)
    raise ValueError("inner failure")


EXPECTED_TIMEOUTS = "fits fired group=[0, 2, 4] group-error=ValueError still-running"


async def timeouts_and_groups(arg: str) -> str:
    """``asyncio.timeout`` and ``TaskGroup`` (3.11+); ``wait_for`` and ``gather`` on 3.10, which
    has neither -- the same observations either way."""
    seen = []
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(30):
            await asyncio.sleep(0.001)
        seen.append("fits")
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
            seen.append("did-not-fire")
        except TimeoutError:
            seen.append("fired")
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(_double_later(i)) for i in range(3)]
        seen.append(f"group={[t.result() for t in tasks]}")
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(_fail_soon())
                tg.create_task(asyncio.sleep(30))
            seen.append("group-error=none")
        except BaseExceptionGroup as group:  # noqa: F821 -- a builtin from 3.11 on
            seen.append("group-error=" + ",".join(type(e).__name__ for e in group.exceptions))
    else:
        await asyncio.wait_for(asyncio.sleep(0.001), 30)
        seen.append("fits")
        try:
            await asyncio.wait_for(asyncio.sleep(30), 0.05)
            seen.append("did-not-fire")
        except asyncio.TimeoutError:
            seen.append("fired")
        seen.append(f"group={list(await asyncio.gather(*(_double_later(i) for i in range(3))))}")
        try:
            await asyncio.gather(_fail_soon(), asyncio.sleep(0.01))
            seen.append("group-error=none")
        except ValueError as exc:
            seen.append(f"group-error={type(exc).__name__}")
    # The inner timeouts' cancellations must not leak into the call itself.
    await asyncio.sleep(0.001)
    seen.append("still-running")
    return " ".join(seen)


THREAD_VAR: contextvars.ContextVar = contextvars.ContextVar("conformance_thread_var", default="unset")
EXPECTED_THREADS = "to_thread ctx-copied executor shield-survived-cancel shielded=7"


def _in_thread(expected: str) -> str:
    if threading.current_thread() is threading.main_thread():
        return "ran-on-main-thread"
    return "ctx-copied" if THREAD_VAR.get() == expected else f"ctx-missing:{THREAD_VAR.get()}"


async def threads_and_shield(arg: str) -> str:
    """``asyncio.to_thread`` (context copied), ``loop.run_in_executor``, ``asyncio.shield``."""
    row = str(json.loads(arg)["row"])
    THREAD_VAR.set(row)
    seen = ["to_thread", await asyncio.to_thread(_in_thread, row)]
    loop = asyncio.get_running_loop()
    seen.append("executor" if await loop.run_in_executor(None, sum, [1, 2, 3]) == 6 else "executor-wrong")

    inner_done = asyncio.Event()

    async def inner() -> int:
        await asyncio.sleep(0.02)
        inner_done.set()
        return 7

    inner_task = asyncio.ensure_future(inner())
    waiter = asyncio.ensure_future(asyncio.shield(inner_task))
    await asyncio.sleep(0)
    waiter.cancel()  # cancels the waiter, not the shielded task
    try:
        await waiter
    except asyncio.CancelledError:
        pass
    await asyncio.wait_for(inner_done.wait(), 30)
    seen.append("shield-survived-cancel" if not inner_task.cancelled() else "shield-failed")
    seen.append(f"shielded={await asyncio.shield(inner_task)}")
    return " ".join(seen)


EXPECTED_PRIMITIVES = "event queue=[0, 1, 2, 3] gather=[1, 2, 3] max-in-semaphore=2 first-completed as_completed=3 future"


async def primitives(arg: str) -> str:
    """Event, Queue, gather, Semaphore, wait(FIRST_COMPLETED), as_completed and a loop future."""
    seen = []
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(0.001, event.set)
    await asyncio.wait_for(event.wait(), 30)
    seen.append("event")

    queue: asyncio.Queue = asyncio.Queue(maxsize=2)

    async def produce() -> None:
        for i in range(4):
            await queue.put(i)
        await queue.put(None)

    producer = asyncio.ensure_future(produce())
    got = []
    while (item := await queue.get()) is not None:
        got.append(item)
    await producer
    seen.append(f"queue={got}")

    async def value_after(v: int) -> int:
        await asyncio.sleep(0.001 * v)
        return v

    seen.append(f"gather={list(await asyncio.gather(*(value_after(v) for v in (1, 2, 3))))}")

    semaphore = asyncio.Semaphore(2)
    inside = peak = 0

    async def limited() -> None:
        nonlocal inside, peak
        async with semaphore:
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.005)
            inside -= 1

    await asyncio.gather(*(limited() for _ in range(6)))
    seen.append(f"max-in-semaphore={peak}")

    fast = asyncio.ensure_future(value_after(0))
    slow = asyncio.ensure_future(asyncio.sleep(30))
    done, pending = await asyncio.wait({fast, slow}, return_when=asyncio.FIRST_COMPLETED)
    slow.cancel()
    seen.append("first-completed" if done == {fast} else "wait-wrong")
    finished = [await f for f in asyncio.as_completed([value_after(1), value_after(2), value_after(0)])]
    seen.append(f"as_completed={len(finished)}")
    future = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.set_result, "x")
    seen.append("future" if await future == "x" else "future-wrong")
    return " ".join(seen)


ROW_VAR: contextvars.ContextVar = contextvars.ContextVar("conformance_row", default=None)


async def context_isolation(arg: str) -> str:
    """Set a ContextVar to this row's id; another row's call must never see it (every call starts
    from a clean copy of the context, as each ``asyncio.run``/``create_task`` would)."""
    row = json.loads(arg)["row"]
    before = ROW_VAR.get()
    ROW_VAR.set(row)
    await asyncio.sleep(0.001 * (row % 5))  # interleave with the other calls on the loop
    after = ROW_VAR.get()
    return f"before={before} after={'own' if after == row else after}"
