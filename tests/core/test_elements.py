"""Record / Watermark value types and the public names."""

import pytest

import aiospark
import aiospark.core
from aiospark.core import Record, Watermark

PUBLIC_NAMES = [
    "Record",
    "Watermark",
    "ResultFuture",
    "OrderedQueue",
    "UnorderedQueue",
    "AsyncWaitOperator",
    "AsyncFunction",
    "RetryStrategy",
    "retry_if_empty",
    "retry_on",
    "AsyncFunctionError",
    "AsyncTimeoutError",
]


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_name_exported_from_core_and_top_level(name):
    assert hasattr(aiospark.core, name)
    assert hasattr(aiospark, name)
    assert getattr(aiospark, name) is getattr(aiospark.core, name)


def test_exceptions_are_exceptions():
    assert issubclass(aiospark.AsyncFunctionError, Exception)
    assert issubclass(aiospark.AsyncTimeoutError, Exception)


def test_record_fields_and_default_timestamp():
    r = Record(42)
    assert r.value == 42
    assert r.timestamp is None
    r2 = Record("x", 7)
    assert (r2.value, r2.timestamp) == ("x", 7)
    assert Record(value=1, timestamp=2) == Record(1, 2)


def test_watermark_field():
    assert Watermark(5).timestamp == 5
    assert Watermark(timestamp=5) == Watermark(5)


def test_record_compares_by_value():
    assert Record(2, 1) == Record(2, 1)
    assert Record(2, 1) != Record(2, 2)
    assert Record(2, 1) != Record(3, 1)
    assert Record(2) == Record(2, None)
    assert Record([1, 2], 3) == Record([1, 2], 3)  # equality of non-hashable payloads


def test_watermark_compares_by_value():
    assert Watermark(3) == Watermark(3)
    assert Watermark(3) != Watermark(4)


def test_record_and_watermark_are_different():
    assert Record(5, 5) != Watermark(5)
    assert Watermark(5) != Record(5, 5)
    assert Record(5) != Watermark(5)


def test_record_is_immutable():
    r = Record(1, 2)
    with pytest.raises((AttributeError, TypeError)):
        r.value = 3
    with pytest.raises((AttributeError, TypeError)):
        r.timestamp = 3
    assert r == Record(1, 2)


def test_watermark_is_immutable():
    w = Watermark(1)
    with pytest.raises((AttributeError, TypeError)):
        w.timestamp = 2
    assert w == Watermark(1)

