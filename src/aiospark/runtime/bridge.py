"""Run one Spark partition through an :class:`~aiospark.core.AsyncWaitOperator` on the worker loop.

Two threads cooperate. The task's thread (Spark's, "the feeder") pulls input batches only when the
loop asks for more (``NEED``: fewer than ``capacity`` rows are queued), hands over whole chunks, and
yields output chunks as they arrive (``OUT``). The loop thread runs the operator. Both wait by
blocking on what the other sends (a ``SimpleQueue`` one way, ``call_soon_threadsafe`` the other):
no polling, no timeouts. Output crosses threads in bulk: the loop posts what completed once a
whole output chunk (``out_rows``, at least POST_ROWS) is pending or FLUSH_SECONDS after the first
of them (each post wakes the task's thread and makes the two threads trade the GIL, which costs
more than many rows), and memory stays bounded by ``capacity`` plus one input and one output chunk.

Example (the mapInArrow adapter does this)::

    chunks = (batch.to_pylist() for batch in arrow_batches)
    async def make_operator(output):
        return AsyncWaitOperator(fn, output, capacity=100, values=True)

    for values in run_partition(chunks, make_operator, capacity=100):
        yield to_arrow(values)
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import math
import queue
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from ..core import AsyncWaitOperator
from ..core.function import describe_function
from .worker_loop import WorkerLoop, worker_loop

NEED, OUT, DONE, ERROR = range(4)

#: ``await make_operator(output)`` builds the partition's operator around the pump's output, with
#: ``values=True``: ``output`` takes each entry's results as one list of values (a ``list.extend``).
MakeOperator = Callable[[Callable[[Any], None]], Awaitable[AsyncWaitOperator]]

#: The loop posts output to the task's thread when an output chunk, and at least this many rows,
#: are pending...
POST_ROWS = 1024
#: ...or this long after the first pending row (bounds the delay; metrics progress goes with it).
FLUSH_SECONDS = 0.05

#: How long an abandoned partition (a failed or cancelled task) waits for its calls to be cancelled.
ABANDON_SECONDS = 10.0


class _Pump:
    """The loop side of one partition."""

    def __init__(self, make_operator: MakeOperator, capacity: int, to_feeder: queue.SimpleQueue[Any],
                 worker: WorkerLoop, post_rows: int = POST_ROWS):
        self._make_operator = make_operator
        self._capacity = capacity
        self._post_rows = post_rows
        self._post = to_feeder.put
        self._worker = worker
        self._loop = worker.loop
        self._chunks: deque[list[Any]] = deque()
        self._chunk: list[Any] = []  # the chunk being fed, from index _pos on
        self._pos = 0
        self._queued = 0  # rows received, in chunks not started yet
        self._requested = False
        self._input_ended = False
        self._feeding = False  # _fill runs (it is re-entered through the operator's room listener)
        self._error: BaseException | None = None
        #: what failed the partition from outside it (the worker loop, see _abort)
        self._aborted: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future | None = None
        #: the operator's output: emitted values, extended by the operator (no frame of ours per entry)
        self._out: list[Any] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self.operator: AsyncWaitOperator | None = None

    # called on the loop thread, via call_soon_threadsafe from the feeder
    def accept(self, chunk: list[Any] | None) -> None:
        self._requested = False
        if chunk is None:
            self._input_ended = True
        else:
            self._chunks.append(chunk)
            self._queued += len(chunk)
            self._request_more()
        self._wake_run()

    def _abort(self, error: BaseException) -> None:
        """Fail this partition with ``error`` (the worker loop's, when something escaped it) now,
        wherever ``run()`` waits: for input, or for the last calls in ``finish()``."""
        if self._aborted is None and self._task is not None:
            self._aborted = error
            self._task.cancel()

    def _wake_run(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _request_more(self) -> None:
        if not self._requested and not self._input_ended and self._queued < self._capacity:
            self._requested = True
            self._post((NEED, None))

    def _fed_all(self) -> bool:
        return not self._chunks and self._pos == len(self._chunk)

    def _fill(self) -> None:
        """Start calls for the input received while the operator has room (also when room
        appears: see ``_room``)."""
        operator = self.operator
        if self._feeding or operator is None:
            return
        if self._error is not None:
            self._wake_run()
            return
        # a failed operator raises from try_process: caught below, run() raises it
        self._feeding = True
        chunk, pos = self._chunk, self._pos
        try:
            try_process_many = operator.try_process_many
            while True:
                if pos == len(chunk):
                    if not self._chunks:
                        break
                    chunk, pos = self._chunks.popleft(), 0
                    self._queued -= len(chunk)
                    self._request_more()
                    continue
                taken = try_process_many(chunk, pos)
                if not taken:
                    break
                pos += taken
        except BaseException as exc:  # the operator failed meanwhile: run() raises it
            self._error = exc
        finally:
            self._chunk, self._pos = chunk, pos
            self._feeding = False
        if self._error is not None or (self._input_ended and self._fed_all()):
            self._wake_run()

    def _emitted(self) -> None:
        """The operator's room listener, called after each of its emissions: post the output once
        a chunk is pending (else make sure it goes within FLUSH_SECONDS), then refill."""
        pending = len(self._out)
        if pending >= self._post_rows:
            self._flush()
        elif pending and self._flush_timer is None:
            self._flush_timer = self._loop.call_later(FLUSH_SECONDS, self._flush)
        self._fill()

    def _flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        out = self._out
        if out:
            values = out[:]
            out.clear()  # in place: the operator holds its extend
            self._post((OUT, values))

    async def run(self) -> None:
        try:
            operator = await self._make_operator(self._out.extend)
            if not operator.values:
                raise TypeError("make_operator must build the operator with values=True: the pump takes "
                                "plain values, a list at a time")
            self.operator = operator
        except BaseException as exc:  # e.g. AsyncFunction.open() failed: the feeder must hear of it
            self._post((ERROR, exc))
            raise
        self._task = asyncio.current_task()
        token = self._worker.track(describe_function(operator.function), self._abort)
        try:
            await operator.open()
            # calls that end make room: the next ones start in the same loop step
            operator.on_room(self._emitted)
            self._request_more()
            while True:
                self._fill()
                if operator.failure is not None:
                    raise operator.failure
                if self._error is not None:
                    raise self._error
                if self._input_ended and self._fed_all():
                    break
                # new input arrives through accept(); room is refilled by _fill as calls end
                self._waiter = self._loop.create_future()
                await self._waiter
                self._waiter = None
            await operator.finish()
            self._flush()
            self._worker.untrack(token)  # before DONE: the task's thread may go on at once
            self._post((DONE, None))
        except BaseException as exc:
            if self._aborted is not None and isinstance(exc, asyncio.CancelledError):
                # a call's own failure names its input: it comes first when there is one
                exc = operator.failure or self._aborted
            self._post((ERROR, exc))
            raise
        finally:
            operator.on_room(None)  # nothing new starts while it closes
            if self._flush_timer is not None:
                self._flush_timer.cancel()
            self._worker.untrack(token)
            await operator.close()


Report = Callable[[AsyncWaitOperator, int, bool], None]


def run_partition(chunks: Iterable[list[Any]], make_operator: MakeOperator, *, capacity: int,
                  out_rows: int = 10_000, loop: WorkerLoop | None = None,
                  report: Report | None = None, post_rows: int = POST_ROWS,
                  count: Callable[[list[Any]], int] = len, direct: type | None = None,
                  out_seconds: float | None = None) -> Iterator[list[Any]]:
    """Feed ``chunks`` (lists of input values) through the operator that
    ``await make_operator(output)`` builds on the loop;
    yield lists of output values (at least ``out_rows`` each, except the last; with
    ``out_seconds``, also what arrived once that long has passed since the last list).

    The generator returns only once every input has been emitted (``finish()``); closing it early
    (a failed or cancelled task) cancels the calls still in flight. ``report(operator, rows_out,
    final)`` is called on the feeder thread whenever output arrives, and once more at the end
    (``final=True``, also after a failure), with the rows output so far: ``count(values)`` of
    every output list (an output value may stand for several rows). The loop posts output to this
    thread once ``max(post_rows, out_rows)`` values are pending (or after FLUSH_SECONDS).
    A chunk of type ``direct`` is output rows already made, not input: it is yielded alone, as
    ``[chunk]``, the moment the source gives it (a journal's recorded rows, served by Spark's
    join: :mod:`aiospark.spark.table_route`), and never reaches the operator.
    """
    wl = loop or worker_loop()
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    pump = _Pump(make_operator, capacity, inbox, wl, max(post_rows, out_rows))
    source = iter(chunks)
    future = wl.submit(pump.run())
    finished = False
    rows = 0
    try:
        buffered: list[Any] = []
        due = math.inf if out_seconds is None else time.monotonic() + out_seconds
        while True:
            if buffered and due != math.inf:  # output waits: it leaves by ``due`` whatever comes next
                try:
                    kind, payload = inbox.get(timeout=max(0.0, due - time.monotonic()))
                except queue.Empty:
                    kind, payload = OUT, []
            else:
                kind, payload = inbox.get()
            if kind == OUT:
                buffered += payload
                rows += count(payload)
                if payload and report is not None and pump.operator is not None:
                    report(pump.operator, rows, False)
                if len(buffered) >= out_rows or (due != math.inf and time.monotonic() >= due):
                    out, buffered = buffered, []
                    yield out
                    if out_seconds is not None:
                        due = time.monotonic() + out_seconds
            elif kind == NEED:
                chunk = next(source, None)
                while direct is not None and type(chunk) is direct:
                    rows += count([chunk])
                    yield [chunk]
                    chunk = next(source, None)
                wl.loop.call_soon_threadsafe(pump.accept, chunk)
            elif kind == ERROR:
                finished = True
                raise payload
            else:
                finished = True
                break
        if buffered:
            yield buffered
    finally:
        if not finished:
            wl.loop.call_soon_threadsafe(future.cancel)
            concurrent.futures.wait([future], timeout=ABANDON_SECONDS)
        if report is not None and pump.operator is not None:
            report(pump.operator, rows, True)
