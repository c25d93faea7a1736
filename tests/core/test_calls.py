"""One element's call (core/calls.py): what an AsyncFunction may return, eager completion."""
from __future__ import annotations

import asyncio
import sys

from aiospark import AsyncFunction, AsyncWaitOperator


class Rows(list):
    """A list subclass, as some client libraries return."""


def run_all(function, values, **kwargs):
    async def main():
        out = []
        op = AsyncWaitOperator(function, out.append, **kwargs)
        await op.open()
        for v in values:
            await op.process_element(v)
        await op.finish()
        await op.close()
        return [r.value for r in out]

    return asyncio.run(main())


def test_an_async_function_may_return_a_list_subclass_or_a_tuple():
    class F(AsyncFunction):
        async def async_invoke(self, value):
            return Rows([value, value]) if value % 2 else (value,)

    assert run_all(F(), range(4)) == [0, 1, 1, 2, 3, 3]


def test_calls_that_finish_without_io_and_calls_that_suspend_keep_their_order():
    """Some calls complete inside create_task (eager tasks on 3.12+), others suspend: the ordered
    output is input order either way, and every call ran in a real Task."""
    seen = []

    async def mixed(value):
        seen.append(isinstance(asyncio.current_task(), asyncio.Task))
        if value % 3 == 0:
            await asyncio.sleep(0.001)
        return value

    assert run_all(mixed, range(30), capacity=7) == list(range(30))
    assert seen == [True] * 30


def _hangs_with_timeout(handler):
    class Hangs(AsyncFunction):
        async def async_invoke(self, value):
            await asyncio.sleep(3600)
            return [value]

    Hangs.timeout = handler
    return Hangs()


def test_a_timeout_handler_that_returns_no_list_fails_naming_it():
    import pytest

    from aiospark import AsyncFunctionError

    def sync_handler(self, value):
        return "fallback"  # not a list

    async def async_handler(self, value):
        return 42  # not a list either

    for handler in (sync_handler, async_handler):
        with pytest.raises(AsyncFunctionError, match="timeout handler") as info:
            run_all(_hangs_with_timeout(handler), [1], timeout=0.05)
        assert isinstance(info.value.__cause__, TypeError)
        assert "timeout must return a list" in str(info.value.__cause__)


def test_a_raising_retry_predicate_fails_the_operator_even_with_on_error():
    """on_error turns failed calls into rows; a predicate that raises is a bug in the job's
    configuration, not a failed call: it fails the operator (SPEC section 1)."""
    import pytest

    from aiospark import AsyncFunctionError, RetryStrategy

    def predicate(results):
        raise RuntimeError("predicate exploded")

    async def echo(value):
        return value

    with pytest.raises(AsyncFunctionError, match="retry result_predicate") as info:
        run_all(echo, [1, 2], retry=RetryStrategy.fixed_delay(2, 0.001, result_predicate=predicate),
                on_error=lambda value, exc: ["error row"])
    assert str(info.value.__cause__) == "predicate exploded"


# --- a call whose Task never ran its first step still gets an outcome ------------------------------

def _caller(function, reports, timeout=5.0):
    from aiospark.core.calls import Caller

    caller = Caller(function, report=lambda call, results, error, what: reports.append((results, error, what)),
                    timeout=timeout, retry=None)
    caller.bind(asyncio.get_running_loop(), inflight=lambda: 1)
    return caller


def _call(value, loop):
    from aiospark.core.calls import Call

    call = Call(value, None)
    call.started = loop.time()
    return call


def test_a_call_timed_out_before_its_first_step_gets_its_timeout_outcome():
    """The deadline passes before the Task ran at all (a loaded loop): the coroutine never runs,
    yet the row gets its timeout outcome instead of being left hanging."""

    class Slow(AsyncFunction):
        async def async_invoke(self, value):
            await asyncio.sleep(3600)

        def timeout(self, value):
            return [("timed out", value)]

    async def main():
        reports = []
        caller = _caller(Slow(), reports)
        call = _call(7, asyncio.get_running_loop())
        caller.start(call)
        caller.time_out(call)  # before the loop ran the Task's first step (3.11), or after (3.12+)
        for _ in range(5):
            await asyncio.sleep(0)
        return reports, call.task.cancelled()

    reports, cancelled = asyncio.run(main())
    assert reports == [([("timed out", 7)], None, "timeout results")]  # told apart from a call's own results
    assert cancelled


