"""A call that ignores its timeout's cancel: its row gets its timeout outcome after a grace period,
the call is left running (and cancelled again at close), nothing hangs; a call that unwinds within
the grace is waited for, as before."""

import asyncio
import warnings

import pytest

from aiospark.core import (
    AsyncFunction,
    AsyncWaitOperator,
    CancellationIgnoredWarning,
    Record,
    RetryStrategy,
    unwinding,
)

from ._util import EPS, Collector, feed, run, run_operator

GRACE = 0.3
TIMEOUT = 0.1

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    monkeypatch.setattr(unwinding, "GRACE_SECONDS", GRACE)


class Stubborn(AsyncFunction):
    """Odd values catch every cancel and go on until released; even values return at once."""

    def __init__(self):
        self.release: asyncio.Event | None = None
        self.started = {}
        self.cancels = {}
        self.ended = []

    async def async_invoke(self, value):
        self.started[value] = asyncio.get_running_loop().time()
        if value % 2 == 0:
            return [value]
        while not self.release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:  # the defect under test: the cancel is swallowed
                self.cancels[value] = self.cancels.get(value, 0) + 1
        self.ended.append(value)
        return [f"late-{value}"]

    def timeout(self, value):
        return [f"fallback-{value}"]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_call_that_ignores_its_cancel_gets_its_timeout_outcome_after_the_grace(ordered):
    fn = Stubborn()

    async def main():
        fn.release = asyncio.Event()
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=ordered, capacity=4, timeout=TIMEOUT)
        await op.open()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.warns(CancellationIgnoredWarning, match=r"Stubborn.*re-raise"):
            await feed(op, [Record(i, i) for i in range(4)])
            await op.finish()
        finished = loop.time() - t0
        emitted = list(out)
        after_finish = dict(fn.cancels), list(fn.ended)
        t1 = loop.time()
        await op.close()  # cancels the calls left behind once more, waits at most the grace for them
        closing = loop.time() - t1
        after_close = dict(fn.cancels)
        fn.release.set()
        await asyncio.sleep(0.1)
        return finished, emitted, after_finish, closing, after_close, list(out), op.metrics

    finished, emitted, after_finish, closing, after_close, final, metrics = run(main())
    expected = [Record(0, 0), Record("fallback-1", 1), Record(2, 2), Record("fallback-3", 3)]
    assert (emitted if ordered else sorted(emitted, key=lambda r: r.timestamp)) == expected
    assert TIMEOUT + GRACE - EPS <= finished < 5.0
    # the rows were decided while the calls still ran: each had been cancelled once and went on
    assert after_finish == ({1: 1, 3: 1}, [])
    assert GRACE - EPS <= closing < 5.0
    assert after_close == {1: 2, 3: 2}
    # released, they end; what they return is not emitted (their rows were decided)
    assert sorted(fn.ended) == [1, 3]
    assert final == emitted
    assert (metrics.timeouts, metrics.left_behind) == (2, 2)
    assert str(metrics).endswith(" left_behind=2")


def test_without_a_timeout_handler_the_row_gets_the_timeout_error():
    class Plain(Stubborn):
        timeout = AsyncFunction.timeout

    fn = Plain()

    async def main():
        fn.release = asyncio.Event()
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=False, capacity=4, timeout=TIMEOUT,
                               on_error=lambda value, exc: [f"{value}: {type(exc).__name__}"])
        await op.open()
        try:
            with pytest.warns(CancellationIgnoredWarning):
                await feed(op, [Record(1, 1), Record(2, 2)])
                await op.finish()
        finally:
            fn.release.set()
            await op.close()
        return out.values()

    assert sorted(run(main()), key=str) == ["1: AsyncTimeoutError", 2]


def test_a_batch_call_that_ignores_its_cancel_times_out_its_rows_after_the_grace():
    release = None
    cancels = []

    async def stubborn_batch(values):
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                cancels.append(list(values))
        return values

    async def main():
        nonlocal release
        release = asyncio.Event()
        out = Collector()
        op = AsyncWaitOperator(stubborn_batch, out, ordered=True, capacity=4, timeout=TIMEOUT, batch_size=2,
                               on_error=lambda value, exc: [f"{value}: {type(exc).__name__}"])
        await op.open()
        try:
            with pytest.warns(CancellationIgnoredWarning, match="stubborn_batch"):
                await feed(op, [Record(i, i) for i in range(4)])
                await op.finish()
        finally:
            release.set()
            await op.close()
        return out

    out = run(main())
    assert out == [Record(f"{i}: AsyncTimeoutError", i) for i in range(4)]
    assert sorted(cancels) == [[0, 1], [0, 1], [2, 3], [2, 3]]  # at the deadline, and again at close()


