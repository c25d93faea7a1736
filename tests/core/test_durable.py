"""The operator's durable-call hooks: a journal's recorded outcomes, shared calls of equal rows,
the budget asked before every attempt, and the idempotency key inside a call."""
import asyncio

import pytest

from aiospark.core import AsyncFunctionError, AsyncWaitOperator, RetryStrategy
from aiospark.core.context import idempotency_key, time_left
from aiospark.core.durable import BudgetExhausted, Recorded, RecordedError

from ._util import Collector, quiet_about_the_stopped_task, run


class MemoryJournal:
    """A task journal in memory: what a store's task view does, without the store."""

    def __init__(self, recorded=None, keep_errors=False):
        self.outcomes = dict(recorded or {})
        self.keep_errors = keep_errors
        self.records = []

    def recorded(self, identity):
        return self.outcomes.get(identity)

    def record(self, identity, results, error):
        self.records.append((identity, results, None if error is None else type(error).__name__))
        if error is None:
            self.outcomes[identity] = Recorded(results)
        elif self.keep_errors:
            self.outcomes[identity] = Recorded(None, f"{type(error).__name__}: {error}")


def identity(value):
    return f"k{value}"


async def drive(op, values):
    await op.open()
    for v in values:
        await op.process_element(v)
    await op.finish()
    await op.close()


@pytest.mark.parametrize("ordered", [True, False])
def test_recorded_rows_are_not_called_and_emit_their_record(ordered):
    calls = []

    async def f(x):
        calls.append(x)
        await asyncio.sleep(0.001 * (x % 3))
        return x * 10

    journal = MemoryJournal({"k2": Recorded([20]), "k4": Recorded([]), "k5": Recorded([50, 51])})
    out = Collector()
    run(drive(AsyncWaitOperator(f, out, ordered=ordered, identify=identity, journal=journal), range(7)))
    assert sorted(calls) == [0, 1, 3, 6]
    values = out.values()
    if ordered:
        assert values == [0, 10, 20, 30, 50, 51, 60]
    else:
        assert sorted(values) == [0, 10, 20, 30, 50, 51, 60]
    assert sorted(r[0] for r in journal.records) == ["k0", "k1", "k3", "k6"]  # replays not re-recorded
    assert dict((k, r) for k, r, _ in journal.records)["k3"] == [30]


def test_equal_rows_in_one_task_share_one_call():
    calls = []

    async def f(x):
        calls.append(x)
        await asyncio.sleep(0.01)
        return x.upper()

    journal = MemoryJournal()
    out = Collector()
    run(drive(AsyncWaitOperator(f, out, ordered=True, identify=lambda v: v, journal=journal),
              ["a", "b", "a", "a", "c", "b"]))
    assert out.values() == ["A", "B", "A", "A", "C", "B"]
    assert sorted(calls) == ["a", "b", "c"]
    assert sorted(k for k, _, _ in journal.records) == ["a", "b", "c"]


def test_without_a_journal_equal_rows_are_each_called():
    calls = []

    async def f(x):
        calls.append(x)
        return x

    run(drive(AsyncWaitOperator(f, Collector(), identify=lambda v: "same"), [1, 2, 3]))
    assert calls == [1, 2, 3]


def test_a_recorded_error_is_the_rows_error_again():
    async def f(x):
        return x

    journal = MemoryJournal({"k1": Recorded(None, "ValueError: bad row 1")})
    out = Collector()
    op = AsyncWaitOperator(f, out, identify=identity, journal=journal,
                           on_error=lambda v, e: [f"error {type(e).__name__}: {e}"])
    run(drive(op, [0, 1, 2]))
    assert out.values() == [0, "error RecordedError: ValueError: bad row 1", 2]
    assert op.metrics.error_rows == 1 and op.metrics.calls == 2

    op = AsyncWaitOperator(f, Collector(), identify=identity, journal=journal)
    with pytest.raises(AsyncFunctionError) as info:
        run(drive(op, [0, 1, 2]))
    assert isinstance(info.value.__cause__, RecordedError)


