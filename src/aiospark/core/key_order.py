"""Key-ordered calls: elements with equal keys are called one after another, in input order.

Like Flink's key-ordered async mode (FLIP-519): in a change stream, the updates of one key must
reach the service -- and the output -- in the order they happened, while different keys still
run concurrently. Every element enters the operator's queue at once (capacity counts it); only
its call waits: :meth:`KeyTurns.admit` says whether the element's key is idle (start now) or
busy (wait behind the call under way). When a call is over and its element has completed,
:meth:`KeyTurns.next_after` hands out the next element of that key. An element completes only
after the one before it of its key, so any queue emits equal keys in input order.

Keys compare as Spark groups them: every NaN is one key (each NaN is a float object of its own
and NaN != NaN, so a dict would hold each one apart), inside tuple keys too -- a ``Decimal`` NaN
(quiet, negative or signaling) included, which is float NaN's key, as ``Decimal(1)`` is ``1.0``'s; ``-0.0`` and ``0.0``
are one key already (equal, with equal hashes).

A deadline counts from when the element entered the operator, as it does for a rate-limit
wait: an element whose deadline passes while it waits for its turn times out when its turn
comes (its timeout handler then runs, still in key order).

Example (what the operator does)::

    turns = KeyTurns(lambda row: row["account"])
    if turns.admit(call):
        caller.start(call)
    ...
    # the call is over and its element completed:
    following = turns.next_after(call)
    if following is not None:
        caller.start(following)
    # or, handing each next turn on in a loop (what the operator does):
    turns.hand_on(call, caller.start)
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .call_entry import Call


class KeyTurns:
    """Whose turn it is, per key (see the module docstring). ``key_of(value)`` must return a
    hashable key; elements it raises for are the operator's to fail."""

    __slots__ = ("key_of", "_waiting", "_keys", "_handing")

    def __init__(self, key_of: Callable[[Any], Any]):
        if not callable(key_of):
            raise TypeError(f"key must be a callable value -> hashable key, got {type(key_of).__name__}")
        self.key_of = key_of
        #: busy key -> the elements waiting behind its running call, oldest first
        self._waiting: dict[Any, deque[Call]] = {}
        #: element -> its key, while the element is held
        self._keys: dict[Call, Any] = {}
        #: calls whose key's next turn is to be handed over (see hand_on), while one is
        self._handing: list[Call] | None = None

    def admit(self, call: Call) -> bool:
        """``call`` entered the queue: ``True`` if its call may start now, ``False`` if it waits
        for its turn. Raises what ``key_of`` raises (or ``TypeError`` for an unhashable key)."""
        key = one_nan(self.key_of(call.element[0]))
        waiting = self._waiting.get(key)
        self._keys[call] = key
        if waiting is None:
            self._waiting[key] = deque()
            return True
        waiting.append(call)
        return False

    def next_after(self, call: Call) -> Call | None:
        """``call`` is over: the next element of its key, whose turn it is now (``None``: none)."""
        key = self._keys.pop(call, _NO_KEY)
        if key is _NO_KEY:
            return None  # its key could not be computed: it never took a turn
        waiting = self._waiting[key]
        if waiting:
            return waiting.popleft()
        del self._waiting[key]
        return None

    def hand_on(self, call: Call, take: Callable[[Call], None]) -> None:
        """``call`` is over: the next element of its key takes its turn, ``take(element)``. A turn
        that completes at once (a record, an eager call) hands the next turn over in this loop, not
        by recursion: a key with a long run of recorded elements must not exhaust the stack."""
        handing = self._handing
        if handing is not None:  # inside the loop below: it takes this turn over next
            handing.append(call)
            return
        self._handing = handing = [call]
        try:
            while handing:
                following = self.next_after(handing.pop())
                if following is not None:
                    take(following)
        finally:
            self._handing = None

    def __len__(self) -> int:
        """Keys with a call under way."""
        return len(self._waiting)


_NO_KEY = object()
#: the one NaN every NaN key becomes: a dict finds it by identity (NaN != NaN)
_NAN = math.nan


def one_nan(key: Any) -> Any:
    """``key`` with every NaN in it (at the top, or inside tuples; float or ``Decimal``) made the
    same NaN object.

    Example::

        >>> one_nan(float("nan")) is one_nan(float("nan"))
        True
    """
    kind = type(key)
    if kind is str or kind is int:
        return key
    if kind is tuple:
        return tuple([one_nan(part) for part in key])
    if isinstance(key, float):
        return _NAN if key != key else key
    if isinstance(key, Decimal) and key.is_nan():  # NaN, -NaN, sNaN (which cannot even be hashed)
        return _NAN
    return key
