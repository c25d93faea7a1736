"""record_usage: amounts reported inside calls land in the metrics of the operator running them."""
import asyncio

import pytest

import aiospark
from aiospark.core import AsyncWaitOperator
from aiospark.core.metrics import OperatorMetrics

from ._util import Collector, run, run_operator


def test_usage_adds_up_per_operator_even_on_one_loop():
    async def tokens(n):
        await asyncio.sleep(0.001)
        aiospark.record_usage(prompt_tokens=n, completion_tokens=1)
        return n

    async def two_operators():
        async def one(values):
            op = AsyncWaitOperator(tokens, Collector(), capacity=10)
            await op.open()
            for v in values:
                await op.process_element(v)
            await op.finish()
            await op.close()
            return op.metrics.usage

        return await asyncio.gather(one([1, 2, 3]), one([10, 20]))

    first, second = run(two_operators())
    assert first == {"prompt_tokens": 6, "completion_tokens": 3}
    assert second == {"prompt_tokens": 30, "completion_tokens": 2}


def test_usage_outside_an_operator_does_nothing_and_bad_amounts_are_refused():
    aiospark.record_usage(tokens=5)  # no operator: nothing to add to, no error
    for bad in (-1, float("nan"), float("inf"), "3", True):
        with pytest.raises(ValueError, match="must be a finite number >= 0"):
            aiospark.record_usage(tokens=bad)


def test_a_bad_amount_inside_a_call_fails_that_call():
    async def bad(value):
        aiospark.record_usage(tokens=-value)
        return value

    out = run(run_operator(bad, [1], on_error=lambda v, e: [type(e).__name__]))
    assert out.values() == ["ValueError"]


def test_usage_travels_and_merges_with_the_other_metrics():
    a, b = OperatorMetrics(), OperatorMetrics()
    a.usage.update(prompt_tokens=3)
    b.usage.update(prompt_tokens=4, completion_tokens=2)
    merged = OperatorMetrics.from_dict(a.copy().merge(b).to_dict())
    assert merged.usage == {"prompt_tokens": 7, "completion_tokens": 2}
    assert "completion_tokens=2 prompt_tokens=7" in str(merged)
    legacy = a.to_dict()
    del legacy["usage"]  # metrics written before usage existed still read
    assert OperatorMetrics.from_dict(legacy).usage == {}


def test_usage_of_calls_started_from_an_earlier_calls_report_counts_too():
    """With key order every call after the first of a key starts when the one before it reports,
    and a driver's room listener starts calls from the emission: those calls, too, must count in
    their operator's usage (the report runs in the operator's context, usage bound included)."""

    async def tokens(n):
        await asyncio.sleep(0.001)
        aiospark.record_usage(prompt_tokens=n)
        return n

    async def keyed():
        op = AsyncWaitOperator(tokens, Collector(), capacity=10, key=lambda v: 0)
        await op.open()
        for v in range(1, 11):
            await op.process_element(v)
        await op.finish()
        await op.close()
        return op.metrics.usage

    async def room_listener():
        op = AsyncWaitOperator(tokens, Collector(), capacity=2)
        await op.open()
        values = list(range(1, 11))

        def fill():
            while values and op.failure is None and op.try_process(values[0]):
                values.pop(0)

        op.on_room(fill)
        fill()
        while values:
            await op.wait_for_space()
        await op.finish()
        await op.close()
        return op.metrics.usage

    assert run(keyed()) == {"prompt_tokens": 55}
    assert run(room_listener()) == {"prompt_tokens": 55}
