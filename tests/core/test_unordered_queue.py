"""UnorderedQueue specifics (cf. Flink's UnorderedStreamElementQueueTest)."""

import pytest

from aiospark.core import Record, UnorderedQueue, Watermark


def drain(q):
    out = []
    while q.has_completed():
        out.append(q.pop_completed())
    return out


def test_pure_completion_order_without_watermarks():
    q = UnorderedQueue(4)
    f = [q.try_put(Record(i, i)) for i in range(4)]
    f[2].complete([2])
    f[0].complete([0])
    assert q.pop_completed() == [Record(2, 2)]
    assert q.pop_completed() == [Record(0, 0)]
    assert q.pop_completed() == []
    f[3].complete([3])
    f[1].complete([1])
    assert q.pop_completed() == [Record(3, 3)]
    assert q.pop_completed() == [Record(1, 1)]
    assert q.is_empty()


def test_completion_order_with_watermark_segments():
    """R1 R2 W1 R3 R4 W2 R5 R6: a record behind a watermark waits for it; a watermark waits for
    every record before it; inside a segment, completion order."""
    q = UnorderedQueue(8)
    r1 = q.try_put(Record(1, 0))
    r2 = q.try_put(Record(2, 1))
    q.try_put(Watermark(2))
    r3 = q.try_put(Record(3, 3))
    r4 = q.try_put(Record(4, 4))
    q.try_put(Watermark(5))
    r5 = q.try_put(Record(5, 6))
    r6 = q.try_put(Record(6, 7))
    assert len(q) == 8

    r3.complete([3])  # behind W1: not emittable
    assert q.has_completed() is False
    assert q.pop_completed() == []

    r2.complete([2])
    assert q.pop_completed() == [Record(2, 1)]
    assert q.pop_completed() == []

    r6.complete([6])
    r4.complete([4])
    assert q.has_completed() is False  # R1 still pending: W1 blocks everything behind it
    assert q.pop_completed() == []

    r1.complete([1])
    assert q.pop_completed() == [Record(1, 0)]
    assert q.pop_completed() == [Watermark(2)]
    # R3 completed before R4: completion order inside the segment
    assert q.pop_completed() == [Record(3, 3)]
    assert q.pop_completed() == [Record(4, 4)]
    assert q.pop_completed() == [Watermark(5)]
    assert q.pop_completed() == [Record(6, 7)]
    assert len(q) == 1
    assert q.pop_completed() == []

    r5.complete([5])
    assert q.pop_completed() == [Record(5, 6)]
    assert q.is_empty()


def test_watermark_waits_for_records_before_it():
    q = UnorderedQueue(3)
    r1 = q.try_put(Record("a", 1))
    q.try_put(Watermark(2))
    assert q.has_completed() is False
    assert q.pop_completed() == []
    r1.complete(["A"])
    assert drain(q) == [[Record("A", 1)], [Watermark(2)]]


def test_record_after_watermark_waits_for_it():
    q = UnorderedQueue(4)
    r1 = q.try_put(Record("a", 1))
    q.try_put(Watermark(2))
    r2 = q.try_put(Record("b", 3))
    r2.complete(["B"])
    assert q.has_completed() is False
    assert q.pop_completed() == []
    r1.complete(["A"])
    assert drain(q) == [[Record("A", 1)], [Watermark(2)], [Record("B", 3)]]


def test_leading_watermark_emitted_at_once():
    q = UnorderedQueue(3)
    q.try_put(Watermark(1))
    r = q.try_put(Record("a", 2))
    assert q.pop_completed() == [Watermark(1)]
    assert q.pop_completed() == []
    r.complete(["A"])
    assert q.pop_completed() == [Record("A", 2)]


def test_consecutive_watermarks_keep_their_order():
    q = UnorderedQueue(5)
    r1 = q.try_put(Record("a", 1))
    q.try_put(Watermark(2))
    q.try_put(Watermark(3))
    r2 = q.try_put(Record("b", 4))
    r2.complete(["B"])
    r1.complete(["A"])
    assert drain(q) == [[Record("A", 1)], [Watermark(2)], [Watermark(3)], [Record("B", 4)]]


def test_empty_result_entry_frees_slot_in_segment():
    q = UnorderedQueue(2)
    r1 = q.try_put(Record("a", 1))
    r2 = q.try_put(Record("b", 2))
    r2.complete([])
    assert q.has_completed() is True
    assert q.pop_completed() == []
    assert len(q) == 1
    assert q.try_put(Record("c", 3)) is not None
    r1.complete(["A"])
    assert q.pop_completed() == [Record("A", 1)]


def test_exceptional_entry_raises_in_completion_order():
    q = UnorderedQueue(3)
    q.try_put(Record(1, 0))  # never completes
    r2 = q.try_put(Record(2, 1))
    err = RuntimeError("second failed")
    r2.complete_exceptionally(err)
    assert q.has_completed() is True
    with pytest.raises(RuntimeError) as info:
        q.pop_completed()
    assert info.value is err


def test_exceptional_entry_behind_watermark_not_raised_early():
    q = UnorderedQueue(3)
    r1 = q.try_put(Record(1, 0))
    q.try_put(Watermark(1))
    r3 = q.try_put(Record(3, 2))
    r3.complete_exceptionally(ValueError("behind the watermark"))
    assert q.has_completed() is False
    assert q.pop_completed() == []
    r1.complete([1])
    assert q.pop_completed() == [Record(1, 0)]
    assert q.pop_completed() == [Watermark(1)]
    with pytest.raises(ValueError):
        q.pop_completed()


def _by_value(records):
    return sorted(records, key=lambda r: r.value)


def test_values_segment_by_segment():
    q = UnorderedQueue(8)
    elements = [
        Record(1, 0),
        Record(2, 1),
        Watermark(2),
        Record(3, 3),
        Record(4, 4),
        Watermark(5),
        Record(5, 6),
    ]
    futures = [q.try_put(e) for e in elements]
    futures[1].complete([2])  # completed, not yet popped
    futures[4].complete([4])  # completed behind a watermark
    values = q.values()
    assert len(values) == len(elements)
    # segment 1 (any order inside), then W(2), segment 2, then W(5), segment 3
    assert _by_value(values[0:2]) == [Record(1, 0), Record(2, 1)]
    assert values[2] == Watermark(2)
    assert _by_value(values[3:5]) == [Record(3, 3), Record(4, 4)]
    assert values[5] == Watermark(5)
    assert values[6:] == [Record(5, 6)]

    # pop R2: it leaves values(); the segment structure stays
    assert q.pop_completed() == [Record(2, 1)]
    values = q.values()
    assert values[0] == Record(1, 0)
    assert values[1] == Watermark(2)
    assert _by_value(values[2:4]) == [Record(3, 3), Record(4, 4)]
    assert values[4:] == [Watermark(5), Record(5, 6)]
