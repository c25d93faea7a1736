"""OrderedQueue specifics (cf. Flink's OrderedStreamElementQueueTest)."""

import pytest

from aiospark.core import OrderedQueue, Record, Watermark


def test_only_completed_head_is_emitted():
    q = OrderedQueue(4)
    f1 = q.try_put(Record(1, 0))
    f2 = q.try_put(Record(2, 1))
    q.try_put(Watermark(2))
    f4 = q.try_put(Record(3, 3))

    f2.complete([2])
    assert q.has_completed() is False
    assert q.pop_completed() == []
    assert len(q) == 4

    f1.complete([1])
    assert q.has_completed() is True
    assert q.pop_completed() == [Record(1, 0)]
    assert q.pop_completed() == [Record(2, 1)]
    assert q.pop_completed() == [Watermark(2)]
    # record 3 not complete yet
    assert q.has_completed() is False
    assert q.pop_completed() == []
    assert len(q) == 1

    f4.complete([3])
    assert q.pop_completed() == [Record(3, 3)]
    assert q.is_empty()


def test_strict_insertion_order_with_reverse_completion():
    q = OrderedQueue(5)
    futures = [q.try_put(Record(i, i)) for i in range(5)]
    for i in reversed(range(1, 5)):
        futures[i].complete([i * 10])
        assert q.pop_completed() == []
    futures[0].complete([0])
    emitted = []
    while q.has_completed():
        emitted.extend(q.pop_completed())
    assert emitted == [Record(i * 10, i) for i in range(5)]
    assert q.is_empty()


def test_watermark_behind_incomplete_record_waits():
    q = OrderedQueue(3)
    f1 = q.try_put(Record("a", 1))
    q.try_put(Watermark(2))
    assert q.has_completed() is False
    assert q.pop_completed() == []
    f1.complete(["A"])
    assert q.pop_completed() == [Record("A", 1)]
    assert q.pop_completed() == [Watermark(2)]


def test_exception_not_at_head_is_not_raised_yet():
    q = OrderedQueue(3)
    f1 = q.try_put(Record(1, 0))
    f2 = q.try_put(Record(2, 1))
    err = KeyError("second")
    f2.complete_exceptionally(err)
    assert q.has_completed() is False
    assert q.pop_completed() == []
    f1.complete([1])
    assert q.pop_completed() == [Record(1, 0)]
    with pytest.raises(KeyError) as info:
        q.pop_completed()
    assert info.value is err


def test_values_in_insertion_order():
    q = OrderedQueue(6)
    elements = [Record("a", 1), Watermark(2), Record("b", 3), Record("c", 4), Watermark(5)]
    futures = [q.try_put(e) for e in elements]
    futures[3].complete(["C"])  # completed-not-emitted stays in place
    assert q.values() == elements
    futures[0].complete(["A"])
    assert q.pop_completed() == [Record("A", 1)]
    assert q.values() == elements[1:]
    assert q.pop_completed() == [Watermark(2)]
    assert q.values() == elements[2:]
