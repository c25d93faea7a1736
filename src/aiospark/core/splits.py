"""When a failed batch call is split in halves, and what the split may cost.

A batch call that fails (after its retries) is split only when a split can fix it: when its error
may belong to some of its rows (:func:`may_be_rows`). An error the function marks so
(:class:`~aiospark.core.errors.BadInput`) always is; an error the retry strategy would retry
(transient: its retries ran out) never is, nor a timeout, a rate limit (a ``retry_after``, HTTP
429), an unavailable service (502/503/504, a refused or reset connection, an error marked
``retryable``) or a spent budget. Any other error -- one the user's exception predicate does not
retry, or any error without a retry strategy -- may be a row's.

The two halves run at once (a :class:`Split`). A half that fails with an error that may be its
rows' waits for the other half: when both fail with one same error (type and message), the error
is not any one row's so much as every part's -- the halves are split once more, and when their
own halves fail alike again, those rows get the error without more calls. A half continues the
batch's retries (one back-off sequence per batch, shared by its halves) instead of starting the
strategy over.

So a batch of ``n`` rows makes at most ``2n - 1`` calls (the bisection tree) plus
``max_retries`` retries, billing at most ``n * (ceil(log2 n) + 1) + max_retries * n`` rows -- the
worst case, when every row fails with its own error. A service that is down costs
``1 + max_retries`` calls when its error is retried, and at most 7 calls (the batch, its halves
and its quarters) when it is not.

Example (what the batch caller does with a failed call of ``rows``)::

    if may_be_rows(error, retried_out) and len(rows) > 1:
        split = Split(suspect=False)
        run(first_half, split); run(second_half, split)
"""
from __future__ import annotations

import asyncio
from typing import Any

from .durable import BudgetExhausted
from .errors import BadInput

#: HTTP statuses that are the service's state, never a row's: rate limited, unavailable
_SERVICE_STATUSES = (429, 502, 503, 504)


def may_be_rows(exc: BaseException, retried_out: bool) -> bool:
    """Whether ``exc``, the error a batch call ended with, may belong to some of its rows (so a
    split can isolate them). ``retried_out``: the retry strategy would retry ``exc`` (its
    retries ran out)."""
    if isinstance(exc, BadInput):
        return True
    if retried_out or isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError, BudgetExhausted)):
        return False
    try:
        return not _service_error(exc)
    except Exception:  # an exception whose attributes raise: nothing tells it is the service's
        return True


def _service_error(exc: BaseException) -> bool:
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool) and retry_after > 0:
        return True  # a 429's Retry-After, read by the function
    if getattr(exc, "retryable", None) is True:  # aiospark.connectors' errors, e.g. a refused connection
        return True
    status = _status(exc)
    if status is None:
        status = _status(getattr(exc, "response", None))  # httpx.HTTPStatusError, requests-style errors
    return status in _SERVICE_STATUSES


def _status(obj: Any) -> Any:
    """An HTTP status read from an exception or a response (aiohttp: ``status``, httpx: ``status_code``)."""
    if obj is None:
        return None
    status = getattr(obj, "status", None)
    return status if isinstance(status, int) else getattr(obj, "status_code", None)


def same_error(a: BaseException, b: BaseException) -> bool:
    """Whether two halves failed with one same error: the same type and message."""
    if type(a) is not type(b):
        return False
    try:
        return str(a) == str(b)
    except Exception:  # a __str__ that raises: not known to be the same
        return False


class Split:
    """The two halves of a failed batch call, run at once. The first half to be over waits here
    (``first``: its indices and the error a split may fix, or None) until the other is over."""

    __slots__ = ("suspect", "first", "over")

    def __init__(self, suspect: bool):
        #: this split's batch and its sibling half failed with one same error already
        self.suspect = suspect
        self.first: tuple[list[int], BaseException | None] | None = None
        self.over = 0

    def waiting(self) -> list[int] | None:
        """The indices of a half that failed and waits for the other (taken: asked once)."""
        first, self.first = self.first, None
        return first[0] if first is not None and first[1] is not None else None


__all__ = ["Split", "may_be_rows", "same_error"]
