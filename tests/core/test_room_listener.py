"""on_room: a driver feeding from memory refills freed slots within the step that freed them."""
import asyncio
from collections import deque

import pytest

from aiospark.core import AsyncFunctionError, AsyncWaitOperator

from ._util import Collector, run


def feeder(op, values):
    """The listener a driver would install: start calls while there is room."""
    calls = []

    def fill():
        calls.append(len(values))
        while values and op.failure is None and op.try_process(values[0]):
            values.popleft()

    return fill, calls


@pytest.mark.parametrize("ordered", [True, False])
def test_freed_slots_are_refilled_in_the_loop_iteration_that_freed_them(ordered):
    out = Collector()
    iteration = [0]
    emitted_in = set()  # loop iterations in which an element was emitted (its slot freed)
    handed_in = []  # (value, loop iteration in which try_process took it)

    def output(element):
        emitted_in.add(iteration[0])
        out(element)

    async def call(x):
        await asyncio.sleep(0.001 * (x % 3))
        return x

    async def main():
        loop = asyncio.get_running_loop()

        def tick():
            iteration[0] += 1
            loop.call_soon(tick)

        loop.call_soon(tick)
        op = AsyncWaitOperator(call, output, ordered=ordered, capacity=4)
        await op.open()
        values = deque(range(40))

        def fill():
            while values and op.try_process(values[0]):
                handed_in.append((values.popleft(), iteration[0]))

        op.on_room(fill)
        fill()
        while values:
            await asyncio.sleep(0.001)
        await op.finish()
        await op.close()

    run(main())
    assert sorted(out.values()) == list(range(40))
    if ordered:
        assert out.values() == list(range(40))
    assert [x for x, _ in handed_in] == list(range(40))
    # after the first four, every value was handed over in an iteration that freed a slot
    assert [x for x, it in handed_in[4:] if it not in emitted_in] == []


def test_the_listener_hears_of_a_failure_and_nothing_more_starts():
    out = Collector()
    seen = []

    async def call(x):
        await asyncio.sleep(0)
        if x == 3:
            raise ValueError("boom")
        return x

    async def main():
        op = AsyncWaitOperator(call, out, ordered=True, capacity=2)
        await op.open()
        values = deque(range(10))
        fill, calls = feeder(op, values)
        op.on_room(lambda: (seen.append(op.failure), fill()))
        fill()
        for _ in range(20):
            await asyncio.sleep(0)
        with pytest.raises(AsyncFunctionError, match="boom"):
            await op.finish()
        await op.close()
        return values

    left = run(main())
    assert any(isinstance(f, AsyncFunctionError) for f in seen)
    assert list(left)[0] >= 4 and 3 not in out.values()


def test_on_room_none_stops_the_calls_and_a_bad_listener_is_refused():
    async def call(x):
        await asyncio.sleep(0)
        return x

    async def main():
        op = AsyncWaitOperator(call, Collector(), capacity=1)
        with pytest.raises(TypeError, match="on_room takes a callable"):
            op.on_room(42)
        await op.open()
        values = deque(range(5))
        fill, calls = feeder(op, values)
        op.on_room(fill)
        fill()
        op.on_room(None)
        await op.finish()
        await op.close()
        return values, calls

    values, calls = run(main())
    assert list(values) == [1, 2, 3, 4] and calls == [5]
