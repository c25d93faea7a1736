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
import os
import threading
from typing import Any, Coroutine, Dict, Optional

_lock = threading.Lock()
_current: Optional["WorkerLoop"] = None

#: How long shutdown waits for ``close()`` of the opened functions.
SHUTDOWN_SECONDS = 10.0


class WorkerLoop:
    """An asyncio loop running forever in a daemon thread, plus the functions opened on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._functions: Dict[str, Any] = {}
        self._opening: Dict[str, asyncio.Future] = {}
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name="aiospark-loop", daemon=True)
        self.thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> "concurrent.futures.Future[Any]":
        """Run ``coro`` on the loop; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def opened(self, key: str, function: Any) -> Any:
        """The opened instance of the function defined as ``key``, opening ``function`` if needed.

        Concurrent first uses wait for one ``open()``; a failed ``open()`` is retried next time.
        """
        instance = self._functions.get(key)
        if instance is not None:
            return instance
        pending = self._opening.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
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

    async def close_functions(self) -> None:
        functions, self._functions = list(self._functions.values()), {}
        for function in functions:
            try:
                await function.close()
            except Exception:  # closing must go on for the others
                pass

    def shutdown(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Close the opened functions, then stop the loop and its thread."""
        if not self.alive():
            return
        try:
            self.submit(self.close_functions()).result(timeout)
        except Exception:
            pass
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
        return _current


def shutdown() -> None:
    """Close every opened AsyncFunction of this process and stop its loop (also run at exit)."""
    current = _current
    if current is not None:
        current.shutdown()


atexit.register(shutdown)
