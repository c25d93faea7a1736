"""The handle of one queued element (Flink's ``ResultFuture`` / ``StreamElementQueueEntry``)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .elements import Record, StreamElement, Watermark

_new = tuple.__new__  # builds a Record without NamedTuple's Python-level __new__ (hot path)


class ResultFuture:
    """Completion handle of one element held by a queue.

    ``complete(results)`` takes an iterable of outputs (use ``[]`` to emit nothing);
    ``complete_exceptionally(exc)`` records a failure. Only the first completion counts.

    Example::

        >>> from aiospark import OrderedQueue, Record
        >>> q = OrderedQueue(2)
        >>> f = q.try_put(Record("a", 7))
        >>> f.complete(["A", "a"]); q.pop_completed()
        [Record(value='A', timestamp=7), Record(value='a', timestamp=7)]
    """

    __slots__ = ("element", "_results", "_exception", "_done", "_listener", "_segment")

    #: elements this entry holds (what it counts against the operator's capacity)
    size = 1

    def __init__(self, element: StreamElement, listener: Callable[[ResultFuture], None] | None = None):
        #: the Record or Watermark held (a Call's is its plain (value, timestamp) pair)
        self.element: Any = element
        self._results: list[Any] | None = None
        self._exception: BaseException | None = None
        self._done = False
        self._listener = listener
        self._segment: Any = None

    @property
    def done(self) -> bool:
        """True once completed, normally or exceptionally."""
        return self._done

    def complete(self, results: Iterable[Any]) -> None:
        """Complete with ``results`` (an iterable of outputs); ignored if already done."""
        if self._done:
            return
        if results is None:
            raise TypeError("ResultFuture.complete() got None: use an empty list to emit nothing")
        self._results = results if type(results) is list else list(results)
        self._done = True
        if self._listener is not None:
            self._listener(self)

    def complete_exceptionally(self, exc: BaseException) -> None:
        """Complete with a failure; ``pop_completed()`` will raise ``exc``. Ignored if already done."""
        if self._done:
            return
        if not isinstance(exc, BaseException):
            raise TypeError(f"complete_exceptionally() needs an exception instance, got {type(exc).__name__}")
        self._exception = exc
        self._done = True
        if self._listener is not None:
            self._listener(self)

    def emitted(self) -> list[StreamElement]:
        """What this entry emits once done: its results as Records, or the watermark itself."""
        if self._exception is not None:
            raise self._exception
        element = self.element
        if type(element) is Watermark:
            return [element]
        results = self._results
        if results is None:
            raise RuntimeError(f"{self!r} has not completed: nothing to emit yet")
        if len(results) == 1:
            # element[1]: a Record's timestamp (not a Watermark: returned above), faster than .timestamp
            return [_new(Record, (results[0], element[1]))]
        ts = element[1]
        return [_new(Record, (r, ts)) for r in results]

    def inputs(self) -> list[StreamElement]:
        """The input elements this entry holds (for snapshots)."""
        return [self.element]

    def emit_to(self, output: Callable[[StreamElement], object]) -> None:
        """Pass what :meth:`emitted` returns to ``output``, in order: the queues' emit path (one
        result, the common case, without building ``emitted()``'s list)."""
        results = self._results
        if results is not None and len(results) == 1:
            output(_new(Record, (results[0], self.element[1])))  # a Record's timestamp
            return
        for element in self.emitted():
            output(element)

    def emit_values_to(self, output: Callable[[list[Any]], object]) -> None:
        """Pass this record entry's results, as plain values in one list, to ``output`` (the queues'
        emit path for an operator made with ``values=True``: no Record per result)."""
        if self._exception is not None:
            raise self._exception
        results = self._results
        if results is None:
            raise RuntimeError(f"{self!r} has not completed: nothing to emit yet")
        output(results)

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        return f"<ResultFuture {state} {self.element!r}>"


def watermark_entry(watermark: Watermark) -> ResultFuture:
    """A queue entry for a watermark: complete at once."""
    entry = ResultFuture(watermark)
    entry._done = True
    return entry
