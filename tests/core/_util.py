"""Shared helpers for the core-engine tests (no pytest-asyncio: plain asyncio.run)."""

import asyncio
import contextlib

import pytest

from aiospark.core import AsyncFunctionError, AsyncWaitOperator, Record, Watermark

# Generous guard so that a hang fails the test instead of blocking the suite.
GUARD_SECONDS = 10.0
# Tolerance for timer measurements (loop timers may fire a hair early because of clock resolution).
EPS = 0.005


def run(coro, guard=GUARD_SECONDS):
    """Run ``coro`` in a fresh event loop; a hang longer than ``guard`` seconds fails the test."""

    async def _guarded():
        return await asyncio.wait_for(coro, guard)

    return asyncio.run(_guarded())


class Collector(list):
    """The operator's ``output``: a list that records every emitted element, in emission order."""

    def __call__(self, element):
        self.append(element)

    def values(self):
        return [e.value for e in self if isinstance(e, Record)]


class Gates:
    """One ``asyncio.Event`` per key, created lazily inside the running loop."""

    def __init__(self):
        self._events = {}

    def __getitem__(self, key):
        if key not in self._events:
            self._events[key] = asyncio.Event()
        return self._events[key]

    def open(self, key):
        self[key].set()


async def settle(seconds=0.01):
    """Let the loop run callbacks/tasks for a short while."""
    await asyncio.sleep(seconds)


async def feed_all(op, values, timestamp=None):
    """What a driver holding its input does (the Spark pump): start what fits with
    ``try_process``, wait for room, go on."""
    for value in values:
        while not op.try_process(value, timestamp):
            await op.wait_for_space()


async def feed(op, inputs):
    """Feed ``inputs`` to an opened operator: a Watermark -> process_watermark, a Record ->
    process_element(value, timestamp), anything else -> process_element(value)."""
    for item in inputs:
        if isinstance(item, Watermark):
            await op.process_watermark(item.timestamp)
        elif isinstance(item, Record):
            await op.process_element(item.value, item.timestamp)
        else:
            await op.process_element(item)


async def run_operator(function, inputs, **kwargs):
    """open -> feed -> finish -> close; returns the collected output."""
    out = Collector()
    op = AsyncWaitOperator(function, out, **kwargs)
    await op.open()
    try:
        await feed(op, inputs)
        await op.finish()
    finally:
        await safe_close(op)
    return out


async def safe_close(op):
    """close() after a failure may or may not re-raise the failure; the SPEC does not say, so only
    that exception type is tolerated here."""
    with contextlib.suppress(AsyncFunctionError):
        await asyncio.wait_for(op.close(), 5)


async def expect_failure(op, inputs=()):
    """Feed ``inputs`` then finish, expecting an AsyncFunctionError from one of those calls (the
    failure may surface at any process_* call after it happened, or at finish)."""
    with pytest.raises(AsyncFunctionError) as info:
        await feed(op, inputs)
        await op.finish()
    return info.value


def quiet_about_the_stopped_task():
    """The Task that raised a SystemExit keeps it, and asyncio logs it with its traceback when the
    Task is collected, as for any Task. On CPython 3.11.7 that traceback's ``ast.parse`` (for the
    carets), run by the GC inside another ``ast.parse`` (pytest rewriting an import), leaves the
    interpreter's AST state corrupt (CPython gh-106905): the tests that stop a loop do not log it."""
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
