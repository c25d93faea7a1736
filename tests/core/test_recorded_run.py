"""A rerun's recorded elements in the operator: a run of them is one queue entry, completed as it
enters (no call), emitted through the one emit path in its place; every element is identified once."""
import asyncio

import pytest

from aiospark.core import AsyncWaitOperator
from aiospark.core.durable import Recorded
from aiospark.core.elements import Record

from ._util import run


class MemoryJournal:
    """A task journal in memory (as in test_durable), counting reads."""

    def __init__(self, recorded):
        self.outcomes = dict(recorded)
        self.reads = 0

    def recorded(self, identity):
        self.reads += 1
        return self.outcomes.get(identity)

    def record(self, identity, results, error):
        if error is None:
            self.outcomes[identity] = Recorded(results)


class CountingIdentity:
    def __init__(self):
        self.asked = []

    def __call__(self, value):
        self.asked.append(value)
        return None if value is None else f"k{value}"


async def feed_many(op, values):
    """What the Spark bridge does: whole chunks through try_process_many."""
    await op.open()
    pos = 0
    while pos < len(values):
        pos += op.try_process_many(values, pos)
        if pos < len(values):
            await op.wait_for_space()
    await op.finish()
    await op.close()


@pytest.mark.parametrize("ordered", [True, False])
def test_a_run_of_recorded_elements_leaves_as_one_list_through_the_emit_path_in_its_place(ordered):
    called = []

    async def f(x):
        called.append(x)
        await asyncio.sleep(0.001)
        return x * 10

    recorded = {f"k{i}": Recorded([i * 10]) for i in (0, 1, 2, 3, 5, 7)}
    recorded["k8"] = Recorded([80, 81])
    recorded["k9"] = Recorded([])
    journal, identify, out = MemoryJournal(recorded), CountingIdentity(), []
    op = AsyncWaitOperator(f, out.append, ordered=ordered, capacity=100, identify=identify, journal=journal,
                           values=True)
    run(feed_many(op, list(range(10))))
    assert sorted(called) == [4, 6]
    # 0..3 entered as one completed entry: emitted as one list, before anything else
    assert out[0] == [0, 10, 20, 30]
    flat = [v for values in out for v in values]
    if ordered:
        assert out == [[0, 10, 20, 30], [40], [50], [60], [70, 80, 81]]
    else:
        assert sorted(flat) == [0, 10, 20, 30, 40, 50, 60, 70, 80, 81]
    # one identity and one journal read per element, the ones a run stops at included
    assert sorted(identify.asked) == list(range(10)) and journal.reads == 10


def test_a_recorded_run_counts_against_capacity_and_is_in_a_snapshot():
    async def f(x):
        return x

    journal = MemoryJournal({f"k{i}": Recorded([i]) for i in range(10)})
    out = []

    async def main():
        op = AsyncWaitOperator(f, out.append, capacity=3, identify=CountingIdentity(), journal=journal, values=True)
        await op.open()
        values = list(range(10))
        assert op.try_process_many(values, 0) == 3  # no more than capacity, recorded or not
        assert len(op) == 3 and op.try_process_many(values, 3) == 0
        assert op.snapshot_state() == [Record(0), Record(1), Record(2)]
        pos = 3
        while pos < len(values):
            await op.wait_for_space()
            pos += op.try_process_many(values, pos)
        await op.finish()
        await op.close()

    run(main())
    assert [v for values in out for v in values] == list(range(10))
    assert all(len(values) <= 3 for values in out)


def test_the_element_a_run_stops_at_keeps_its_own_outcome_null_identity_error_and_sharing():
    calls = []

    async def f(x):
        calls.append(x)
        return "called"

    journal = MemoryJournal({"k0": Recorded([0]), "k1": Recorded(None, "ValueError: bad"), "k3": Recorded([3])})
    journal.keep_errors = True
    identify, out = CountingIdentity(), []
    op = AsyncWaitOperator(f, out.append, identify=identify, journal=journal, values=True,
                           on_error=lambda v, e: [f"error {e}"])
    # 1: a recorded error (not part of a run); None: no identity (called); 5, 5: one shared call
    run(feed_many(op, [0, 1, None, 3, 5, 5]))
    assert [v for values in out for v in values] == [0, "error ValueError: bad", "called", 3, "called", "called"]
    assert calls == [None, 5]
    assert identify.asked == [0, 1, None, 3, 5, 5]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_journal_that_does_not_look_ahead_completes_recorded_elements_one_by_one(ordered):
    # looks_ahead = False (the table route's view): no run is looked for before admission; each
    # element is identified and read once, as it is admitted, and a recorded one completes alone
    called = []

    async def f(x):
        called.append(x)
        await asyncio.sleep(0.001)
        return x * 10

    journal = MemoryJournal({f"k{i}": Recorded([i * 10]) for i in (0, 1, 2, 3, 5)})
    journal.looks_ahead = False
    identify, out = CountingIdentity(), []
    op = AsyncWaitOperator(f, out.append, ordered=ordered, capacity=100, identify=identify, journal=journal,
                           values=True)
    run(feed_many(op, list(range(7))))
    assert sorted(called) == [4, 6]
    assert all(len(values) == 1 for values in out), out  # no run entered as one entry
    assert sorted(v for values in out for v in values) == [0, 10, 20, 30, 40, 50, 60]
    if ordered:
        assert [values[0] for values in out] == [0, 10, 20, 30, 40, 50, 60]
    assert sorted(identify.asked) == list(range(7)) and journal.reads == 7
