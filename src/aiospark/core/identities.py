"""Element identities in the operator: outcomes a journal recorded, and calls equal elements share.

With a journal (and its ``identify``), the operator asks :meth:`Identities.admit` for each element
before its call starts (without one, an identity is computed only when a call asks for its
``idempotency_key()``: :mod:`aiospark.core.context`):

1. the element gets its identity (what ``aiospark.idempotency_key()`` returns inside its call);
2. an element whose outcome is recorded completes from the record -- no call;
3. an element equal (same identity) to one whose call is in flight waits for that call and gets
   its outcome (:meth:`Identities.settle`, when the first one's call is over);
4. otherwise its call starts, and its outcome is recorded when it is over.

Not recorded: a timeout handler's results and a budget refusal (neither is what the service
answered), nor a cancelled call.

Example (what the operator does)::

    identities = Identities(identify, journal, report=operator_call_over, fail=operator_fail)
    if not identities.admit(call):
        caller.start(call)
    ...
    identities.settle(call, results, error, what)   # in the operator's report, before the rest
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .calls import TIMEOUT_RESULTS, Call, Report
from .durable import BudgetExhausted, Identify, TaskJournal, recorded_outcome

#: ``what`` of an outcome that came from the journal, or from the call of an equal element
RECORDED = "recorded outcome"
SHARED = "shared call"


class Identities:
    """The identities of one operator's elements (see the module docstring). ``report`` is the
    operator's per-element report, ``fail(value, exc, what)`` fails the operator."""

    def __init__(self, identify: Identify, journal: TaskJournal, report: Report,
                 fail: Callable[[Any, BaseException, str], None]):
        self.identify = identify
        self.journal = journal
        #: identity -> the elements waiting for the call of the first one in flight
        self._sharing: dict[str, list[Call]] = {}
        self._report = report
        self._fail = fail

    def admit(self, call: Call) -> bool:
        """Give ``call`` its identity; True when it needs no call of its own: it completed from
        the journal, or it waits for the call of an equal element in flight."""
        try:
            identity = call.identity = self.identify(call.element[0])
            recorded = self.journal.recorded(identity)
        except Exception as exc:  # identify() or the journal's read raised: this element's error
            self._report(call, None, exc, "row identity" if call.identity is None else "journal")
            return True
        if recorded is not None:
            results, error = recorded_outcome(recorded)
            self._report(call, results, error, RECORDED)
            return True
        sharing = self._sharing.get(identity)
        if sharing is not None:
            sharing.append(call)
            return True
        self._sharing[identity] = []
        return False

    def waits(self, call: Call) -> bool:
        """Whether ``call`` waits for the call of an equal element (its deadline then needs no
        action: that call entered the queue first, so its outcome comes no later)."""
        return call.task is None and call.identity is not None and call in self._sharing.get(call.identity, ())

    def settles(self, call: Call, what: str) -> bool:
        """Whether ``call``'s outcome is its own call's, to record and to share."""
        return what not in (RECORDED, SHARED) and call.identity is not None

    def settle(self, call: Call, results: list[Any] | None, error: BaseException | None, what: str) -> None:
        """Record the outcome of ``call``'s own call, then hand it to the elements that shared it."""
        identity, journal, sharing = call.identity, self.journal, self._sharing
        assert identity is not None  # settles() said so
        # recorded: results and the call's own errors; not a refused budget, a cancellation, a SystemExit
        if what != TIMEOUT_RESULTS and (error is None or isinstance(error, Exception)
                                        and not isinstance(error, BudgetExhausted)):
            try:
                journal.record(identity, results, error)
            except Exception as exc:
                self._fail(call.value, exc, "journal")
                return
        for other in sharing.pop(identity, ()):
            self._report(other, results, error, SHARED)
