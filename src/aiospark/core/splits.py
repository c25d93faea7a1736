"""When a failed batch call is split, which part is split next, and what the splits may cost.

A batch call that fails (after its retries) is split only when a split can fix it: when its error
may belong to some of its rows (:func:`may_be_rows`). An error the function marks so
(:class:`~aiospark.core.errors.BadInput`) always is; an error the retry strategy would retry
(transient: its retries ran out) never is, nor a timeout, a rate limit (a ``retry_after``), an
HTTP status of the service (5xx, 408, 429, read from ``status``, ``status_code`` or
``response.status_code``), a lost or refused connection (any ``OSError``, and httpx's, httpcore's
and aiohttp's transport errors, recognized by name without importing them), an error marked
``retryable`` or a spent budget. Any other error -- one the user's exception predicate does not
retry, or any error without a retry strategy -- may be a row's.

Then the probe rule (a :class:`SplitTree` per failed batch) tells a dead service, whose error is
every row's, from rows that fail alike but alone:

* the batch's two halves run at once. While no part of the batch has succeeded ("probing"), when
  both halves of a part fail alike (same type and message, :func:`same_error`, and the same as
  the parts before them), only ONE of them -- the probe -- is split further; the other waits;
* as soon as any part of the batch succeeds, or two parts fail with different errors, or the
  function raises :class:`~aiospark.core.errors.BadInput`, the errors are the rows' own
  ("isolating"): every waiting part is split, and from then on every failed part is split in
  halves, at once, until each bad row fails alone;
* when the probe is down to a single row that fails alike, the error is every row's: each
  waiting row gets its part's error, with no more calls. (When the probe's parts end with errors
  a split cannot fix -- a timeout, a lost connection --, the waiting rows get their error too.)

A part continues the batch's retries (one back-off sequence per batch) instead of starting over.

The bound: a batch of ``n`` rows makes at most ``2n - 1`` calls (each node of the bisection tree
at most once) plus ``max_retries`` retries, billing at most ``n * (ceil(log2 n) + 1) +
max_retries * n`` rows -- reached when every row fails with an error of its own. A service that
fails every call with one same error costs ``1 + 2 * ceil(log2 n)`` calls (64 rows: 13, billing
about ``3n`` rows) when the error may be a row's, and ``1 + max_retries`` when it is retried or
never split. Scattered bad rows failing with one message are isolated: the first part that
succeeds turns probing into isolating.

Example (what the batch caller does with a failed call of ``rows``)::

    if may_be_rows(error, retried_out) and len(rows) > 1:
        tree = SplitTree(isolating=isinstance(error, BadInput))
        run(first_half, tree); run(second_half, tree)
"""
from __future__ import annotations

import asyncio
from typing import Any

from .durable import BudgetExhausted
from .errors import BadInput

#: HTTP statuses that say the service's state, never a row's: a request timeout, rate limited
_SERVICE_STATUSES = (408, 429)

#: exception classes, by top-level module and name, that say the connection failed (the transport
#: of httpx / httpcore / aiohttp; matched along the class's MRO, so subclasses count too). Local
#: protocol errors and unsupported URLs are left out: a row's value can cause those.
_TRANSPORT_ERRORS = frozenset({
    ("httpx", "NetworkError"), ("httpx", "TimeoutException"), ("httpx", "RemoteProtocolError"),
    ("httpx", "ProxyError"),
    ("httpcore", "NetworkError"), ("httpcore", "TimeoutException"), ("httpcore", "RemoteProtocolError"),
    ("httpcore", "ProxyError"),
    ("aiohttp", "ClientConnectionError"), ("aiohttp", "ClientPayloadError"),
})


def may_be_rows(exc: BaseException, retried_out: bool) -> bool:
    """Whether ``exc``, the error a batch call ended with, may belong to some of its rows (so a
    split can isolate them). ``retried_out``: the retry strategy would retry ``exc`` (its
    retries ran out)."""
    if isinstance(exc, BadInput):
        return True
    if retried_out or isinstance(exc, (OSError, asyncio.TimeoutError, BudgetExhausted)):
        return False  # OSError: TimeoutError, ConnectionError, aiohttp's ClientOSError, ...
    try:
        return not (_transport_error(exc) or _service_error(exc))
    except Exception:  # an exception whose attributes raise: nothing tells it is the service's
        return True


