"""A journal that only records (``records_only = True``: the table route's key runs, whose reads
Spark made before the operator): the operator asks it nothing per element, hands each call's
results over once, and the element takes the outputs the journal returns."""
import asyncio

import pytest

import aiospark
from aiospark.core import AsyncFunction, AsyncFunctionError, AsyncWaitOperator

from ._util import run
from .test_durable import drive


class Recorder:
    """Doubles the outputs of the elements in ``twice``; keeps what it was handed."""

    records_only = True

    def __init__(self, twice=()):
        self.twice = set(twice)
        self.handed = []

    def recorded(self, identity):  # never asked
        raise AssertionError("a journal that only records is never read")

    def record(self, identity, results, error):
        raise AssertionError("a journal that only records is handed calls through settled()")

    def settled(self, value, results, recordable):
        self.handed.append((value, list(results), recordable))
        return results * 2 if value in self.twice else results


class Identity:
    def __init__(self):
        self.asked = []

    def __call__(self, value):
        self.asked.append(value)
        return f"k{value}"


@pytest.mark.parametrize("ordered", [True, False])
def test_each_call_is_handed_over_once_and_the_element_takes_what_the_journal_returns(ordered):
    async def f(x):
        await asyncio.sleep(0.001 * (x % 3))
        return {"x": x}

    journal, identify, out = Recorder(twice={2, 5}), Identity(), []
    op = AsyncWaitOperator(f, out.extend, ordered=ordered, capacity=4, identify=identify, journal=journal,
                           values=True)
    run(drive(op, list(range(8))))
    assert sorted(v for v, _, _ in journal.handed) == list(range(8))
    assert all(results == [{"x": v}] and recordable for v, results, recordable in journal.handed)
    assert sorted(r["x"] for r in out) == sorted([*range(8), 2, 5])
    assert identify.asked == []  # no identity per element (only idempotency_key() would ask)


def test_idempotency_keys_are_computed_when_a_call_asks():
    async def f(x):
        return aiospark.idempotency_key()

    journal, identify, out = Recorder(), Identity(), []
    op = AsyncWaitOperator(f, out.extend, ordered=True, capacity=4, identify=identify, journal=journal, values=True)
    run(drive(op, [1, 2]))
    assert len(set(out)) == 2 and identify.asked == [1, 2]


class Slow(AsyncFunction):
    async def async_invoke(self, x):
        await asyncio.sleep(5 if x == 1 else 0)
        return [x]

    def timeout(self, x):
        return ["fallback"]


def test_a_timeouts_fallback_is_handed_over_as_not_recordable():
    journal, out = Recorder(twice={1}), []
    op = AsyncWaitOperator(Slow(), out.extend, ordered=True, capacity=4, timeout=0.2, identify=Identity(),
                           journal=journal, values=True)
    run(drive(op, [0, 1, 2]))
    assert out == [0, "fallback", "fallback", 2]
    assert sorted((v, recordable) for v, _, recordable in journal.handed) == [(0, True), (1, False), (2, True)]


def test_a_failed_call_is_not_handed_over_and_fails_the_operator():
    async def f(x):
        if x == 1:
            raise ValueError("bad")
        return x

    journal = Recorder()
    op = AsyncWaitOperator(f, [].extend, ordered=True, capacity=1, identify=Identity(), journal=journal, values=True)
    with pytest.raises(AsyncFunctionError):
        run(drive(op, [0, 1, 2]))
    assert [v for v, _, _ in journal.handed] == [0]


def test_a_journal_that_raises_fails_the_operator():
    class Broken(Recorder):
        def settled(self, value, results, recordable):
            raise OSError("disk full")

    async def f(x):
        return x

    op = AsyncWaitOperator(f, [].extend, ordered=False, capacity=2, identify=Identity(), journal=Broken(), values=True)
    with pytest.raises(AsyncFunctionError, match="disk full"):
        run(drive(op, [0, 1]))


def test_on_error_is_refused_with_a_journal_that_only_records():
    async def f(x):
        return x

    with pytest.raises(ValueError, match="use it without on_error"):
        AsyncWaitOperator(f, [].extend, identify=Identity(), journal=Recorder(), values=True,
                          on_error=lambda value, exc: [])
