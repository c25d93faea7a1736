"""Bounded element queues: the ordering policy of the operator (Flink's ``StreamElementQueue``).

:class:`ElementQueue` is the interface the operator drives; :class:`OrderedQueue` emits strictly in insertion order. :class:`UnorderedQueue` emits records in
completion order, with watermarks as barriers: a watermark splits the queue into segments, it is
emitted only after every record before it, and no record after it is emitted before it.

Both hold at most ``capacity`` entries (watermarks count). ``try_put`` never blocks; the operator
waits for space itself. Completion of an entry calls ``on_complete(entry)`` (if given when the queue
is made), which is how the operator learns, without polling, that something may be emittable or
that a call failed.

Example::

    >>> from aiospark import UnorderedQueue, Record
    >>> q = UnorderedQueue(10)
    >>> a, b = q.try_put(Record("a")), q.try_put(Record("b"))
    >>> b.complete(["B"]); q.pop_completed()
    [Record(value='B', timestamp=None)]
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from .elements import Record, StreamElement, Watermark
from .result_future import ResultFuture, watermark_entry

#: ``on_complete(entry)``: an entry completed (normally or exceptionally)
Listener = Callable[[ResultFuture], None] | None


def _check_capacity(capacity: int) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(f"capacity must be an int >= 1, got {capacity!r}")
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1 (the number of elements in flight), got {capacity}")
    return capacity


def _watermark(element: object) -> Watermark:
    """``element`` if it is a watermark (a queue's other elements are Records, taken before)."""
    if type(element) is not Watermark:
        raise TypeError(f"queues hold Record or Watermark elements, got {type(element).__name__}")
    return element


class ElementQueue(ABC):
    """What the operator needs of a queue (Flink's ``StreamElementQueue``): bounded room for record
    and watermark entries, and an emit path that applies the queue's ordering policy.

    Both queues take ``capacity`` (entries held, watermarks count) and ``on_complete(entry)``, called
    when a record's entry completes (normally or exceptionally), so the operator emits without polling.
    """

    capacity: int
    on_complete: Listener

    @abstractmethod
    def try_put(self, element: StreamElement) -> ResultFuture | None:
        """Add ``element`` (a Record or a Watermark); its handle, or ``None`` when the queue is full."""

    @abstractmethod
    def add(self, entry: ResultFuture) -> None:
        """Hold a record's ``entry`` made by the caller (a :class:`ResultFuture`, or a subclass
        carrying more state, as the operator's calls do). The caller has checked for room."""

    @abstractmethod
    def has_completed(self) -> bool:
        """True when :meth:`pop_completed` would emit something."""

    @abstractmethod
    def pop_completed(self) -> list[StreamElement]:
        """Remove one emittable entry and return what it emits; ``[]`` when none is emittable."""

    @abstractmethod
    def emit_completed(self, output: Callable[[Any], object], values: bool = False) -> int:
        """Pop every emittable entry, passing what each emits to ``output``; returns how many
        input elements they held (an entry may hold a batch: ``entry.size``). With ``values``
        (no watermarks held), ``output`` gets each entry's results as one list of plain values."""

    @abstractmethod
    def values(self) -> list[StreamElement]:
        """Input elements of every held entry, in the order a restore must re-add them (snapshots)."""

    @abstractmethod
    def pending(self) -> Iterator[ResultFuture]:
        """Held record entries not completed yet, in insertion order (do not change the queue
        while iterating)."""

    @abstractmethod
    def __len__(self) -> int:
        """Entries held (watermarks count)."""

    @abstractmethod
    def is_empty(self) -> bool:
        """True when nothing is held."""


class OrderedQueue(ElementQueue):
    """Emits results strictly in insertion order: the head must be done before anything is emitted."""

    def __init__(self, capacity: int, *, on_complete: Listener = None):
        self.capacity = _check_capacity(capacity)
        self.on_complete = on_complete
        self._entries: deque[ResultFuture] = deque()

    def try_put(self, element: StreamElement) -> ResultFuture | None:
        """Add ``element``; returns its handle, or ``None`` when the queue is full."""
        if len(self._entries) >= self.capacity:
            return None
        if type(element) is Record:
            entry = ResultFuture(element)
            self.add(entry)
            return entry
        entry = watermark_entry(_watermark(element))
        self._entries.append(entry)
        return entry

    def add(self, entry: ResultFuture) -> None:
        """Hold a record's ``entry`` made by the caller (a :class:`ResultFuture`, or a subclass
        carrying more state, as the operator's calls do). The caller has checked for room."""
        entry._listener = self.on_complete  # order is kept by the deque: nothing to note on completion
        self._entries.append(entry)

    def has_completed(self) -> bool:
        """True when the head entry is done (so ``pop_completed`` emits something)."""
        return bool(self._entries) and self._entries[0]._done

    def pop_completed(self) -> list[StreamElement]:
        """Remove the head if done and return what it emits; ``[]`` when the head is not done."""
        entries = self._entries
        if not entries or not entries[0]._done:
            return []
        return entries.popleft().emitted()

    def emit_completed(self, output: Callable[[Any], object], values: bool = False) -> int:
        """Pop every emittable entry, passing what each emits to ``output``; returns how many
        input elements they held (an entry may hold a batch of them: ``entry.size``). With
        ``values``, ``output`` gets each entry's results as one list of plain values (no Records).

        Same as looping on ``pop_completed()``, in one call (the operator's hot path).
        """
        entries = self._entries
        count = 0
        while entries and entries[0]._done:
            entry = entries.popleft()
            count += entry.size
            if values:
                entry.emit_values_to(output)
            else:
                entry.emit_to(output)
        return count

    def values(self) -> list[StreamElement]:
        """Input elements of every held entry, in insertion order (for snapshots)."""
        return [element for entry in self._entries for element in entry.inputs()]

    def pending(self) -> Iterator[ResultFuture]:
        """Held record entries not completed yet, in insertion order (do not change the queue
        while iterating)."""
        return (entry for entry in self._entries if not entry._done)

    def __len__(self) -> int:
        return len(self._entries)

    def is_empty(self) -> bool:
        return not self._entries

    def __repr__(self) -> str:
        return f"OrderedQueue(capacity={self.capacity}, size={len(self)})"


class _Segment:
    """Records between two watermarks (or a lone watermark)."""

    __slots__ = ("incomplete", "completed", "watermark")

    def __init__(self, watermark: ResultFuture | None = None):
        self.watermark = watermark
        # a dict keeps insertion order for snapshots and removes in O(1)
        self.incomplete: dict[ResultFuture, None] = {}
        self.completed: deque[ResultFuture] = deque()

    def is_empty(self) -> bool:
        return self.watermark is None and not self.incomplete and not self.completed


class UnorderedQueue(ElementQueue):
    """Emits records in completion order within watermark-delimited segments."""

    def __init__(self, capacity: int, *, on_complete: Listener = None):
        self.capacity = _check_capacity(capacity)
        self.on_complete = on_complete
        self._segments: deque[_Segment] = deque()
        self._tail: _Segment | None = None  # the last segment if it takes records (no watermark)
        self._size = 0
        self._listener = self._completed  # bound once: each entry holds it

    def try_put(self, element: StreamElement) -> ResultFuture | None:
        """Add ``element``; returns its handle, or ``None`` when the queue is full."""
        if self._size >= self.capacity:
            return None
        if type(element) is Record:
            entry = ResultFuture(element)
            self.add(entry)
            return entry
        watermark = _watermark(element)
        segments = self._segments
        if segments and segments[-1].is_empty():
            segments.pop()
        entry = watermark_entry(watermark)
        segments.append(_Segment(entry))
        self._tail = None
        self._size += 1
        return entry

    def add(self, entry: ResultFuture) -> None:
        """Hold a record's ``entry`` made by the caller (a :class:`ResultFuture`, or a subclass
        carrying more state, as the operator's calls do). The caller has checked for room."""
        segment = self._tail
        if segment is None:
            self._tail = segment = _Segment()
            self._segments.append(segment)
        entry._listener = self._listener
        entry._segment = segment
        segment.incomplete[entry] = None
        self._size += 1

    def _completed(self, entry: ResultFuture) -> None:
        segment = entry._segment
        del segment.incomplete[entry]
        segment.completed.append(entry)
        if self.on_complete is not None:
            self.on_complete(entry)

    def has_completed(self) -> bool:
        """True when the first segment has something to emit."""
        if not self._segments:
            return False
        head = self._segments[0]
        return head.watermark is not None or bool(head.completed)

    def pop_completed(self) -> list[StreamElement]:
        """Remove one emittable entry and return what it emits; ``[]`` when none is emittable."""
        segments = self._segments
        if not segments:
            return []
        head = segments[0]
        if head.watermark is not None:
            entry = head.watermark
        elif head.completed:
            entry = head.completed.popleft()
        else:
            return []
        self._size -= 1
        if head.watermark is not None or (not head.incomplete and not head.completed and len(segments) > 1):
            segments.popleft()
        return entry.emitted()

    def emit_completed(self, output: Callable[[Any], object], values: bool = False) -> int:
        """Pop every emittable entry, passing what each emits to ``output``; returns how many
        input elements they held (an entry may hold a batch of them: ``entry.size``). With
        ``values`` (no watermarks held), ``output`` gets each entry's results as one list."""
        segments = self._segments
        count = 0
        while segments:
            head = segments[0]
            if head.watermark is not None:
                segments.popleft()
                self._size -= 1
                count += 1
                output(head.watermark.element)
                continue
            completed = head.completed
            while completed:
                entry = completed.popleft()
                self._size -= 1
                count += entry.size
                if values:
                    entry.emit_values_to(output)
                else:
                    entry.emit_to(output)
            if head.incomplete or len(segments) == 1:
                break
            segments.popleft()
        return count

    def pending(self) -> Iterator[ResultFuture]:
        """Held record entries not completed yet, in insertion order (do not change the queue
        while iterating)."""
        return (entry for segment in self._segments for entry in segment.incomplete)

    def values(self) -> list[StreamElement]:
        """Input elements of every held entry, segment by segment (for snapshots)."""
        out: list[StreamElement] = []
        for segment in self._segments:
            if segment.watermark is not None:
                out.append(segment.watermark.element)
            else:
                out.extend(element for entry in segment.completed for element in entry.inputs())
                out.extend(element for entry in segment.incomplete for element in entry.inputs())
        return out

    def __len__(self) -> int:
        return self._size

    def is_empty(self) -> bool:
        return self._size == 0

    def __repr__(self) -> str:
        return f"UnorderedQueue(capacity={self.capacity}, size={len(self)})"