def _transport_error(exc: BaseException) -> bool:
    for cls in type(exc).__mro__:
        if (cls.__module__.partition(".")[0], cls.__name__) in _TRANSPORT_ERRORS:
            return True
    return False


def _service_error(exc: BaseException) -> bool:
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool) and retry_after > 0:
        return True  # a 429's Retry-After, read by the function
    if getattr(exc, "retryable", None) is True:  # aiospark.connectors' errors, e.g. a refused connection
        return True
    status = _status(exc)
    if status is None:
        status = _status(getattr(exc, "response", None))  # httpx.HTTPStatusError, requests-style errors
    return status is not None and (status >= 500 or status in _SERVICE_STATUSES)


def _status(obj: Any) -> int | None:
    """An HTTP status read from an exception or a response (aiohttp: ``status``, httpx: ``status_code``)."""
    if obj is None:
        return None
    for name in ("status", "status_code"):
        status = getattr(obj, name, None)
        if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
            return status
    return None


def same_error(a: BaseException, b: BaseException) -> bool:
    """Whether two parts failed with one same error: the same type and message."""
    if type(a) is not type(b):
        return False
    try:
        return str(a) == str(b)
    except Exception:  # a __str__ that raises: not known to be the same
        return False


#: one part of a batch: the indices of its elements and the error its call failed with
Part = tuple[list[int], BaseException]


class SplitTree:
    """The splits of one failed batch call (see the module docstring): whether its errors are
    known to be the rows' own (``isolating``), the error the parts repeat while probing, the
    parts waiting for the probe, and the probe's pair under way."""

    __slots__ = ("isolating", "error", "waiting", "pending", "failed")

    def __init__(self, isolating: bool):
        self.isolating = isolating
        #: the error every failed part repeated so far (probing)
        self.error: BaseException | None = None
        #: parts set aside while the probe is split further (probing)
        self.waiting: list[Part] = []
        #: parts of the probe's pair still running, and those of its parts that failed (probing)
        self.pending = 0
        self.failed: list[Part] = []

    def part_over(self, indices: list[int], answered: bool,
                  error: BaseException | None) -> tuple[list[Part], list[Part]]:
        """A part (the elements at ``indices``) is over: it ``answered``, failed with ``error`` (one
        a split may fix), or its rows got another outcome. Returns the parts to split now (a
        single row: to report) and the parts whose rows get their error with no more calls."""
        to_split = self._isolate() if answered and not self.isolating else []  # errors are rows'
        if self.isolating:
            if error is not None:
                to_split.append((indices, error))
            return to_split, []
        if error is not None:
            if not self.alike(error):  # another error than the parts before it: it depends on the rows
                return self._isolate() + [(indices, error)], []
            self.failed.append((indices, error))
        self.pending -= 1
        if self.pending > 0:
            return [], []  # its sibling still runs
        failed, self.failed = self.failed, []
        if not failed:  # the probe's parts ended with errors a split cannot fix: so do the waiting
            return [], self.held()
        failed.sort(key=lambda part: len(part[0]))
        probe = failed[0]  # the smaller part: the fewest rows billed again
        if len(probe[0]) == 1:  # a single row fails as every part did: the error is every row's
            return [], failed + self.held()
        self.waiting += failed[1:]
        return [probe], []

    def _isolate(self) -> list[Part]:
        self.isolating = True
        return self.held()

    def alike(self, error: BaseException) -> bool:
        """Whether ``error`` repeats the error of the parts before it (the first one sets it)."""
        if isinstance(error, BadInput):
            return False  # the function says it is a row's
        if self.error is None:
            self.error = error
            return True
        return same_error(self.error, error)

    def held(self) -> list[Part]:
        """Every part not running (waiting, or a failed half whose sibling runs), taken."""
        held = self.waiting + self.failed
        self.waiting, self.failed = [], []
        return held


__all__ = ["Part", "SplitTree", "may_be_rows", "same_error"]
