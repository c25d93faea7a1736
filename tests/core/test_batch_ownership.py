"""A batch function's input list and a function's returned list are the caller's own: the user may
consume or pad the list it gets, and reuse the list it returns, without the operator losing count,
hanging, or emitting another call's results (issue 44, item 1)."""
import asyncio

from aiospark.core import AsyncFunction, AsyncWaitOperator, Record

from ._util import Collector, run, run_operator


async def two_at_a_time(xs):
    """Sends its rows two at a time by consuming its input list (a common pattern)."""
    out = []
    while xs:
        chunk = xs[:2]
        del xs[:2]
        await asyncio.sleep(0.001)
        out += [v * 10 for v in chunk]
    return out


def test_a_batch_function_that_consumes_its_input_gets_every_row_answered_and_finish_returns():
    out = run(run_operator(two_at_a_time, range(8), ordered=True, capacity=8, batch_size=4, timeout=0.5,
                           on_error=lambda v, e: [f"error {v}: {e}"]))
    assert out.values() == [v * 10 for v in range(8)]


def test_a_snapshot_taken_after_the_function_consumed_its_input_still_holds_every_row():
    async def main():
        consumed, release = asyncio.Event(), asyncio.Event()

        async def consume_then_wait(xs):
            got = list(xs)
            xs.clear()
            consumed.set()
            await release.wait()
            return [v * 10 for v in got]

        out = Collector()
        op = AsyncWaitOperator(consume_then_wait, out, capacity=4, batch_size=4, timeout=5.0)
        await op.open()
        for v in range(4):
            await op.process_element(v, timestamp=v)
        await consumed.wait()
        snapshot = op.snapshot_state()
        release.set()
        await op.finish()
        await op.close()
        return snapshot, out.values()

    snapshot, values = run(main())
    assert snapshot == [Record(v, v) for v in range(4)]
    assert values == [0, 10, 20, 30]


def test_a_batch_function_padding_its_input_to_a_fixed_size_gets_its_rows_answered():
    """Padding to 8 and answering the real rows only: correct code, every row its own result."""
    async def padded(xs):
        n = len(xs)
        xs.extend([0] * (8 - n))  # the service takes fixed-size batches
        await asyncio.sleep(0.001)
        return [v * 10 for v in xs][:n]

    out = run(run_operator(padded, range(5), ordered=True, capacity=8, batch_size=8, timeout=2.0,
                           on_error=lambda v, e: [f"error {v}: {e}"]))
    assert out.values() == [0, 10, 20, 30, 40]


def test_answering_the_padding_too_is_a_clear_error_for_each_row_not_a_hang():
    async def answers_padding(xs):
        xs.extend([0] * (8 - len(xs)))
        return [v * 10 for v in xs]

    out = run(run_operator(answers_padding, range(5), ordered=True, capacity=8, batch_size=8, timeout=2.0,
                           on_error=lambda v, e: [f"error {v}: {e}"]))
    values = out.values()
    assert len(values) == 5
    assert all(value.startswith(f"error {v}: ") and "returned 8 results for a batch of 5 inputs" in value
               for v, value in enumerate(values))


def test_a_retry_gets_the_whole_batch_again_after_the_first_attempt_consumed_it():
    from aiospark.core import RetryStrategy

    seen = []

    async def consumes_then_fails_once(xs):
        seen.append(list(xs))
        got = list(xs)
        xs.clear()
        if len(seen) == 1:
            raise ConnectionError("flaky")
        return [v * 10 for v in got]

    out = run(run_operator(consumes_then_fails_once, range(4), capacity=4, batch_size=4,
                           retry=RetryStrategy.fixed_delay(2, 0.001)))
    assert seen == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert out.values() == [0, 10, 20, 30]


def test_a_batch_function_returning_one_reused_buffer_gives_each_batch_its_own_results():
    buffer = []

    async def reuses(xs):
        await asyncio.sleep(0.05 if 0 in xs else 0.0)  # the first batch answers last
        buffer.clear()
        buffer.extend(v * 10 for v in xs)
        return buffer

    out = run(run_operator(reuses, range(6), ordered=True, capacity=6, batch_size=2, batch_delay=0.0))
    assert out.values() == [0, 10, 20, 30, 40, 50]


def test_an_async_function_returning_one_reused_buffer_gives_each_row_its_own_results():
    class Reuses(AsyncFunction):
        def __init__(self):
            self.buffer = []

        async def async_invoke(self, value):
            await asyncio.sleep(0.05 if value == 0 else 0.0)
            self.buffer.clear()
            self.buffer.append(value * 10)
            return self.buffer

    out = run(run_operator(Reuses(), range(6), ordered=True, capacity=6))
    assert out.values() == [0, 10, 20, 30, 40, 50]


def test_a_batched_async_function_reusing_its_outer_and_inner_lists_gives_each_row_its_own_results():
    class Reuses(AsyncFunction):
        def __init__(self):
            self.outer, self.inner = [], [[], []]

        async def async_invoke(self, values):
            await asyncio.sleep(0.05 if 0 in values else 0.0)
            self.outer.clear()
            for slot, v in zip(self.inner, values):
                slot.clear()
                slot.append(v * 10)
                self.outer.append(slot)
            return self.outer

    out = run(run_operator(Reuses(), range(6), ordered=True, capacity=6, batch_size=2, batch_delay=0.0))
    assert out.values() == [0, 10, 20, 30, 40, 50]
