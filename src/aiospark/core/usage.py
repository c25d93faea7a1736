"""Usage a call reports (LLM tokens, bytes, credits): added to the metrics of the operator running it.

The operator binds its metrics in ``open()`` (:func:`bind_usage`); a call then reports amounts with
:func:`record_usage`, and they add up across tasks into the job's ``usage`` like every other metric.
"""
from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping
from typing import Protocol

from .metrics import OperatorMetrics, check_amount

__all__ = ["Bill", "bill_attempt", "bill_usage", "bind_usage", "record_usage"]


class Bill(Protocol):
    """What an attempt's billed usage is reported to (a budget's reconciling charge)."""

    def bill(self, amounts: Mapping[str, float]) -> None:
        """The attempt recorded ``amounts`` (checked: finite numbers >= 0)."""


#: the current attempt's bill and the Task it runs in: usage recorded in that Task, and only
#: there, is that attempt's (a request a batcher makes for several rows runs in its own Task)
_bill: contextvars.ContextVar[tuple[object, Bill] | None] = contextvars.ContextVar("aiospark_bill", default=None)


def bill_attempt(bill: Bill) -> None:
    """Make the usage recorded from now on in the current Task go to ``bill`` too (a budget's
    gate does this as it lets an attempt through)."""
    task = asyncio.current_task()
    if task is not None:
        _bill.set((task, bill))

#: the metrics of the operator whose calls run in the current context (set by ``open()``)
_current: contextvars.ContextVar[OperatorMetrics | None] = contextvars.ContextVar(
    "aiospark_operator_metrics", default=None)


def bind_usage(metrics: OperatorMetrics) -> None:
    """Make :func:`record_usage` in calls started from the current context add to ``metrics``.

    The operator does this in ``open()``: every call's Task is created from that context (or
    from a callback of an earlier call, whose context is a copy of it), so each call sees the
    metrics of the operator that runs it, also when several operators share one event loop.
    """
    _current.set(metrics)


def record_usage(**amounts: float) -> None:
    """Add ``amounts`` (e.g. LLM tokens) to the ``usage`` of the operator running this call.

    Call it from inside a call (an ``async def`` or ``AsyncFunction.async_invoke``); the job's
    total is then in ``out.aiospark_metrics.total.usage``. Outside an operator it does nothing.
    Amounts must be finite numbers >= 0.

    Example::

        async def ask(row):
            reply = await client.chat.completions.create(...)
            aiospark.record_usage(prompt_tokens=reply.usage.prompt_tokens,
                                  completion_tokens=reply.usage.completion_tokens)
            return {"id": row["id"], "answer": reply.choices[0].message.content}
    """
    checked = {name: check_amount(name, amount) for name, amount in amounts.items()}
    pending = _bill.get()
    if pending is not None and pending[0] is _task():
        pending[1].bill(checked)
    metrics = _current.get()
    if metrics is None:
        return
    usage = metrics.usage
    for name, amount in checked.items():
        usage[name] = usage.get(name, 0) + amount


def bill_usage(**amounts: float) -> None:
    """Report ``amounts`` as billed to the current attempt's budget only, without adding them to the
    operator's ``usage`` (which the request that was billed already recorded once): a share of a
    request made for several rows, or ``0`` for an answer that bills nothing (an HTTP error).

    Example: ``bill_usage(total_tokens=0)``   # a 429: this attempt's estimate comes back
    """
    checked = {name: check_amount(name, amount) for name, amount in amounts.items()}
    pending = _bill.get()
    if pending is not None and pending[0] is _task():
        pending[1].bill(checked)


def _task() -> object:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop: no attempt's Task
        return None
