"""Key-ordered calls in the core operator: equal keys run one at a time and are emitted in input
order; different keys run concurrently; timeouts and errors keep the order."""
import asyncio
import random

import pytest

from aiospark.core import AsyncFunction, AsyncWaitOperator, Watermark

from ._util import Collector, feed_all, run, run_operator


def test_a_change_stream_applied_in_key_order_reaches_the_right_final_state():
    # each change sets an account's balance from the previous one: applied out of order, the final
    # balances would be wrong. Latencies are random, so completion order differs from input order.
    rng = random.Random(7)
    changes = [(rng.randrange(20), rng.randrange(-50, 50)) for _ in range(600)]
    balances = {}
    running = {}
    overlaps = []

    async def apply(change):
        account, delta = change
        running[account] = running.get(account, 0) + 1
        overlaps.append(running[account])
        await asyncio.sleep(rng.random() * 0.005)
        balances[account] = balances.get(account, 0) + delta
        running[account] -= 1
        return (account, balances[account])

    out = run(run_operator(apply, changes, ordered=False, capacity=64, key=lambda c: c[0]))
    assert max(overlaps) == 1  # never two calls of one account at once
    expected = {}
    emitted_per_key = {}
    for account, delta in changes:
        expected[account] = expected.get(account, 0) + delta
        emitted_per_key.setdefault(account, []).append(expected[account])
    assert balances == expected
    seen = {}
    for account, balance in out.values():
        seen.setdefault(account, []).append(balance)
    assert seen == emitted_per_key  # per key: every change, in input order


def test_different_keys_run_concurrently():
    peak = [0, 0]

    async def slow(value):
        peak[0] += 1
        peak[1] = max(peak[1], peak[0])
        await asyncio.sleep(0.02)
        peak[0] -= 1
        return value

    run(run_operator(slow, range(50), ordered=False, capacity=50, key=lambda v: v % 10))
    assert peak[1] == 10  # one call per key at a time, all ten keys at once


def test_output_of_other_keys_is_not_held_back_by_a_slow_key():
    async def fn(value):
        key, _ = value
        await asyncio.sleep(0.2 if key == "slow" else 0.001)
        return value

    out = run(run_operator(fn, [("slow", 0)] + [("fast", i) for i in range(5)], ordered=False,
                           capacity=10, key=lambda v: v[0]))
    assert out.values()[-1] == ("slow", 0)


def test_a_timed_out_call_keeps_its_place_in_key_order():
    events = []

    class Fn(AsyncFunction):
        async def async_invoke(self, value):
            events.append(f"call {value}")
            await asyncio.sleep(5 if value < 3 else 0.001)
            return [value]

        def timeout(self, value):
            events.append(f"late {value}")
            return [f"late {value}"]

    # 0 times out; 1 and 2 (same key) wait behind it. Their own deadlines pass while they wait, or
    # (on a machine that paused between enqueuing 0 and 1) soon after their turn: either way they
    # time out after 0 and in input order, and 3 (another key) is not held back
    out = run(run_operator(Fn(), [0, 1, 2, 3], ordered=False, capacity=10, timeout=0.1,
                           key=lambda v: "k" if v < 3 else "other"))
    assert out.values()[0] == 3
    assert out.values()[1:] == ["late 0", "late 1", "late 2"]
    keyed = [e for e in events if not e.endswith("3")]
    assert keyed[:2] == ["call 0", "late 0"]  # 1 and 2 did not start beside 0
    assert keyed.index("late 1") < keyed.index("late 2")


def test_a_key_function_that_raises_fails_that_element():
    def key(value):
        if value == 2:
            raise LookupError("no key for 2")
        return value % 2

    async def echo(value):
        return value

    out = run(run_operator(echo, range(5), ordered=False, capacity=5, key=key,
                           on_error=lambda v, e: [f"error {v}: {e}"]))
    assert sorted(map(str, out.values())) == sorted(["0", "1", "error 2: no key for 2", "3", "4"])


def test_an_unhashable_key_fails_with_type_error():
    async def echo(value):
        return value

    out = run(run_operator(echo, [[1], [2]], ordered=False, capacity=5, key=lambda v: v,
                           on_error=lambda v, e: [type(e).__name__]))
    assert out.values() == ["TypeError", "TypeError"]


def test_watermarks_still_split_segments_with_keys():
    async def fn(value):
        await asyncio.sleep(0.001 * (5 - value % 5))
        return value

    out = run(run_operator(fn, [0, 1, 2, Watermark(10), 3, 4, 5], ordered=False, capacity=10,
                           key=lambda v: v % 2))
    elements = list(out)
    wm = next(i for i, e in enumerate(elements) if isinstance(e, Watermark))
    assert sorted(e.value for e in elements[:wm]) == [0, 1, 2]
    assert sorted(e.value for e in elements[wm + 1:]) == [3, 4, 5]


