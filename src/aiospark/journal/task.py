"""One task's journal: what the operator asks before a call and tells after one.

Reads come from memory: the outcomes of a chunk's rows are fetched before the chunk is fed (a
store that :attr:`~aiospark.journal.store.StoreTask.fetches_by_row` is asked per input chunk:
Redis in one pipelined MGET, a directory loads each bucket the chunk touches once; see
:meth:`TaskView.prefetch`; a store that loads up front answers at :meth:`TaskView.load`). Writes never block the event loop: ``record``
appends the results to a deque; a writer thread hands what gathered to the store every
:data:`FLUSH_SECONDS` (one Arrow batch pickled at once, or one Redis pipeline) and once more when
the task ends, so an outcome is durable about a second after its call completed. A store that
fails (a disk full, a Redis gone, results that cannot be pickled) fails the task at the next
``record``, or at ``close``.

Results are stored as the call returned them, pickled (protocol 5): ints of any size, floats
(NaN, -0.0), Decimals, dates, datetimes with their zone, bytes, nested dicts, lists and Rows all
come back equal and of the same type. An error is kept (``keep_errors=True``) as its text,
``"<type>: <message>"`` -- the text an error row shows.

Example::

    view = TaskView(store_task, keep_errors=False)
    view.load()
    op = AsyncWaitOperator(fn, out.append, identify=row_identity, journal=view)
    ...
    view.close()
"""
from __future__ import annotations

import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ..core.durable import Recorded
from ..core.errors import error_line
from .store import Entry, StoreTask

#: outcomes are handed to the store at least this often (the durability window)
FLUSH_SECONDS = 1.0


