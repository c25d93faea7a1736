"""Failure semantics: AsyncFunctionError with the input and the cause; nothing after a failure;
close() cancels; predicates; the on_error hook."""

import asyncio
import contextlib

import pytest

from aiospark.core import (
    AsyncFunction,
    AsyncFunctionError,
    AsyncTimeoutError,
    AsyncWaitOperator,
    Record,
    RetryStrategy,
    Watermark,
)
from aiospark.core.errors import error_line

from ._util import (
    Collector,
    Gates,
    expect_failure,
    feed,
    quiet_about_the_stopped_task,
    run,
    run_operator,
    safe_close,
    settle,
)

pytestmark = pytest.mark.timeout(30)


class Boom(Exception):
    pass


def _failing_on(bad_values, delay=0.0, raised=None):
    async def fn(v):
        await asyncio.sleep(delay)
        if v in bad_values:
            exc = Boom(f"failed on {v!r}")
            if raised is not None:
                raised.append(exc)
            raise exc
        return v

    return fn


def test_failure_names_the_input_and_chains_the_cause():
    raised = []

    async def main():
        op = AsyncWaitOperator(_failing_on({"needle-4711"}, raised=raised), Collector())
        await op.open()
        err = await expect_failure(op, ["ok", Record("needle-4711", 3)])
        await safe_close(op)
        return err

    err = run(main())
    assert isinstance(err, AsyncFunctionError)
    assert "needle-4711" in str(err)
    assert err.__cause__ is raised[0]


def test_failure_message_of_huge_input_is_truncated():
    huge = "x" * 100_000

    async def fail(v):
        raise Boom("nope")

    async def main():
        op = AsyncWaitOperator(fail, Collector())
        await op.open()
        err = await expect_failure(op, [huge])
        await safe_close(op)
        return err

    err = run(main())
    message = str(err)
    assert "x" * 50 in message  # the input is named...
    assert len(message) < 1000  # ...but truncated to ~200 characters
    assert isinstance(err.__cause__, Boom)


def test_failure_message_of_huge_non_string_input_is_truncated():
    huge = list(range(50_000))

    async def fail(v):
        raise Boom("nope")

    async def main():
        op = AsyncWaitOperator(fail, Collector())
        await op.open()
        err = await expect_failure(op, [huge])
        await safe_close(op)
        return err

    message = str(run(main()))
    assert "0, 1, 2, 3" in message
    assert len(message) < 1000


@pytest.mark.parametrize("ordered", [True, False])
def test_nothing_emitted_after_failure(ordered):
    gates = Gates()

    async def fn(v):
        if v == "bad":
            await asyncio.sleep(0.01)
            raise Boom("bad input")
        await gates[v].wait()
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=ordered, capacity=10)
        await op.open()
        await feed(op, [Record("first", 1)])
        gates.open("first")
        await settle()
        assert out == [Record("first", 1)]
        await feed(op, [Record("before", 2), Record("bad", 3), Watermark(4), Record("after", 5)])
        gates.open("before")  # completes before the failure; in ordered mode it is emittable
        await settle(0.05)  # the failure has happened
        gates.open("after")  # completes after the failure
        await settle(0.03)
        emitted_at_failure = list(out)
        with pytest.raises(AsyncFunctionError):
            await op.finish()
        await settle(0.02)
        final = list(out)
        await safe_close(op)
        return emitted_at_failure, final

    at_failure, final = run(main())
    assert Record("after", 5) not in final
    assert Watermark(4) not in final
    assert final == at_failure
    assert final == [Record("first", 1), Record("before", 2)]


@pytest.mark.parametrize("ordered", [True, False])
def test_completed_results_behind_failed_entry_not_emitted(ordered):
    """A result that completes after another element failed is never emitted."""
    gates = Gates()

    async def fn(v):
        if v == "bad":
            await asyncio.sleep(0.005)
            raise Boom("bad")
        await gates[v].wait()
        return v

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=ordered)
        await op.open()
        await feed(op, ["bad", "late"])
        await settle(0.02)
        gates.open("late")
        await settle(0.02)
        with pytest.raises(AsyncFunctionError):
            await op.finish()
        await safe_close(op)
        return out

    assert run(main()) == []


@pytest.mark.parametrize("next_call", ["process_element", "process_watermark", "finish"])
def test_next_call_after_failure_raises(next_call):
    raised = []

    async def main():
        op = AsyncWaitOperator(_failing_on({"bad"}, raised=raised), Collector())
        await op.open()
        await op.process_element("bad")
        await settle(0.03)  # the call failed in the background
        with pytest.raises(AsyncFunctionError) as info:
            if next_call == "process_element":
                await op.process_element("next")
            elif next_call == "process_watermark":
                await op.process_watermark(10)
            else:
                await op.finish()
        await safe_close(op)
        return info.value

    err = run(main())
    assert err.__cause__ is raised[0]
    assert "bad" in str(err)


