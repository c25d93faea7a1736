"""Behaviour shared by OrderedQueue and UnorderedQueue (cf. Flink's StreamElementQueueTest)."""

import pytest

from aiospark.core import OrderedQueue, Record, UnorderedQueue, Watermark

QUEUES = [OrderedQueue, UnorderedQueue]
parametrize_queue = pytest.mark.parametrize("queue_cls", QUEUES, ids=lambda c: c.__name__)


@parametrize_queue
@pytest.mark.parametrize("capacity", [0, -1, -100])
def test_capacity_below_one_rejected(queue_cls, capacity):
    with pytest.raises(ValueError):
        queue_cls(capacity)


@parametrize_queue
def test_capacity_one_accepted(queue_cls):
    q = queue_cls(1)
    assert q.try_put(Record(1)) is not None
    assert q.try_put(Record(2)) is None


@parametrize_queue
def test_new_queue_is_empty(queue_cls):
    q = queue_cls(3)
    assert len(q) == 0
    assert q.is_empty()
    assert q.has_completed() is False
    assert q.pop_completed() == []
    assert q.values() == []


@parametrize_queue
def test_put_until_full_watermarks_take_a_slot(queue_cls):
    q = queue_cls(2)
    wm_future = q.try_put(Watermark(0))
    rec_future = q.try_put(Record(42, 1))
    assert wm_future is not None and rec_future is not None
    assert len(q) == 2
    assert not q.is_empty()
    # full: both a watermark and a record are refused
    assert q.try_put(Watermark(2)) is None
    assert q.try_put(Record(43, 3)) is None
    assert len(q) == 2
    assert q.values() == [Watermark(0), Record(42, 1)]


@parametrize_queue
def test_watermark_is_complete_at_once(queue_cls):
    q = queue_cls(2)
    wm_future = q.try_put(Watermark(7))
    assert wm_future.done is True
    assert q.has_completed() is True
    assert q.pop_completed() == [Watermark(7)]
    assert q.is_empty()


@parametrize_queue
def test_poll_watermark_then_record(queue_cls):
    q = queue_cls(2)
    q.try_put(Watermark(0))
    fut = q.try_put(Record(42, 1))
    assert q.pop_completed() == [Watermark(0)]
    assert len(q) == 1
    # the record is not done yet
    assert q.has_completed() is False
    assert q.pop_completed() == []
    assert len(q) == 1
    fut.complete([42])
    assert q.has_completed() is True
    assert q.pop_completed() == [Record(42, 1)]
    assert len(q) == 0
    assert q.is_empty()
    assert q.has_completed() is False


@parametrize_queue
def test_incomplete_record_is_not_emittable(queue_cls):
    q = queue_cls(2)
    q.try_put(Record(1, 0))
    assert q.has_completed() is False
    assert q.pop_completed() == []
    assert len(q) == 1


@parametrize_queue
def test_several_results_emitted_with_input_timestamp(queue_cls):
    q = queue_cls(3)
    fut = q.try_put(Record("in", 7))
    fut.complete(["a", "b", "c"])
    assert q.pop_completed() == [Record("a", 7), Record("b", 7), Record("c", 7)]
    assert q.is_empty()


@parametrize_queue
def test_results_carry_none_timestamp(queue_cls):
    q = queue_cls(1)
    q.try_put(Record("in")).complete(["out"])
    assert q.pop_completed() == [Record("out", None)]


@parametrize_queue
def test_pop_removes_exactly_one_entry(queue_cls):
    q = queue_cls(3)
    f1 = q.try_put(Record(1, 1))
    f2 = q.try_put(Record(2, 2))
    f1.complete([10, 11])
    f2.complete([20])
    first = q.pop_completed()
    assert len(q) == 1
    second = q.pop_completed()
    assert len(q) == 0
    expected = ([Record(10, 1), Record(11, 1)], [Record(20, 2)])
    assert first in expected and second in expected and first != second


@parametrize_queue
def test_empty_results_emit_nothing_but_free_the_slot(queue_cls):
    q = queue_cls(1)
    fut = q.try_put(Record("in", 3))
    assert q.try_put(Record("next", 4)) is None
    fut.complete([])
    assert q.has_completed() is True
    assert q.pop_completed() == []
    assert len(q) == 0
    assert q.is_empty()
    assert q.has_completed() is False
    # slot is free again
    fut2 = q.try_put(Record("next", 4))
    assert fut2 is not None
    fut2.complete(["n"])
    assert q.pop_completed() == [Record("n", 4)]