def test_a_call_cancelled_by_someone_else_before_its_first_step_still_times_out():
    """Another piece of code cancels the call's Task before it ran: the row still gets an outcome
    when its deadline passes (the timeout outcome, or -- with eager tasks -- the cancellation)."""

    async def hangs(value):
        await asyncio.sleep(3600)

    async def main():
        reports = []
        caller = _caller(hangs, reports, timeout=0.05)
        call = _call(1, asyncio.get_running_loop())
        caller.start(call)
        call.task.cancel()
        await asyncio.sleep(0.01)
        if not reports:  # not reported yet: the operator's deadline timer calls time_out
            caller.time_out(call)
        return reports

    reports = asyncio.run(main())
    assert len(reports) == 1
    results, error, what = reports[0]
    assert results is None and what == "async call"
    assert isinstance(error, (asyncio.CancelledError, TimeoutError, asyncio.TimeoutError)), error


def test_a_failing_call_leaves_no_unretrieved_task_exception(caplog):
    """A call's exception is the row's outcome: asyncio must not log 'exception was never retrieved'."""
    import gc
    import logging

    async def boom(value):
        raise ValueError("no")

    async def main():
        reports = []
        caller = _caller(boom, reports)
        loop = asyncio.get_running_loop()
        calls = [_call(v, loop) for v in range(3)]
        for c in calls:
            caller.start(c)
        await asyncio.sleep(0.01)
        for c in calls:
            c.task = None
        gc.collect()
        return reports

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        reports = asyncio.run(main())
    assert [type(e) for _, e, _ in reports] == [ValueError] * 3
    assert "never retrieved" not in caplog.text


# --- a call reports its own outcome, as its Task's last step ------------------------------------

def _lazy_tasks(loop, coro, **kwargs):
    """A task factory: the operator then makes no eager Tasks (3.12+), as on 3.10/3.11."""
    return asyncio.Task(coro, loop=loop, **kwargs)


def test_without_a_timeout_a_call_cancelled_before_its_first_step_is_an_error_not_a_hang(monkeypatch):
    """Other code cancels every other Task right after a row entered the operator: the call never
    ran a step, so it never reported. With no deadline to find it, the watch does: the row gets the
    cancellation as its error (here an error row), and the operator finishes."""
    from aiospark.core import deadlines

    monkeypatch.setattr(deadlines, "WATCH_SECONDS", 0.05)

    async def fetch(value):
        await asyncio.sleep(0)
        return value

    async def main():
        asyncio.get_running_loop().set_task_factory(_lazy_tasks)
        out = []
        op = AsyncWaitOperator(fetch, out.append, timeout=None,
                               on_error=lambda value, exc: [(value, type(exc).__name__, str(exc))])
        await op.open()
        await op.process_element(1)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await op.process_element(2)
        await asyncio.wait_for(op.finish(), 5)
        await op.close()
        return [r.value for r in out]

    assert sorted(asyncio.run(main()), key=str) == [
        (1, "CancelledError", "the async call was cancelled before it started"), 2]


def test_a_call_of_a_key_does_not_inherit_the_context_variables_of_the_call_before_it():
    """The next call of a key starts when the one before it reports; the report runs in the
    operator's context, so the call before's ContextVar values do not leak into it."""
    import contextvars

    seen = contextvars.ContextVar("seen", default=None)

    async def fetch(value):
        before = seen.get()
        seen.set(value)
        await asyncio.sleep(0)
        return before

    assert run_all(fetch, list(range(6)), key=lambda v: v % 2, capacity=6) == [None] * 6


def test_a_call_that_cancels_its_own_task_and_returns_still_gets_an_outcome():
    """asyncio marks such a Task cancelled after its last step: the row gets an outcome instead of
    being held for ever -- the cancellation on an eager Task (start() takes its outcome), the results
    on a lazy one (its last step reported them first; design.md)."""

    async def cancels_itself(value):
        asyncio.current_task().cancel()
        return value

    async def main():
        out = []
        op = AsyncWaitOperator(cancels_itself, out.append, timeout=5,
                               on_error=lambda value, exc: [("error", value, type(exc).__name__)])
        await op.open()
        for v in range(3):
            await op.process_element(v)
        await asyncio.wait_for(op.finish(), 5)
        await op.close()
        return [r.value for r in out]

    eager = sys.version_info >= (3, 12)  # the operator's Tasks are eager there (no task factory)
    assert asyncio.run(main()) == [("error", v, "CancelledError") if eager else v for v in range(3)]