def test_errors_are_told_to_the_journal_timeout_fallbacks_and_budget_refusals_are_not():
    async def f(x):
        if x == 1:
            raise ValueError("one")
        if x == 2:
            await asyncio.sleep(5)
        return x

    from aiospark.core import AsyncFunction

    class WithFallback(AsyncFunction):
        async def async_invoke(self, x):
            return [await f(x)]

        def timeout(self, x):
            return ["fallback"]

    class NoMore:
        def take(self, value):
            return value != 3

    journal = MemoryJournal(keep_errors=True)
    out = Collector()
    op = AsyncWaitOperator(WithFallback(), out, identify=identity, journal=journal, timeout=0.2,
                           budget=NoMore(), on_error=lambda v, e: [type(e).__name__])
    run(drive(op, [0, 1, 2, 3]))
    assert out.values() == [0, "ValueError", "fallback", "BudgetExhausted"]
    assert journal.records == [("k0", [0], None), ("k1", None, "ValueError")]
    assert journal.outcomes["k1"] == Recorded(None, "ValueError: one")


def test_a_row_sharing_a_call_that_times_out_gets_its_outcome():
    async def f(x):
        await asyncio.sleep(1)
        return x

    out = Collector()
    op = AsyncWaitOperator(f, out, identify=lambda v: "one", journal=MemoryJournal(), timeout=0.1,
                           on_error=lambda v, e: [type(e).__name__])
    run(drive(op, [1, 2, 3]))
    assert out.values() == ["AsyncTimeoutError"] * 3
    assert op.metrics.timeouts == 1  # one call timed out; the rows sharing it are not counted again


def test_a_journal_that_fails_to_read_is_that_rows_error():
    class Broken(MemoryJournal):
        def recorded(self, identity):
            if identity == "k1":
                raise OSError("segment unreadable")
            return None

    async def f(x):
        return x

    out = Collector()
    run(drive(AsyncWaitOperator(f, out, identify=identity, journal=Broken(),
                                on_error=lambda v, e: [repr(e)]), [0, 1]))
    assert out.values() == [0, "OSError('segment unreadable')"]


def test_identify_and_journal_are_checked():
    async def f(x):
        return x

    with pytest.raises(ValueError, match="a journal needs identify="):
        AsyncWaitOperator(f, Collector(), journal=MemoryJournal())
    with pytest.raises(TypeError, match="identify must be a callable"):
        AsyncWaitOperator(f, Collector(), identify="id")


# --- budget ---------------------------------------------------------------------------------------

class Allowance:
    """A budget gate of ``units`` attempts; ``refill`` makes every take an awaitable."""

    def __init__(self, units, refill=False):
        self.units, self.refill, self.asked = units, refill, []

    def take(self, value):
        self.asked.append(value)
        granted = self.units > 0
        self.units -= granted
        if not self.refill:
            return granted

        async def later():
            await asyncio.sleep(0)
            return granted
        return later()


@pytest.mark.parametrize("refill", [False, True])
def test_a_spent_budget_starts_no_call_and_says_so(refill):
    calls = []

    async def f(x):
        calls.append(x)
        return x

    out = Collector()
    op = AsyncWaitOperator(f, out, budget=Allowance(3, refill), capacity=1,
                           on_error=lambda v, e: [f"{type(e).__name__}: {e}"])
    run(drive(op, range(5)))
    assert calls == [0, 1, 2]
    assert out.values()[:3] == [0, 1, 2]
    assert all(v.startswith("BudgetExhausted: the budget is spent") for v in out.values()[3:])
    assert op.metrics.calls == 3


def test_every_attempt_is_charged_and_a_spent_budget_is_never_retried():
    attempts = []

    async def f(x):
        attempts.append(x)
        raise ConnectionError("flaky")

    budget = Allowance(4)
    op = AsyncWaitOperator(f, Collector(), budget=budget, capacity=1,
                           retry=RetryStrategy.fixed_delay(10, 0.001))
    with pytest.raises(AsyncFunctionError) as info:
        run(drive(op, [7]))
    assert attempts == [7] * 4 and len(budget.asked) == 5  # four attempts, the fifth refused
    assert isinstance(info.value.__cause__, BudgetExhausted)


# --- idempotency key ------------------------------------------------------------------------------

def test_the_idempotency_key_is_the_rows_identity_in_every_attempt():
    seen = []

    async def f(x):
        seen.append((x, idempotency_key(), asyncio.current_task() is not None))
        if len([s for s in seen if s[0] == x]) < 2:
            raise ConnectionError("again")
        return x

    run(drive(AsyncWaitOperator(f, Collector(), identify=identity,
                                retry=RetryStrategy.fixed_delay(2, 0.001)), [1, 2]))
    assert sorted(seen) == [(1, "k1", True), (1, "k1", True), (2, "k2", True), (2, "k2", True)]