@parametrize_queue
def test_full_queue_accepts_again_after_pop(queue_cls):
    q = queue_cls(1)
    fut = q.try_put(Record(42, 0))
    assert q.try_put(Record(43, 1)) is None
    fut.complete([42])
    assert q.pop_completed() == [Record(42, 0)]
    assert q.try_put(Record(43, 1)) is not None
    assert len(q) == 1


@parametrize_queue
def test_completion_alone_does_not_free_a_slot(queue_cls):
    """A completed-not-yet-popped entry still occupies its slot."""
    q = queue_cls(1)
    q.try_put(Record(1, 0)).complete([1])
    assert q.try_put(Record(2, 1)) is None
    assert len(q) == 1


@parametrize_queue
def test_watermark_only_queue(queue_cls):
    q = queue_cls(3)
    for ts in (1, 2, 3):
        assert q.try_put(Watermark(ts)) is not None
    assert q.try_put(Watermark(4)) is None
    assert q.values() == [Watermark(1), Watermark(2), Watermark(3)]
    assert q.pop_completed() == [Watermark(1)]
    assert q.pop_completed() == [Watermark(2)]
    assert q.pop_completed() == [Watermark(3)]
    assert q.pop_completed() == []
    assert q.is_empty()


@parametrize_queue
def test_exceptional_head_entry_raises_from_pop(queue_cls):
    q = queue_cls(2)
    fut = q.try_put(Record(1, 0))
    err = ValueError("call failed")
    fut.complete_exceptionally(err)
    assert q.has_completed() is True
    with pytest.raises(ValueError) as info:
        q.pop_completed()
    assert info.value is err


@parametrize_queue
def test_values_hold_incomplete_and_completed_not_emitted(queue_cls):
    q = queue_cls(4)
    f1 = q.try_put(Record("a", 1))
    q.try_put(Record("b", 2))
    f1.complete(["A"])  # completed, not yet popped
    assert sorted(q.values(), key=lambda r: r.value) == [Record("a", 1), Record("b", 2)]
    assert q.pop_completed() == [Record("A", 1)]
    assert q.values() == [Record("b", 2)]


@parametrize_queue
def test_values_are_inputs_not_results(queue_cls):
    q = queue_cls(2)
    q.try_put(Record("input", 5)).complete(["output1", "output2"])
    assert q.values() == [Record("input", 5)]


@parametrize_queue
def test_len_counts_records_and_watermarks(queue_cls):
    q = queue_cls(5)
    q.try_put(Record(1, 1))
    q.try_put(Watermark(2))
    q.try_put(Record(3, 3))
    assert len(q) == 3
    assert not q.is_empty()


@parametrize_queue
def test_pending_lists_uncompleted_records_oldest_first_and_add_takes_prebuilt_entries(queue_cls):
    from aiospark.core import ResultFuture

    q = queue_cls(10)
    a = q.try_put(Record("a"))
    q.try_put(Watermark(1))
    b = ResultFuture(Record("b"))
    q.add(b)  # an entry made by the caller joins like try_put's own
    c = q.try_put(Record("c"))
    assert list(q.pending()) == [a, b, c] and len(q) == 4
    b.complete(["B"])
    assert list(q.pending()) == [a, c]
    a.complete(["A"])
    c.complete(["C"])
    out = []
    while q.has_completed():
        out += q.pop_completed()
    assert out[:2] == [Record("A"), Watermark(1)] and sorted(r.value for r in out[2:]) == ["B", "C"]
    assert list(q.pending()) == [] and q.is_empty()


@parametrize_queue
def test_both_queues_implement_the_one_interface(queue_cls):
    # the operator drives either queue through ElementQueue (Flink's StreamElementQueue)
    from aiospark.core import ElementQueue

    q: ElementQueue = queue_cls(2, on_complete=lambda entry: None)
    assert isinstance(q, ElementQueue)
    entry = q.try_put(Record("a", 1))
    assert entry is not None and list(q.pending()) == [entry]
    entry.complete(["A"])
    out: list = []
    assert q.emit_completed(out.append) == 1 and out == [Record("A", 1)] and q.is_empty()


def test_an_element_queue_missing_part_of_the_interface_cannot_be_made():
    from aiospark.core import ElementQueue

    class Half(ElementQueue):
        def try_put(self, element):
            return None

    with pytest.raises(TypeError, match="abstract"):
        Half()


@parametrize_queue
def test_a_watermark_or_record_only(queue_cls):
    with pytest.raises(TypeError, match="Record or Watermark"):
        queue_cls(2).try_put(("a", 1))