def test_key_must_be_callable():
    async def fn(value):
        return value

    with pytest.raises(TypeError, match="key must be a callable"):
        AsyncWaitOperator(fn, Collector(), key="account")


def test_key_order_under_backpressure_with_many_values():
    async def fn(value):
        await asyncio.sleep(random.random() * 0.001)
        return value

    async def main():
        out = Collector()
        op = AsyncWaitOperator(fn, out, ordered=False, capacity=16, key=lambda v: v % 3)
        await op.open()
        await feed_all(op, range(1500))
        await op.finish()
        await op.close()
        return out

    values = run(main()).values()
    assert sorted(values) == list(range(1500))
    for k in range(3):
        mine = [v for v in values if v % 3 == k]
        assert mine == sorted(mine)


# -- NaN keys: one key, as Spark groups them (issue 44) -------------------------------------------

def _concurrency_per_key(values, key):
    """Run ``values`` through an unordered, key-ordered operator whose calls take less time the
    later they come (so without key order the output would reverse); returns (output, peak)."""
    import asyncio

    from aiospark.core import AsyncWaitOperator

    from ._util import Collector, run

    running = {"now": 0, "peak": 0}

    async def call(value):
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        await asyncio.sleep(0.01 * (len(values) - value[1]))
        running["now"] -= 1
        return value[1]

    async def main():
        out = Collector()
        op = AsyncWaitOperator(call, out, ordered=False, capacity=10, key=key)
        await op.open()
        for value in values:
            await op.process_element(value)
        await op.finish()
        await op.close()
        return out.values()

    return run(main()), running["peak"]


def test_nan_keys_are_one_key_called_one_at_a_time_in_input_order():
    values = [(float("nan"), i) for i in range(4)]  # four NaN objects, as rows bring them
    out, peak = _concurrency_per_key(values, key=lambda v: v[0])
    assert out == [0, 1, 2, 3] and peak == 1


def test_nan_inside_a_tuple_key_is_one_key_too():
    values = [(("a", float("nan")), i) for i in range(4)]
    out, peak = _concurrency_per_key(values, key=lambda v: v[0])
    assert out == [0, 1, 2, 3] and peak == 1


def test_negative_and_positive_zero_are_one_key_as_in_spark():
    values = [(0.0 if i % 2 else -0.0, i) for i in range(4)]
    out, peak = _concurrency_per_key(values, key=lambda v: (v[0], "x"))
    assert out == [0, 1, 2, 3] and peak == 1


def test_different_keys_next_to_nan_keys_still_run_at_once():
    values = [(float("nan"), 0), (1.0, 1), (float("nan"), 2), (2.0, 3)]
    out, peak = _concurrency_per_key(values, key=lambda v: v[0])
    assert out.index(0) < out.index(2) and peak == 3  # NaN, 1.0 and 2.0 at once; the NaNs in turn


def test_decimal_nans_quiet_negative_and_signaling_are_one_key_with_float_nan():
    """Review of issue 44: ``Decimal('NaN')`` objects were each a key of their own (4 calls at
    once, output reversed) and ``Decimal('sNaN')`` failed the operator ("Cannot hash a signaling
    NaN"). Every Decimal NaN is float NaN's key, at the top of a key and inside tuples."""
    from decimal import Decimal

    nans = [Decimal("NaN"), Decimal("-NaN"), Decimal("sNaN"), float("nan")]
    out, peak = _concurrency_per_key([(nans[i], i) for i in range(4)], key=lambda v: v[0])
    assert out == [0, 1, 2, 3] and peak == 1
    out, peak = _concurrency_per_key([((nans[i], "a"), i) for i in range(4)], key=lambda v: v[0])
    assert out == [0, 1, 2, 3] and peak == 1


def test_a_signaling_decimal_nan_key_is_called_with_the_row_s_own_value():
    from decimal import Decimal

    seen = []

    async def call(value):
        seen.append(value)
        return value[1]

    async def main():
        out = Collector()
        op = AsyncWaitOperator(call, out, ordered=False, capacity=4, key=lambda v: v[0])
        await op.open()
        for i in range(2):
            await op.process_element((Decimal("sNaN"), i))
        await op.finish()
        await op.close()
        return out.values()

    assert run(main()) == [0, 1]
    assert all(v[0].is_snan() for v in seen)