def test_the_idempotency_key_outside_a_call_or_in_a_batch_call_says_why_not():
    with pytest.raises(RuntimeError, match="inside a call"):
        idempotency_key()
    errors = []

    async def batch(values):
        try:
            idempotency_key()
        except RuntimeError as exc:
            errors.append(str(exc))
        return values

    run(drive(AsyncWaitOperator(batch, Collector(), identify=identity, batch_size=4), range(4)))
    assert errors and "batch call" in errors[0]


def test_without_a_journal_an_identity_that_cannot_be_computed_is_that_rows_error():
    def identify(value):
        if value == 2:
            raise ValueError("row 2 has no identity")
        return f"k{value}"

    keys = {}

    async def f(x):
        keys[x] = idempotency_key()  # identify() runs here, in the call that asks
        return x

    out = []
    op = AsyncWaitOperator(f, Collector(), identify=identify, timeout=5,
                           on_error=lambda value, exc: out.append((value, str(exc))) or [])
    run(drive(op, [1, 2, 3]))
    assert keys == {1: "k1", 3: "k3"}
    assert out == [(2, "row 2 has no identity")]


def test_time_left_and_the_idempotency_key_reach_the_tasks_a_call_starts():
    async def f(x):
        async def child():
            return idempotency_key(), time_left()

        (key, left), = await asyncio.gather(child())  # gather wraps it in a task of its own
        return key, left

    out = Collector()
    run(drive(AsyncWaitOperator(f, out, identify=identity, timeout=30), [7]))
    [(key, left)] = out.values()
    assert key == "k7" and 0 < left <= 30


def test_a_systemexit_is_not_recorded_as_the_rows_outcome():
    """A stop (SystemExit, KeyboardInterrupt) is not the row's fault: a rerun must call it again."""
    async def f(x):
        await asyncio.sleep(0.001)
        if x == 2:
            raise SystemExit("stop")
        return x

    journal = MemoryJournal(keep_errors=True)
    op = AsyncWaitOperator(f, Collector(), identify=identity, journal=journal, capacity=4)
    async def main():
        quiet_about_the_stopped_task()
        await drive(op, range(4))

    with pytest.raises(SystemExit):
        asyncio.run(main())
    assert "k2" not in [r[0] for r in journal.records]
    assert isinstance(op.failure, AsyncFunctionError) and isinstance(op.failure.__cause__, SystemExit)


def test_a_key_with_thousands_of_recorded_rows_after_a_slow_call_hands_turns_over_without_recursion():
    """Key order: recorded rows wait behind the call under way for their key, then complete one
    after the other as their turns come -- in a loop: 5,000 of them must not exhaust the stack."""
    async def f(x):
        await asyncio.sleep(0.05)
        return x

    journal = MemoryJournal({f"k{i}": Recorded([i]) for i in range(1, 5000)})
    out = Collector()
    run(drive(AsyncWaitOperator(f, out, ordered=False, capacity=5000, key=lambda v: 0, identify=identity,
                                journal=journal), range(5000)))
    assert out.values() == list(range(5000))


def test_a_null_identity_is_called_every_time_and_never_recorded_nor_shared():
    calls = []

    async def f(x):
        calls.append(x)
        await asyncio.sleep(0.01)
        return x

    journal = MemoryJournal({"kNone": Recorded(["stale"])})
    out = Collector()
    run(drive(AsyncWaitOperator(f, out, ordered=True, identify=lambda v: None if v < 0 else f"k{v}",
                                journal=journal), [-1, -1, 3]))
    assert out.values() == [-1, -1, 3] and calls == [-1, -1, 3]
    assert [r[0] for r in journal.records] == ["k3"]


def test_only_answers_are_recorded_with_keep_errors():
    class Status(Exception):
        def __init__(self, status):
            super().__init__(f"HTTP {status}")
            self.status = status

    async def f(x):
        if x == 1:
            raise ValueError("refused")        # the row's answer
        if x == 2:
            raise Status(503)                  # the service's state
        if x == 3:
            raise TimeoutError("slow")         # the service's state
        if x == 4:
            raise ConnectionResetError("gone")  # the service's state
        return x

    def gate(value):
        return value != 5  # the budget refuses row 5: no call

    class Gate:
        def take(self, value):
            return gate(value)

    journal = MemoryJournal(keep_errors=True)
    out = Collector()
    run(drive(AsyncWaitOperator(f, out, identify=identity, journal=journal, budget=Gate(),
                                on_error=lambda v, e: [type(e).__name__]), range(6)))
    assert out.values() == [0, "ValueError", "Status", "TimeoutError", "ConnectionResetError", "BudgetExhausted"]
    assert sorted((i, e) for i, _, e in journal.records) == [("k0", None), ("k1", "ValueError")]
