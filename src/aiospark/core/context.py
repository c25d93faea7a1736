"""What the code of a call can ask about its call: :func:`time_left` and :func:`idempotency_key`.

Each call's Task sets one context variable, once, when it starts: its *call context*, a plain
tuple ``(deadline, loop, identity, identify, value)``:

* ``deadline``: when the row's ``timeout`` runs out, in ``loop``'s time (None: no timeout);
* ``identity``: the row's identity when the operator computed it (a journal needs it to look the
  row up before the call), else None;
* ``identify`` and ``value``: how to compute the identity when the call asks for it (no journal:
  most calls never ask, so nothing is computed or allocated per row for them).

A context variable, not a lookup by ``asyncio.current_task()``: tasks the call starts (a
``gather``) copy it, so their code gets the same answers. One variable and a tuple per call,
because each ``ContextVar.set`` and each object made per row is a measurable part of a no-op
call's price (docs/design.md, "Per-row budget").

Example (inside a call)::

    async def enrich(row):
        headers = {"Idempotency-Key": aiospark.idempotency_key()}
        async with session.post(url, json=row, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=aiospark.time_left())) as r:
            return await r.json()
"""
from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["CallContext", "current_call", "idempotency_key", "time_left"]

#: ``(deadline, loop, identity, identify, value)``: see the module docstring
CallContext = tuple[float | None, asyncio.AbstractEventLoop, str | None, Callable[[Any], str | None] | None, Any]

#: the context of the call running in this task (set in the call's own Task, never reset: the
#: Task's context is its own copy)
current_call: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar("aiospark_call", default=None)


def time_left() -> float | None:
    """Seconds until the deadline of the call running in this task (its row's ``timeout``,
    counted from when the row entered the queue, retries included); ``None`` outside a call or
    when the operator has no timeout. May be <= 0 once the deadline has passed.

    Give it to a client whose requests must not outlive the row, e.g.::

        async def enrich(row):
            left = aiospark.time_left()
            resp = await session.get(url, timeout=aiohttp.ClientTimeout(total=left))
    """
    context = current_call.get()
    if context is None or context[0] is None:
        return None
    # the call's own loop: get_running_loop() costs a system call on 3.11
    return context[0] - context[1].time()


def idempotency_key(namespace: str | None = None) -> str:
    """Inside a call: a string that is the same for the same row in every attempt, task retry and
    rerun (its journal key, else its input values) and differs between rows; for a service's
    ``Idempotency-Key`` header, so that a side effect made twice is applied once.

    On Spark it is a UUID namespaced by the function's fingerprint (its name, code and state):
    two functions (``charge``, ``refund``) never send the same key for the same row.
    ``namespace`` (a non-empty string) gives another key for another side effect of the same
    call, e.g. ``idempotency_key("email")`` next to ``idempotency_key("charge")``.

    Example::

        async def charge(row):
            headers = {"Idempotency-Key": aiospark.idempotency_key()}
            async with session.post(url, json=row, headers=headers) as r:
                return await r.json()
    """
    if namespace is not None and (not isinstance(namespace, str) or not namespace or len(namespace) > 200):
        raise ValueError(f"idempotency_key(namespace=...) takes a non-empty string of at most 200 characters "
                         f"naming the side effect, got {namespace!r}")
    context = current_call.get()
    key = None
    if context is not None:
        if context[3] is not None:
            key = context[3](context[4])  # computed when asked; the same input gives the same key
        elif context[2] is not None:
            key = context[2]
    if key is None:
        raise RuntimeError("aiospark.idempotency_key() is called inside a call of ordered_wait, "
                           "unordered_wait, async_udf or lookup_join (one row's call): not outside "
                           "one, and not in a batch call (batch_size=), whose rows each have their own")
    if namespace is None:
        return key
    return str(uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, "aiospark:idempotency:" + namespace), key))
