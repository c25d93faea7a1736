"""Durable calls, as the operator sees them: recorded outcomes, a budget, an idempotency key.

Flink's async operator checkpoints its in-flight elements and, after a failure, calls again only
those. Spark re-runs whole tasks, so aiospark keeps a *journal* of outcomes instead: the operator
asks it before a call (:meth:`TaskJournal.recorded`: a row already done is emitted from the record,
through the one emit path, without a call; a run of them is one queue entry completed as it
enters, :class:`aiospark.core.identities.RecordedRun`) and tells it after one (:meth:`TaskJournal.record`).
The stores (a directory of Arrow segments, Redis) live in :mod:`aiospark.journal`; this module
holds only what the pure-asyncio engine needs, so ``core`` imports neither pyarrow nor pyspark.

Every element has an *identity* (``identify(value) -> str``, given by the Spark layer: its journal
key, else its input values): the journal's key, the key that makes equal rows of one task one call,
and what :func:`~aiospark.core.context.idempotency_key` returns inside the call.

A *budget* (:class:`BudgetGate`) is asked before every attempt starts, after the rate limit:
once spent, the attempt raises :class:`BudgetExhausted` (never retried), which fails the task or,
with ``on_error``, becomes the row's error.

Example (what the Spark layer does for each task)::

    op = AsyncWaitOperator(fetch, out.append, journal=task_journal, identify=row_identity,
                           budget=task_budget)
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

__all__ = ["BudgetExhausted", "BudgetGate", "Recorded", "RecordedError", "TaskJournal", "is_answer", "not_an_answer"]

#: ``identify(value) -> str | None``: an element's identity (see the module docstring); None: it
#: has none (a NULL in its key): it is called, never recorded nor served from a record
Identify = Callable[[Any], "str | None"]

#: HTTP statuses that say the service's state, not the row's answer (timeout, too early, too many
#: requests) -- and every 5xx
_STATE_STATUSES = (408, 425, 429)

#: the attribute marking an error raised before any call of the row was made (aiospark's own
#: refusals: budget, rate limiter, cost function): see :func:`not_called`
NOT_AN_ANSWER = "aiospark_not_an_answer"


class BudgetExhausted(RuntimeError):
    """The job's :class:`aiospark.Budget` is spent: this row's call was not started."""

    aiospark_not_an_answer = True


def not_an_answer(error: BaseException) -> BaseException:
    """Mark ``error`` as raised before the row's call was made (it is not the row's answer)."""
    try:
        setattr(error, NOT_AN_ANSWER, True)
    except (AttributeError, TypeError):  # an exception type without a __dict__: its type decides
        pass
    return error


def is_answer(error: BaseException) -> bool:
    """Whether a call's final ``error`` is the row's answer, which ``keep_errors`` records.

    Not an answer: aiospark's own refusals (marked by :func:`not_called`: a spent or unreachable
    budget, the rate limiter's or a cost function's errors -- no call was made), and what says the
    service's state rather than the row's: a timeout, a connection error (``OSError``), an HTTP
    408/425/429 or 5xx status (``status`` or ``status_code``), an error its raiser marked
    ``retryable``. A rerun calls those rows again. Anything else the call raised (a 400, a 404
    that is an error, a refusal of the content) is its answer."""
    if not isinstance(error, Exception) or getattr(error, NOT_AN_ANSWER, False):
        return False
    if isinstance(error, (TimeoutError, asyncio.TimeoutError, OSError)) or getattr(error, "retryable", False) is True:
        return False
    for name in ("status", "status_code"):
        status = getattr(error, name, None)
        if isinstance(status, int) and not isinstance(status, bool) and (status in _STATE_STATUSES or status >= 500):
            return False
    return True


class Recorded(NamedTuple):
    """A recorded outcome: the call's ``results`` (its list of outputs), or its ``error`` text."""

    results: list[Any] | None
    error: str | None = None


class RecordedError(Exception):
    """A call's error as a journal kept it (its text): emitted again as that row's error."""


class TaskJournal(Protocol):
    """One task's view of a journal (made by :mod:`aiospark.journal` for each task)."""

    def recorded(self, identity: str) -> Recorded | None:
        """The outcome recorded for ``identity``, or None: the row must be called."""

    def record(self, identity: str, results: list[Any] | None, error: BaseException | None) -> None:
        """The call of ``identity`` is over: keep ``results`` (and ``error``, if the journal keeps
        errors). Must not block the loop: writing is the journal's own business."""

    # optional: ``record_value(identity, value, results, error)``, called instead of ``record``:
    # the same, with the element ``value`` itself (a journal that stores its key columns typed)
    # optional: ``adopt(value, results, recorded) -> outputs``: the outputs of element ``value``
    # from its identity's outcome (recorded, or shared from an equal element's call); a journal
    # without it hands the results over as they are
    # optional, for a journal without ``adopt``: ``recorded_run(identities) -> (outputs, n)``: the
    # outputs of the leading ``identities`` whose results are recorded, concatenated in order, and
    # how many they are (it stops at the first one without recorded results, or None): the bulk
    # read of a rerun's recorded elements (:meth:`aiospark.core.identities.Identities.recorded_run`)
    # optional: ``looks_ahead = False``: runs of recorded elements are rare, each element is asked
    # once, as it is admitted (default True: runs are looked for ahead of admission)
    # optional: ``records_only = True`` with ``settled(value, results, recordable) -> outputs``: a journal
    # whose reads were all made before the operator (the table route's key runs, where Spark served
    # the recorded rows and the task sends one element per run of equal keys): no identity, no
    # lookup and no sharing per element; each call that gave results is handed over once
    # (``recordable``: what it answered, not its timeout's results), and its element takes the
    # outputs ``settled`` returns. A failed call's element takes ``on_error``'s outputs alone.


class BudgetGate(Protocol):
    """One task's view of a budget."""

    def take(self, value: Any) -> bool | Awaitable[bool]:
        """Charge one attempt for ``value``: True (go), False (spent), or an awaitable of either
        when the task's share must be refilled first."""


def recorded_outcome(recorded: Recorded) -> tuple[list[Any] | None, BaseException | None]:
    """``(results, error)`` of a recorded outcome, as the call's report would carry them."""
    if recorded.error is not None:
        return None, RecordedError(recorded.error)
    return list(recorded.results or ()), None
