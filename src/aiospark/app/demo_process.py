"""How the demo's services run in a process of their own, tied to the process that started them.

:class:`Child` starts ``python -m aiospark.app.demo_service <args> --exit-on-stdin-eof``, waits for the
URL it prints once listening and stops it on exit (by closing its stdin, then killing it if it
lingers). :func:`run_until_stopped` is the child's side: one event loop for the process's whole
life, served until Ctrl-C or, with ``exit_on_stdin_eof``, until the parent closes our stdin.

Example::

    with Child(["--openai", "--latency-ms", "50"]) as child:
        print(child.url)          # http://127.0.0.1:<port>/v1
"""
from __future__ import annotations

import asyncio
import select
import subprocess
import sys
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

__all__ = ["Child", "run_until_stopped"]

START_TIMEOUT = 60.0  # seconds for the child to listen (a loaded machine starts Python slowly)


class Child:
    """``python -m aiospark.app.demo_service *args`` in a child process; a context manager with ``url``."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args: list[str] = list(args)
        self.url = ""
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Child:
        cmd = [sys.executable, "-m", "aiospark.app.demo_service", *self.args, "--exit-on-stdin-eof"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        # the child prints its URL once it listens; a child that never does must not hang the caller
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            code = self.proc.poll()
            self.__exit__()
            raise RuntimeError(f"the demo service did not start (exit code {code}): {' '.join(cmd)}")
        self.url = line
        return self

    def __exit__(self, *exc: Any) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # the child exits when its stdin closes
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    @property
    def pid(self) -> int:
        """The child's process id."""
        assert self.proc is not None, "not running"
        return self.proc.pid


def run_until_stopped(serving: Coroutine[Any, Any, None], exit_on_stdin_eof: bool) -> int:
    """Run ``serving`` on a new loop until it ends, Ctrl-C, or (optionally) EOF on stdin; exit code 0."""

    async def run() -> None:
        task = asyncio.ensure_future(serving)
        loop = asyncio.get_running_loop()
        stdin_closed = loop.create_future()

        def stop() -> None:
            if not stdin_closed.done():
                stdin_closed.set_result(None)

        def watch_stdin() -> None:  # the parent holds our stdin: EOF means it is gone
            sys.stdin.read()
            loop.call_soon_threadsafe(stop)

        if exit_on_stdin_eof:
            threading.Thread(target=watch_stdin, daemon=True).start()
        await asyncio.wait([task, stdin_closed], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # a server that failed to start (port taken) says why
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    loop = asyncio.new_event_loop()  # a process of its own: one loop for its whole life
    try:
        loop.run_until_complete(run())
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # e.g. the port is taken: one line, not a trace
        print(f"cannot serve: {exc}", file=sys.stderr)
        return 1
    finally:
        loop.close()
    return 0