def test_failure_during_finish_raises_from_finish():
    async def main():
        op = AsyncWaitOperator(_failing_on({2}, delay=0.03), Collector())
        await op.open()
        await feed(op, [1, 2, 3])
        with pytest.raises(AsyncFunctionError) as info:
            await op.finish()
        await safe_close(op)
        return info.value

    assert isinstance(run(main()).__cause__, Boom)


def test_failure_is_sticky():
    async def main():
        op = AsyncWaitOperator(_failing_on({"bad"}), Collector())
        await op.open()
        await op.process_element("bad")
        await settle(0.02)
        for _ in range(2):
            with pytest.raises(AsyncFunctionError):
                await op.process_element("more")
        with pytest.raises(AsyncFunctionError):
            await op.finish()
        await safe_close(op)

    run(main())


def test_failure_while_blocked_on_backpressure_raises():
    """A process_element waiting for room is released with the failure instead of hanging."""
    gates = Gates()

    async def fn(v):
        await gates[v].wait()
        if v == "bad":
            raise Boom("bad")
        return v

    async def main():
        op = AsyncWaitOperator(fn, Collector(), capacity=1)
        await op.open()
        await op.process_element("bad")
        blocked = asyncio.ensure_future(op.process_element("next"))
        await settle(0.02)
        assert not blocked.done()
        gates.open("bad")
        with pytest.raises(AsyncFunctionError):
            await asyncio.wait_for(blocked, 2.0)
        await safe_close(op)

    run(main())


@pytest.mark.parametrize("result", [None, {"a": 1}, "abc", 42, {1, 2}])
def test_async_function_non_list_result_fails_clearly(result):
    calls = []

    class Bad(AsyncFunction):
        async def async_invoke(self, value):
            calls.append(value)
            return result

    async def main():
        out = Collector()
        op = AsyncWaitOperator(Bad(), out)
        await op.open()
        err = await expect_failure(op, [Record("the-input", 1)])
        await safe_close(op)
        return err, out

    err, out = run(main())
    text = (str(err) + " " + str(err.__cause__)).lower()
    assert "list" in text
    assert "the-input" in str(err)
    assert out == []
    assert calls == ["the-input"]


def _predicate_boom():
    return RuntimeError("predicate exploded")


def test_raising_result_predicate_fails_with_its_exception():
    exploded = _predicate_boom()

    def pred(results):
        raise exploded

    class F(AsyncFunction):
        async def async_invoke(self, value):
            return [value]

    async def main():
        out = Collector()
        op = AsyncWaitOperator(F(), out, retry=RetryStrategy.fixed_delay(3, 0.001, result_predicate=pred))
        await op.open()
        err = await expect_failure(op, ["v"])
        await safe_close(op)
        return err, out

    err, out = run(main())
    assert err.__cause__ is exploded
    assert out == []


def test_raising_exception_predicate_fails_with_its_exception():
    exploded = _predicate_boom()

    def pred(exc):
        raise exploded

    async def main():
        op = AsyncWaitOperator(
            _failing_on({"v"}), Collector(), retry=RetryStrategy.fixed_delay(3, 0.001, exception_predicate=pred)
        )
        await op.open()
        err = await expect_failure(op, ["v"])
        await safe_close(op)
        return err

    assert run(main()).__cause__ is exploded


# --------------------------------------------------------------------------- close()


class Hanging(AsyncFunction):
    def __init__(self):
        self.started = []
        self.cancelled = []
        self.closed = False

    async def async_invoke(self, value):
        self.started.append(value)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled.append(value)
            raise
        return [value]

    async def close(self):
        self.closed = True


@pytest.mark.parametrize("ordered", [True, False])
def test_close_cancels_in_flight_calls(ordered):
    fn = Hanging()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=ordered, capacity=10)
        await op.open()
        await feed(op, [1, 2, 3])
        await settle()
        assert fn.started == [1, 2, 3]
        await asyncio.wait_for(op.close(), 2.0)
        await settle(0.02)
        return out

    out = run(main())
    assert sorted(fn.cancelled) == [1, 2, 3]
    assert fn.closed is True
    assert out == []