def test_the_next_call_of_a_key_starts_once_the_call_before_it_is_left_behind():
    fn = Stubborn()
    timeout = 1.0

    async def main():
        fn.release = asyncio.Event()
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=False, capacity=4, timeout=timeout, key=lambda value: "one key")
        await op.open()
        try:
            with pytest.warns(CancellationIgnoredWarning):
                await feed(op, [Record(1, 1)])
                # element 2 enters later: its deadline falls after element 1's deadline and grace
                await asyncio.sleep(timeout / 2)
                await feed(op, [Record(2, 2)])
                await op.finish()
        finally:
            fn.release.set()
            await op.close()
        return out

    out = run(main())
    assert out == [Record("fallback-1", 1), Record(2, 2)]
    # element 2 waited for its key's turn: until element 1 was left behind
    assert fn.started[2] - fn.started[1] >= timeout + GRACE - EPS


def test_a_call_that_unwinds_within_the_grace_is_waited_for_and_not_warned_about():
    events = []

    class SlowCleanup(AsyncFunction):
        async def async_invoke(self, value):
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                await asyncio.sleep(GRACE / 3)  # a cleanup that takes a while: its connection closing
                events.append("unwound")
                raise
            return [value]

        def timeout(self, value):
            events.append("timeout handler")
            return ["fallback"]

    with warnings.catch_warnings():
        warnings.simplefilter("error", CancellationIgnoredWarning)
        out = run(run_operator(SlowCleanup(), [Record(1, 1)], timeout=TIMEOUT))
    assert events == ["unwound", "timeout handler"]
    assert out == [Record("fallback", 1)]


def test_a_warning_made_an_error_does_not_hold_the_row():
    fn = Stubborn()

    async def main():
        fn.release = asyncio.Event()
        loop = asyncio.get_running_loop()
        handled = []
        loop.set_exception_handler(lambda loop, context: handled.append(context.get("exception")))
        out = Collector()
        op = AsyncWaitOperator(fn, out, capacity=4, timeout=TIMEOUT)
        await op.open()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", CancellationIgnoredWarning)  # as under python -W error
                await feed(op, [Record(1, 1)])
                await op.finish()
        finally:
            fn.release.set()
            await op.close()
        return out, handled

    out, handled = run(main())
    assert out == [Record("fallback-1", 1)]
    # the warning, raised in the loop's callback, went to the loop's exception handler
    assert [type(exc) for exc in handled] == [CancellationIgnoredWarning]


@pytest.mark.parametrize("batched", [False, True])
def test_a_call_left_behind_makes_no_new_attempt_when_it_fails_later(batched):
    attempts = []
    release = None

    async def swallows_then_fails(value):
        attempts.append(value)
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass
        raise ConnectionError("the service went away meanwhile")  # retryable, but the row is decided

    async def main():
        nonlocal release
        release = asyncio.Event()
        out = Collector()
        op = AsyncWaitOperator(swallows_then_fails, out, capacity=4, timeout=TIMEOUT,
                               retry=RetryStrategy.fixed_delay(3, 0.01), batch_size=1 if batched else None,
                               on_error=lambda value, exc: [type(exc).__name__])
        await op.open()
        try:
            with pytest.warns(CancellationIgnoredWarning):
                await feed(op, [Record(1, 1)])
                await op.finish()
            release.set()
            await asyncio.sleep(0.2)  # time for three retries, were any made
        finally:
            await op.close()
        return out, op.metrics

    out, metrics = run(main())
    assert out == [Record("AsyncTimeoutError", 1)]
    assert len(attempts) == 1 and metrics.retries == 0


def test_no_attempt_starts_when_a_shared_limiter_swallowed_the_cancel():
    calls = []
    release = None

    class DeafLimiter:
        """A user's shared limiter whose acquire() catches the cancel and waits on."""

        async def acquire(self):
            while not release.is_set():
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    pass
            return False

    async def paid(value):
        calls.append(value)
        return value

    async def main():
        nonlocal release
        release = asyncio.Event()
        out = Collector()
        op = AsyncWaitOperator(paid, out, capacity=4, timeout=TIMEOUT, rate_limit=DeafLimiter(),
                               on_error=lambda value, exc: [type(exc).__name__])
        await op.open()
        try:
            with pytest.warns(CancellationIgnoredWarning):
                await feed(op, [Record(1, 1)])
                await op.finish()
            release.set()
            await asyncio.sleep(0.1)  # the limiter lets the call through now, were it to start
        finally:
            await op.close()
        return out

    assert run(main()) == [Record("AsyncTimeoutError", 1)]
    assert calls == []
