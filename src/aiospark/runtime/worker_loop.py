"""The event loop of this Python process: one daemon thread, reused by every task it runs.

PySpark reuses Python workers across tasks, so a loop started by the first task serves the next
ones, and so do the ``AsyncFunction`` instances opened on it: ``open()`` runs once per worker
process (keyed by the function's definition, not by the copy unpickled for each task) and
``close()`` runs at interpreter exit or on :func:`shutdown`.

Example::

    wl = worker_loop()
    fut = wl.submit(some_coroutine())      # a concurrent.futures.Future
    fut.result()
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import itertools
import logging
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from ..core.errors import describe_input, warn_blocking
from .gc_policy import GcPolicy, threshold_from_env

log = logging.getLogger(__name__)

_lock = threading.Lock()
_current: WorkerLoop | None = None

#: Opened functions that no running task uses are closed beyond this many (least recently used first).
MAX_IDLE_FUNCTIONS = 16

#: Per-definition state kept for the tasks a worker runs one after another (:meth:`WorkerLoop.kept`)
#: beyond this many definitions, the least recently used goes.
MAX_KEPT = 256

#: How long shutdown waits for ``close()`` of the opened functions.
SHUTDOWN_SECONDS = 5.0

#: While functions run on the loop, a heartbeat every HEARTBEAT_SECONDS notices when the loop
#: was blocked for more than BLOCKED_SECONDS at once (the operator itself times first steps, which
#: catches the common case of calls that never await; this catches blocking after an await).
HEARTBEAT_SECONDS = 0.05
BLOCKED_SECONDS = 0.5


LOOP_CHOICES = ("asyncio", "uvloop", "auto")


def loop_choice() -> str:
    """``AIOSPARK_LOOP``, validated: which event loop the worker runs (see :func:`new_event_loop`)."""
    choice = os.environ.get("AIOSPARK_LOOP", "auto").strip().lower() or "auto"
    if choice not in LOOP_CHOICES:
        raise ValueError(f"AIOSPARK_LOOP must be one of {', '.join(LOOP_CHOICES)}, got {choice!r}")
    return choice


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The worker's loop, chosen by ``AIOSPARK_LOOP`` (on executors:
    ``spark.executorEnv.AIOSPARK_LOOP``):

    * ``auto`` (default): uvloop when it is installed (a dependency of aiospark except on
      Windows), else asyncio's own loop. uvloop runs the same ``asyncio.Task`` objects with less
      CPU per call: about twice the HTTP requests/s per core (docs/design.md, "Event loop");
    * ``asyncio``: asyncio's own loop, the one ``asyncio.run`` uses;
    * ``uvloop``: uvloop, or an ImportError when it is not installed.
    """
    choice = loop_choice()
    if choice in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ImportError("AIOSPARK_LOOP=uvloop but uvloop is not installed: pip install uvloop") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _handle_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's handler: asyncio's, but for the SystemExit or KeyboardInterrupt a Task kept after
    it left the loop, which :meth:`WorkerLoop._escaped` has logged and failed the partitions with
    already (its traceback again, at garbage collection, would say nothing new)."""
    if not isinstance(context.get("exception"), (SystemExit, KeyboardInterrupt)):
        loop.default_exception_handler(context)


class WorkerLoop:
    """An asyncio loop running forever in a daemon thread, plus the functions opened on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = new_event_loop()
        self.loop.set_exception_handler(_handle_exception)
        self._functions: OrderedDict[str, Any] = OrderedDict()  # least recently used first
        self._users: dict[str, weakref.WeakSet[asyncio.Task]] = {}  # tasks that used each instance
        self._opening: dict[str, asyncio.Future] = {}
        self._kept: OrderedDict[str, Any] = OrderedDict()  # least recently used first
        self._running: dict[int, str] = {}
        #: how to fail each tracked partition when something escapes the loop (see _escaped)
        self._failers: dict[int, Callable[[BaseException], None]] = {}
        self._stopping = False
        self._tokens = itertools.count()
        self._heartbeat: asyncio.TimerHandle | None = None
        self._expected = 0.0
        self._late_beats = 0
        #: raised gen-0 GC threshold while partitions run (see gc_policy)
        self.gc = GcPolicy(threshold_from_env())
        #: seconds the loop was seen blocked, per function name (cumulative, for metrics)
        self.blocked_seconds: dict[str, float] = {}
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name="aiospark-loop", daemon=True)
        self.thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        while True:
            try:
                self.loop.run_forever()
                return
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: see _escaped
                if self._stopping:
                    return
                self._escaped(exc)

    def _escaped(self, exc: BaseException) -> None:
        """``exc`` (a SystemExit or KeyboardInterrupt raised by code running on this thread: signals
        go to the main thread) left ``run_forever``. Under ``asyncio.run`` it would end the program;
        here the loop serves every partition of the process, so those running now fail with it (a
        call's own operator has failed with it already, and that error comes first) and the loop
        goes on: their clean-up runs, and a task never waits on a loop that is gone."""
        shown = describe_input(exc)
        log.warning("aiospark: %s escaped the worker's event loop; the partitions running on it fail", shown)
        error = RuntimeError(f"{shown} was raised on the worker's event loop, outside any call of this partition")
        error.__cause__ = exc
        for fail in list(self._failers.values()):
            fail(error)

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on the loop; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def kept(self, key: str, make: Callable[[], Any]) -> Any:
        """The object kept for ``key`` across the tasks this worker runs, made by ``make()`` at first.

        Example (a rate limit's bucket: the next task of the same definition starts where the last
        one left it, not with a fresh burst)::

            bucket = wl.kept(options.key + ":bucket", spec.bucket)
        """
        value = self._kept.get(key)
        if value is None:
            value = self._kept[key] = make()
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return value

    async def opened(self, key: str, function: Any) -> Any:
        """The opened instance of the function defined as ``key``, opening ``function`` if needed.

        Concurrent first uses wait for one ``open()``; a failed ``open()`` is retried next time.
        The calling task counts as a user of the instance until it ends; beyond
        ``MAX_IDLE_FUNCTIONS`` instances that no running task uses, the least recently used are
        closed (a job that calls ``lookup_join`` for every micro-batch defines a new function each
        time: without this, every worker would keep all of them open).
        """
        instance = self._functions.get(key)
        if instance is None:
            pending = self._opening.get(key)
            if pending is not None:
                instance = await asyncio.shield(pending)
            else:
                instance = await self._open(key, function)
        self._functions.move_to_end(key)
        user = asyncio.current_task()
        if user is not None:
            self._users.setdefault(key, weakref.WeakSet()).add(user)
        await self._close_idle()
        return instance

    async def _open(self, key: str, function: Any) -> Any:
        pending = self.loop.create_future()
        self._opening[key] = pending
        try:
            await function.open()
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # mark retrieved: the caller re-raises it
            raise
        finally:
            del self._opening[key]
        self._functions[key] = function
        pending.set_result(function)
        return function

    async def _close_idle(self) -> None:
        """Close the least recently used instances that no running task uses, beyond the limit."""
        idle = [key for key in self._functions
                if not any(not task.done() for task in self._users.get(key, ()))]
        for key in idle[:max(0, len(idle) - MAX_IDLE_FUNCTIONS)]:  # oldest first
            function = self._functions.pop(key)
            self._users.pop(key, None)
            try:
                await function.close()
            except Exception as exc:  # one failing close() must not fail the task that opened another
                log.warning("aiospark: close() of an idle %s failed: %r", type(function).__name__, exc)

    # ---------------------------------------------------------------- blocked-loop detection
    def track(self, name: str, fail: Callable[[BaseException], None] | None = None) -> int:
        """Note that calls of the function ``name`` run now (loop thread); returns a token.

        While anything is tracked, the loop watches for blocking and the GC policy is in force;
        ``fail(error)`` is how to fail this partition when something escapes the loop."""
        token = next(self._tokens)
        self._running[token] = name
        if fail is not None:
            self._failers[token] = fail
        self.gc.enter()
        if self._heartbeat is None:
            self._expected = self.loop.time() + HEARTBEAT_SECONDS
            self._heartbeat = self.loop.call_at(self._expected, self._beat)
        return token

    def untrack(self, token: int) -> None:
        if token not in self._running:
            return
        try:
            if len(self._running) == 1 and self._heartbeat is not None:
                self._heartbeat.cancel()
                self._heartbeat = None
                # the last partition ends: a beat overdue now means the loop was blocked until now
                self._check_lag(self.loop.time() - self._expected)
        finally:  # a warning turned into an error (-W error) fails the partition, not this bookkeeping
            del self._running[token]
            self._failers.pop(token, None)
            self.gc.exit()

    def _beat(self) -> None:
        now = self.loop.time()
        lag = now - self._expected
        # the next beat first: a warning turned into an error (-W error) must not stop the heartbeat
        self._expected = now + HEARTBEAT_SECONDS
        self._heartbeat = self.loop.call_at(self._expected, self._beat)
        self._check_lag(lag)

    def _check_lag(self, lag: float) -> None:
        if lag > BLOCKED_SECONDS and self._running:
            self._late_beats += 1
            # twice in a row, or one long stall: not just this thread being descheduled once
            if self._late_beats >= 2 or lag >= 3 * BLOCKED_SECONDS:
                self._report(lag)
        else:
            self._late_beats = 0

    def _report(self, lag: float) -> None:
        for name in sorted(set(self._running.values())):
            self.blocked_seconds[name] = self.blocked_seconds.get(name, 0.0) + lag
            warn_blocking(name, f"the event loop was blocked for {lag:.2f} s while running {name!r}.")

    async def close_functions(self) -> None:
        functions, self._functions = list(self._functions.values()), OrderedDict()
        for function in functions:
            try:
                await function.close()
            except Exception as exc:  # closing must go on for the others
                log.warning("aiospark: close() of %s failed: %r", type(function).__name__, exc)

    def shutdown(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Close the opened functions, then stop the loop and its thread."""
        if not self.alive():
            return
        try:
            self.submit(self.close_functions()).result(timeout)
        except Exception as exc:  # the process is going away: stop the loop all the same
            log.warning("aiospark: closing the worker's functions did not finish: %r", exc)
        self._stopping = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)


def worker_loop() -> WorkerLoop:
    """This process's loop, started on first use (and again in a forked child)."""
    global _current
    current = _current
    if current is not None and current.alive():
        return current
    with _lock:
        if _current is None or not _current.alive():
            _current = WorkerLoop()
            _close_before_os_exit()
        return _current


_patched_pid: int | None = None


def _close_before_os_exit() -> None:
    """PySpark's forked workers end with ``os._exit``, which skips ``atexit``: in a Spark worker,
    close the opened functions (their clients, pools) first."""
    global _patched_pid
    if _patched_pid == os.getpid() or not ({"pyspark.daemon", "pyspark.worker"} & set(sys.modules)):
        return
    _patched_pid = os.getpid()
    real_exit = os._exit

    def _exit(status: int) -> NoReturn:  # os._exit's own signature
        try:
            shutdown()
        finally:
            real_exit(status)

    os._exit = _exit



def shutdown() -> None:
    """Close every opened AsyncFunction of this process and stop its loop (also run at exit)."""
    current = _current
    if current is not None:
        current.shutdown()


atexit.register(shutdown)