def test_close_cancels_pending_backoff():
    attempts = []

    async def fails(v):
        attempts.append(v)
        raise ConnectionError("down")

    async def main():
        op = AsyncWaitOperator(fails, Collector(), retry=RetryStrategy.fixed_delay(5, 0.05))
        await op.open()
        await op.process_element("x")
        await settle(0.01)
        await asyncio.wait_for(op.close(), 2.0)
        n = len(attempts)
        await settle(0.15)
        return n

    n = run(main())
    assert n == 1
    assert attempts == ["x"]


def test_close_while_full_and_blocked_does_not_hang():
    fn = Hanging()

    async def main():
        op = AsyncWaitOperator(fn, Collector(), capacity=1)
        await op.open()
        await op.process_element(1)
        blocked = asyncio.ensure_future(op.process_element(2))
        await settle(0.02)
        await asyncio.wait_for(op.close(), 2.0)
        blocked.cancel()
        await asyncio.gather(blocked, return_exceptions=True)
        await settle(0.02)

    run(main())
    assert fn.closed is True
    assert fn.cancelled == [1]


def test_close_after_failure_calls_function_close():
    class FailFirst(Hanging):
        async def async_invoke(self, value):
            if value == "bad":
                await asyncio.sleep(0.005)
                raise Boom("bad")
            return await super().async_invoke(value)

    fn = FailFirst()

    async def main():
        op = AsyncWaitOperator(fn, Collector())
        await op.open()
        await feed(op, ["slow", "bad"])
        await settle(0.03)
        await safe_close(op)
        await settle(0.02)

    run(main())
    assert fn.closed is True
    assert fn.cancelled == ["slow"]


@pytest.mark.parametrize("ordered", [True, False])
def test_close_right_after_start_cancels_the_call(ordered):
    """close() with no loop iteration after process_element: a call whose body already began
    (e.g. run eagerly up to its first await) must still see asyncio.CancelledError."""
    fn = Hanging()

    async def main():
        op = AsyncWaitOperator(fn, Collector(), ordered=ordered)
        await op.open()
        await op.process_element(1)
        await op.process_element(2)
        # awaited directly (asyncio.wait_for would run close() in a new task and so give the calls
        # a loop iteration first); the run() guard still catches a hang
        await op.close()
        await settle(0.02)

    run(main())
    assert fn.closed is True
    # every call whose body began running must have been cancelled inside (a call never
    # stepped by its Task has nothing to cancel)
    assert sorted(fn.cancelled) == sorted(fn.started)


def test_failure_right_after_start_cancels_other_calls_by_close():
    """A call started just before another one fails eagerly is still cancelled (it sees
    CancelledError) by the time close() has returned."""

    class F(Hanging):
        async def async_invoke(self, value):
            if value == "bad":
                raise Boom("bad")
            return await super().async_invoke(value)

    fn = F()

    async def main():
        op = AsyncWaitOperator(fn, Collector())
        await op.open()
        with contextlib.suppress(AsyncFunctionError):
            await feed(op, ["slow", "bad"])
        await safe_close(op)
        await settle(0.02)

    run(main())
    assert fn.closed is True
    assert fn.cancelled == fn.started  # a started "slow" call must have seen CancelledError


def test_close_without_finish_emits_nothing_more():
    fn = Hanging()

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out)
        await op.open()
        await op.process_element(1)
        await op.close()
        await settle(0.02)
        return out

    assert run(main()) == []


def test_a_closed_operator_refuses_new_elements():
    async def main():
        op = AsyncWaitOperator(Hanging(), Collector())
        await op.open()
        await op.close()
        for attempt in (lambda: op.try_process(1), lambda: op.process_element(1), op.wait_for_space):
            with pytest.raises(RuntimeError, match="closed"):
                result = attempt()
                if asyncio.iscoroutine(result):
                    await result

    run(main())


# --------------------------------------------------------------------------- on_error


def test_on_error_turns_final_failure_into_results():
    seen = []

    def on_error(value, exc):
        seen.append((value, type(exc)))
        return [f"error:{value}:{exc}"]

    out = run(
        run_operator(
            _failing_on({2}),
            [Record(1, 10), Record(2, 20), Watermark(25), Record(3, 30)],
            on_error=on_error,
        )
    )
    assert out == [
        Record(1, 10),
        Record("error:2:failed on 2", 20),
        Watermark(25),
        Record(3, 30),
    ]
    assert seen == [(2, Boom)]


def test_on_error_called_after_retries_are_exhausted():
    attempts = []
    seen = []

    async def fails(v):
        attempts.append(v)
        raise Boom(f"attempt {len(attempts)}")

    def on_error(value, exc):
        seen.append(str(exc))
        return ["fallback"]

    out = run(
        run_operator(fails, [Record("v", 1)], retry=RetryStrategy.fixed_delay(2, 0.001), on_error=on_error)
    )
    assert out == [Record("fallback", 1)]
    assert len(attempts) == 3
    assert seen == ["attempt 3"]