class TaskView:
    """A :class:`~aiospark.core.durable.TaskJournal` over one task's part of a store.

    ``encode(results)`` is what is stored of a call's results (a lookup join keeps the looked-up
    columns only; the Spark layer takes its own tags off outputs); ``rebuild(value, stored)``
    makes the outputs of element ``value`` from what is stored for its identity -- from the
    current input, never from the input of the row that was called (:meth:`adopt`).
    """

    def __init__(self, store_task: StoreTask, keep_errors: bool, encode: Callable[[Any], Any] | None = None,
                 rebuild: Callable[[Any, Any], Any] | None = None, flush_seconds: float = FLUSH_SECONDS):
        self.store_task = store_task
        self.keep_errors = keep_errors
        self.encode = encode
        self.rebuild = rebuild
        self.flush_seconds = flush_seconds
        #: identity -> (results -- or them pickled, as Redis hands them --, error text): recorded
        #: before this task, or by this task's own calls
        self.known: dict[str, tuple[Any, str | None]] = {}
        self._pending: deque[Entry] = deque()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._closed = False
        #: ``recordable(results)``: whether a call's results are an answer to keep (None: always);
        #: an AsyncFunction's list holding a None is none (its input fails or is an error row)
        self.recordable: Callable[[list[Any]], bool] | None = None
        #: counters for tests and metrics
        self.hits = 0
        self.written = 0
        #: output values recorded_prefix gave (a recorded run, emitted by the operator as one entry)
        self.replayed = 0

    #: entries the writer thread prepares as soon as that many wait, before the flush is due
    #: (None: it takes them at the flush): what waits stays small whatever the rate of calls
    chunk: int | None = None

    # ------------------------------------------------------------------ reads (task thread)
    def load(self) -> TaskView:
        """Read what the store holds for this task up front (a store asked by row: its manifest checked, nothing loaded)."""
        self.known.update(self.store_task.load())
        return self

    @property
    def fetches_by_row(self) -> bool:
        """Whether the store is asked for each input chunk's identities (:meth:`prefetch`: Redis),
        rather than having loaded all this task can find up front (a directory)."""
        return self.store_task.fetches_by_row

    def prefetch(self, identities: Iterable[str]) -> None:
        """Ask the store for these identities at once (Redis: one pipelined MGET); a no-op for a
        store that loaded everything up front."""
        if self.store_task.fetches_by_row:
            wanted = [i for i in dict.fromkeys(identities) if i not in self.known]
            if wanted:
                self.known.update(self.store_task.fetch(wanted))

    # ------------------------------------------------------------------ the operator's side (loop thread)
    def recorded(self, identity: str) -> Recorded | None:
        hit = self.known.get(identity)
        if hit is None:
            return None
        results, error = hit
        if results is None:
            if not self.keep_errors:
                return None  # a kept error is retried by a run that does not keep errors
            self.hits += 1
            return Recorded(None, error)
        if type(results) is bytes:  # Redis hands results pickled: unpickled once, on first use
            results = pickle.loads(results)
            self.known[identity] = (results, None)
        self.hits += 1
        return Recorded(results)

    def adopt(self, value: Any, results: list[Any], recorded: bool) -> list[Any]:
        """The outputs of element ``value`` from the outcome of its identity: ``results`` as
        stored (``recorded``), or as another element's call returned them (an equal element's
        shared call). Only what ``encode`` keeps is taken over; the rest comes from ``value``."""
        if self.rebuild is None:
            return results
        return list(self.rebuild(value, results if recorded or self.encode is None else self.encode(results)))

    def recorded_prefix(self, identities: list[str | None]) -> tuple[list[Any], int]:
        """The outputs of the leading ``identities`` whose results are recorded, concatenated in
        their order, and how many of them that is (it stops at the first one that must be called,
        or whose recorded outcome is an error). The operator takes such a run as one queue entry,
        completed on entry (no call, no entry per row; ``aiospark.core.identities``). Only for a view without ``rebuild`` (outputs that need their input again)."""
        known, n = self.known, 0
        out: list[Any] = []
        for identity in identities:
            if identity is None:  # no identity (a NULL key): it must be called
                break
            hit = known.get(identity)
            if hit is None or hit[0] is None:
                break
            results = hit[0]
            if type(results) is bytes:  # Redis hands results pickled
                results = pickle.loads(results)
                known[identity] = (results, None)
            out += results
            n += 1
        self.hits += n
        self.replayed += len(out)
        return out, n

    def record(self, identity: str, results: list[Any] | None, error: BaseException | None) -> None:
        if self._failure is not None:
            raise self._failure
        if error is not None:
            if not self.keep_errors:
                return
            entry: Entry = (identity, None, error_line(error))  # what the error row shows
        else:
            if self.recordable is not None and results is not None and not self.recordable(results):
                return
            if self.encode is not None:
                results = self.encode(results)
            entry = (identity, results, None)  # pickled by the store, a batch at a time
        self._queue(entry)
        self.known[identity] = entry[1:]  # a later equal row of this task completes from it, with no call

    def _queue(self, entry: Any) -> None:
        """Hand ``entry`` to the writer thread (started at the first), waking it once :attr:`chunk` wait."""
        pending = self._pending
        pending.append(entry)
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_loop, name="aiospark-journal", daemon=True)
            self._thread.start()
        elif self.chunk and len(pending) >= self.chunk and not self._wake.is_set():
            self._wake.set()

    # ------------------------------------------------------------------ the writer thread
    def _drain(self) -> list[Entry]:
        pending = self._pending
        pop = pending.popleft  # atomic: record() appends from the loop thread meanwhile
        return [pop() for _ in range(len(pending))]

    def _prepare(self, entries: list[Entry]) -> Any:
        """What the writer thread makes of drained ``entries`` before the flush is due (the
        table's view converts them to Arrow: compact while they wait); here, the entries."""
        return entries

    def _flush(self, chunks: list[Any]) -> None:
        """Hand the prepared ``chunks`` to the store as one write (the writer thread; the task's, at close)."""
        entries = chunks[0] if len(chunks) == 1 else [e for chunk in chunks for e in chunk]
        self.store_task.write(entries)
        self.written += len(entries)

    def _write_loop(self) -> None:
        renew = self.store_task.renew  # a directory segment's lease (journal/lease.py); else a no-op
        held: list[Any] = []
        due = time.monotonic() + self.flush_seconds
        while True:
            # woken early by close(), or by record() once :attr:`chunk` entries wait
            self._wake.wait(max(0.0, due - time.monotonic()))
            self._wake.clear()
            stopping = self._stop.is_set()
            try:
                entries = self._drain()
                if entries:
                    held.append(self._prepare(entries))
                if stopping or time.monotonic() >= due:
                    if held:
                        self._flush(held)
                        held = []
                    if not stopping:
                        renew()  # also while no call completes: a quiet writer is still alive
                    # a fixed clock: the write's own time is not added to the next wait
                    due = max(due + self.flush_seconds, time.monotonic())
            except BaseException as exc:  # the next record() or close() raises it
                self._failure = exc
                return
            if stopping:
                return

    def close(self) -> None:
        """Write what is left and close the store's files (also after a failed task: what was
        recorded is valid). Raises the store's failure, if any."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._failure is None:
                entries = self._drain()
                if entries:
                    self._flush([self._prepare(entries)])
        finally:
            self.store_task.close()
        if self._failure is not None:
            raise self._failure
