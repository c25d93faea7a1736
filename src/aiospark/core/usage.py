"""Usage a call reports (LLM tokens, bytes, credits): added to the metrics of the operator running it.

The operator binds its metrics in ``open()`` (:func:`bind_usage`); a call then reports amounts with
:func:`record_usage`, and they add up across tasks into the job's ``usage`` like every other metric.
"""
from __future__ import annotations

import contextvars

from .metrics import OperatorMetrics, check_amount

__all__ = ["bind_usage", "record_usage"]

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
    metrics = _current.get()
    if metrics is None:
        return
    usage = metrics.usage
    for name, amount in checked.items():
        usage[name] = usage.get(name, 0) + amount
