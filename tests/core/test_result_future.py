"""ResultFuture: the handle of one queued record (obtained from queue.try_put)."""

import pytest

from aiospark.core import OrderedQueue, Record, ResultFuture, UnorderedQueue

QUEUES = [OrderedQueue, UnorderedQueue]


@pytest.fixture(params=QUEUES, ids=lambda c: c.__name__)
def queue(request):
    return request.param(4)


def test_try_put_returns_result_future(queue):
    fut = queue.try_put(Record(1, 0))
    assert isinstance(fut, ResultFuture)
    assert fut.done is False


def test_complete_sets_done(queue):
    fut = queue.try_put(Record(1, 0))
    fut.complete([1])
    assert fut.done is True


def test_complete_exceptionally_sets_done(queue):
    fut = queue.try_put(Record(1, 0))
    fut.complete_exceptionally(ValueError("boom"))
    assert fut.done is True


def test_complete_none_raises_type_error_mentioning_empty_list(queue):
    fut = queue.try_put(Record(1, 0))
    with pytest.raises(TypeError) as info:
        fut.complete(None)
    assert "empty list" in str(info.value).lower()
    assert fut.done is False
    # the future is still usable afterwards
    fut.complete([])
    assert fut.done is True


def test_only_first_complete_counts(queue):
    fut = queue.try_put(Record(1, 10))
    fut.complete(["first"])
    fut.complete(["second"])  # ignored silently
    assert queue.pop_completed() == [Record("first", 10)]
    assert queue.is_empty()


def test_complete_exceptionally_after_complete_is_ignored(queue):
    fut = queue.try_put(Record(1, 10))
    fut.complete(["ok"])
    fut.complete_exceptionally(RuntimeError("late"))  # ignored silently
    assert fut.done is True
    assert queue.pop_completed() == [Record("ok", 10)]


def test_complete_after_complete_exceptionally_is_ignored(queue):
    fut = queue.try_put(Record(1, 10))
    err = RuntimeError("first")
    fut.complete_exceptionally(err)
    fut.complete(["late"])  # ignored silently
    fut.complete_exceptionally(ValueError("second"))  # ignored silently
    with pytest.raises(RuntimeError) as info:
        queue.pop_completed()
    assert info.value is err


def test_complete_accepts_tuple_and_other_iterables(queue):
    f1 = queue.try_put(Record("a", 1))
    f2 = queue.try_put(Record("b", 2))
    f1.complete(("x", "y"))
    f2.complete(v for v in ["z"])
    out = queue.pop_completed() + queue.pop_completed()
    assert sorted(out, key=lambda r: r.value) == [Record("x", 1), Record("y", 1), Record("z", 2)]


def test_emitting_an_entry_not_completed_says_so():
    entry = ResultFuture(Record("a", 1))
    with pytest.raises(RuntimeError, match="has not completed"):
        entry.emitted()
    with pytest.raises(RuntimeError, match="has not completed"):
        entry.emit_values_to(print)