def test_on_error_empty_list_emits_nothing_and_continues():
    out = run(run_operator(_failing_on({"b"}), ["a", "b", "c"], on_error=lambda v, e: []))
    assert out.values() == ["a", "c"]


def test_on_error_receives_timeout_exception():
    seen = []

    async def hang(v):
        await asyncio.sleep(10)

    def on_error(value, exc):
        seen.append((value, exc))
        return [None]

    out = run(run_operator(hang, [Record("slow", 7)], timeout=0.03, on_error=on_error))
    assert out == [Record(None, 7)]
    assert len(seen) == 1 and seen[0][0] == "slow"
    assert isinstance(seen[0][1], AsyncTimeoutError)


def test_on_error_receives_exception_from_timeout_handler():
    seen = []
    boom = Boom("timeout handler failed")

    class F(AsyncFunction):
        async def async_invoke(self, value):
            await asyncio.sleep(10)
            return [value]

        def timeout(self, value):
            raise boom

    out = run(
        run_operator(F(), [Record("x", 1)], timeout=0.03, on_error=lambda v, e: seen.append(e) or ["handled"])
    )
    assert out == [Record("handled", 1)]
    assert seen == [boom]


def test_on_error_unordered_keeps_going():
    out = run(
        run_operator(
            _failing_on({0, 2, 4}, delay=0.001),
            list(range(6)),
            ordered=False,
            on_error=lambda v, e: [-v],
        )
    )
    assert sorted(out.values()) == sorted([0, 1, -2, 3, -4, 5])


@pytest.mark.parametrize("stop", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("batch_size", [None, 4])
@pytest.mark.parametrize("awaits", [True, False], ids=["after-an-await", "in-the-first-step"])
def test_systemexit_in_a_call_leaves_asyncio_run_and_is_never_an_error_row(stop, batch_size, awaits):
    """As under ``asyncio.run`` alone: a SystemExit or KeyboardInterrupt raised by a call leaves the
    loop (or, in an eager first step on 3.12+, the Task's creation and so ``process_element``). The
    operator fails with it first, naming the input, even with ``on_error``: it asks the program to
    stop, it is no element's error (never an error row, never retried)."""
    attempts, handled = [], []

    async def one(v):
        attempts.append(v)
        if awaits:
            await asyncio.sleep(0.001)
        if v == 5:
            raise stop("the library gave up")
        return v

    async def many(values):
        attempts.append(values)
        if awaits:
            await asyncio.sleep(0.001)
        if 5 in values:
            raise stop("the library gave up")
        return values

    op = AsyncWaitOperator(one if batch_size is None else many, Collector(), capacity=8, batch_size=batch_size,
                           retry=RetryStrategy.fixed_delay(3, 0.0),
                           on_error=lambda v, exc: handled.append(v) or [])

    async def main():
        quiet_about_the_stopped_task()
        await op.open()
        for v in range(8):
            await op.process_element(v)
        await op.finish()

    with pytest.raises(stop, match="the library gave up"):
        asyncio.run(main())
    assert handled == []
    assert isinstance(op.failure, AsyncFunctionError) and isinstance(op.failure.__cause__, stop)
    assert "input 5" in str(op.failure) or batch_size is not None
    assert sum(v == 5 or (isinstance(v, list) and 5 in v) for v in attempts) == 1  # not retried, not split



class Unprintable(Exception):
    """An exception whose repr() and str() raise (a library's bug): it must still fail its element."""

    def __repr__(self):
        raise RuntimeError("repr is broken")

    __str__ = __repr__


def test_an_exception_that_cannot_be_printed_still_fails_with_its_input_named():
    async def fn(v):
        await asyncio.sleep(0.001)
        if v == 3:
            raise Unprintable()
        return v

    async def main():
        op = AsyncWaitOperator(fn, Collector(), capacity=4)
        await op.open()
        err = await expect_failure(op, [1, 2, 3, 4])
        await safe_close(op)
        return err

    error = run(main())
    assert "failed for input 3: <unrepresentable Unprintable: its repr() raised RuntimeError>" in str(error)
    assert isinstance(error.__cause__, Unprintable)


def test_error_line_names_the_type_even_when_the_message_cannot_be_printed():
    assert error_line(ValueError("thirteen")) == "ValueError: thirteen"
    assert error_line(Unprintable()) == "Unprintable: <unprintable Unprintable: its str() raised RuntimeError>"
    assert error_line(ValueError("x" * 5000)).endswith("...") and len(error_line(ValueError("x" * 5000))) == 2000
