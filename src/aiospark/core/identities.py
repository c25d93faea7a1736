"""Element identities in the operator: outcomes a journal recorded, and calls equal elements share.

With a journal (and its ``identify``), the operator asks :meth:`Identities.admit` for each element
before its call starts (without one, an identity is computed only when a call asks for its
``idempotency_key()``: :mod:`aiospark.core.context`):

1. the element gets its identity (what ``aiospark.idempotency_key()`` returns inside its call);
2. an element whose outcome is recorded completes from the record -- no call;
3. an element equal (same identity) to one whose call is in flight waits for that call and gets
   its outcome (:meth:`Identities.settle`, when the first one's call is over);
4. otherwise its call starts, and its outcome is recorded when it is over.

An element whose identity is None (a NULL in its journal key) has none: it is called, never
recorded, never served from a record and never shares a call.

Recorded: what a call answered -- its results, and (if the journal keeps errors) an error that
is the row's answer (:func:`~aiospark.core.durable.is_answer`). Not recorded: a timed-out
element's outcome (its timeout handler's results or error), aiospark's own refusals (budget,
rate limiter, cost function), errors that say the service's state (a timeout, a 429, a 5xx, a
connection error), a cancelled call, and errors of aiospark's own steps (the key function, the
journal). Each element takes its outputs from its identity's outcome through the journal's
``adopt`` (a lookup join rebuilds them from the element's own input row).

Example (what the operator does)::

    identities = Identities(identify, journal, report=operator_call_over, fail=operator_fail)
    if not identities.admit(call):
        caller.start(call)
    ...
    identities.settle(call, results, error, what)   # in the operator's report, before the rest
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .call_entry import CALL, Call, Report
from .durable import Identify, Recorded, TaskJournal, is_answer, recorded_outcome
from .elements import Record, StreamElement
from .result_future import ResultFuture

#: ``what`` of an outcome that came from the journal, or from the call of an equal element
RECORDED = "recorded outcome"
SHARED = "shared call"


def own_answer(call: Call, what: str) -> bool:
    """Whether ``call``'s outcome is what its own call answered (not a timeout's results, a record
    or a shared call's): only that may be recorded."""
    return what in ("", CALL) and not call.timed_out


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
        #: ``adopt(value, results, recorded) -> outputs`` (see the module docstring), or None
        self._adopt = getattr(journal, "adopt", None)
        #: ``recorded_run(identities) -> (outputs, n)``: a journal's bulk read (see TaskJournal)
        self._bulk = getattr(journal, "recorded_run", None)
        #: ``record_value(identity, value, results, error)``: ``record`` with the element itself
        self._record_value = getattr(journal, "record_value", None)
        #: ``id(value) -> (value, identity, read, recorded)`` of elements :meth:`recorded_run`
        #: identified (and read, when ``read``) but did not take: :meth:`admit` takes them from here
        #: instead of asking again (one identity per element; the value is held, so its id stays its own)
        self._known: dict[int, tuple[Any, str | None, bool, Recorded | None]] = {}
        #: whether :meth:`recorded_run` is worth asking before each admission: not for a journal
        #: that says runs of recorded elements are rare (``looks_ahead = False``: asking costs
        #: every element an identity and a read that admit() makes anyway)
        self.looks_ahead = bool(getattr(journal, "looks_ahead", True))

    def recorded_run(self, values: Sequence[Any], start: int, end: int) -> tuple[int, list[Any]]:
        """How many of the leading ``values[start:end]`` have recorded results, and their outputs
        in order (one list): a rerun's recorded rows enter the queue as one completed entry
        (:class:`RecordedRun`). It stops at the first element that must go through
        :meth:`admit` (not recorded, no identity, a recorded error, or an error of its own)."""
        if self._bulk is not None:
            return self._bulk_run(values, start, end)
        identify, recorded, adopt, known = self.identify, self.journal.recorded, self._adopt, self._known
        outputs: list[Any] = []
        at = start
        while at < end:
            value = values[at]
            try:
                identity = identify(value)
                hit = recorded(identity) if identity is not None else None
                if hit is None or hit.results is None:
                    known[id(value)] = (value, identity, True, hit)
                    break
                results = hit.results if adopt is None else adopt(value, hit.results, True)
            except Exception:  # admit() asks again and makes the error this element's
                break
            outputs += results
            at += 1
        return at - start, outputs

    def _bulk_run(self, values: Sequence[Any], start: int, end: int) -> tuple[int, list[Any]]:
        """:meth:`recorded_run` through the journal's bulk read, over windows that double while
        every element of one is recorded (1, 2, 4, ...): a fresh run identifies no element ahead
        of its admission, a rerun reads its recorded rows a few windows at a time."""
        identify, bulk, known = self.identify, self._bulk, self._known
        assert bulk is not None
        outputs: list[Any] = []
        at, window = start, 1
        while at < end:
            ids: list[str | None] = []
            failed = False
            for value in values[at:min(end, at + window)]:
                hit = known.pop(id(value), None) if known else None
                if hit is not None and hit[0] is value:
                    ids.append(hit[1])
                    continue
                try:
                    ids.append(identify(value))
                except Exception:  # admit() asks again and makes the error this element's
                    failed = True
                    break
            got, n = bulk(ids)
            outputs += got
            for j in range(n, len(ids)):  # identified, not taken: admit() takes them from here
                value = values[at + j]
                known[id(value)] = (value, ids[j], False, None)
            at += n
            if failed or n < len(ids):
                break
            window *= 2
        return at - start, outputs

    def admit(self, call: Call) -> bool:
        """Give ``call`` its identity; True when it needs no call of its own: it completed from
        the journal, or it waits for the call of an equal element in flight."""
        value = call.element[0]
        known = self._known.pop(id(value), None) if self._known else None
        try:
            if known is not None and known[0] is value:  # recorded_run identified it already
                _, identity, read, recorded = known
                if identity is None:
                    return False
                call.identity = identity
                if not read:
                    recorded = self.journal.recorded(identity)
            else:
                identity = self.identify(value)
                if identity is None:  # no identity (a NULL in its key): called, never recorded
                    return False
                call.identity = identity
                recorded = self.journal.recorded(identity)
            if recorded is not None:
                results, error = recorded_outcome(recorded)
                if results is not None and self._adopt is not None:
                    results = self._adopt(value, results, True)
        except Exception as exc:  # identify(), the journal's read or adopt raised: this element's error
            self._report(call, None, exc, "row identity" if call.identity is None else "journal")
            return True
        if recorded is not None:
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
        # recorded: what the call answered (see the module docstring)
        if own_answer(call, what) and (error is None or is_answer(error)):
            try:
                record_value = self._record_value
                if record_value is not None:  # a journal that keeps the row's key values too
                    record_value(identity, call.element[0], results, error)
                else:
                    journal.record(identity, results, error)
            except Exception as exc:
                self._fail(call.value, exc, "journal")
                return
        adopt = self._adopt
        for other in sharing.pop(identity, ()):
            outputs, failure = results, error
            if results is not None and adopt is not None:
                try:
                    outputs = adopt(other.element[0], results, False)
                except Exception as exc:  # that element's error
                    outputs, failure = None, exc
            self._report(other, outputs, failure, SHARED)


class RecordedRun(ResultFuture):
    """Consecutive elements whose outcomes are recorded: one queue entry, completed as it enters
    the queue (no call, no task, no deadline), emitted through the operator's one emit path in
    its place. It counts its elements against capacity, as a batch does."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[Any]):
        self.element = (values[0], None)
        self._results = self._exception = self._listener = self._segment = None
        self._done = False
        self.values = values

    @property
    def size(self) -> int:  # type: ignore[override]
        """Elements held: what the run counts against capacity."""
        return len(self.values)

    def inputs(self) -> list[StreamElement]:
        return [Record(v) for v in self.values]
