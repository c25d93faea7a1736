"""The journal's stores against real parts: a local directory and a real redis-server."""
from __future__ import annotations

import datetime as dt
import math
import os
from decimal import Decimal

import pytest

from aiospark.core.durable import Recorded
from aiospark.journal import Journal, JournalMismatch, JournalStoreError, Manifest
from aiospark.journal.directory import read_segment
from tests.support.servers import RedisServer

VALUES = [
    [{"id": 2**70, "f": 0.1, "z": -0.0, "n": float("nan"), "d": Decimal("12345678901234567890.123456789"),
      "day": dt.date(1999, 12, 31), "ts": dt.datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc),
      "b": b"\x00\xff", "nested": [{"a": [1, None]}, {"a": []}], "s": "é😀\x00", "none": None}],
    [None],
    [],
    [(1, "tuple")],
]


async def fn(row):
    return row


async def other(row):
    return None


def manifest(function=fn, schema="id BIGINT"):
    return Manifest.of("ordered_wait", function, schema, ["id"], ["bigint"])


def same(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, float):
        return type(b) is float and math.copysign(1, a) == math.copysign(1, b) and a == b
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def write_run(bound, outcomes, partition=0, keep=False):
    view = bound.open_task(partition, None, "t")
    for identity, results, error in outcomes:
        view.record(identity, results, error)
    view.close()
    return view


@pytest.fixture(scope="module")
def redis_url():
    with RedisServer() as srv:
        yield srv.url + "?prefix=test-journal"


@pytest.fixture(params=["dir", "redis"])
def location(request, tmp_path, redis_url):
    if request.param == "dir":
        return str(tmp_path / "journal")
    return redis_url + "-" + os.urandom(4).hex()


def test_round_trip_exact_and_errors_kept_only_when_asked(location):
    journal = Journal(location, keep_errors=True)
    bound = journal.bind(manifest())
    outcomes = [(f"[{i}]", v, None) for i, v in enumerate(VALUES)] + [("[99]", None, ValueError("boom"))]
    write_run(bound, outcomes)
    view = bound.open_task(0, None, "t2")
    view.prefetch([o[0] for o in outcomes] + ["[100]"])
    for identity, results, _ in outcomes[:-1]:
        got = view.recorded(identity)
        assert got is not None and got.error is None and same(results, got.results), (identity, got)
    assert view.recorded("[99]") == Recorded(None, "ValueError: boom")
    assert view.recorded("[100]") is None
    view.close()
    # a run that does not keep errors calls the failed row again
    plain = Journal(location).bind(manifest()).open_task(0, None, "t3")
    plain.prefetch(["[99]", "[0]"])
    assert plain.recorded("[99]") is None and plain.recorded("[0]") is not None
    plain.close()


def test_another_function_or_schema_is_refused_naming_what_differs(location):
    bound = Journal(location).bind(manifest())
    write_run(bound, [("[1]", [1], None)])
    with pytest.raises(JournalMismatch, match=r"function: .*fn.*\(journal\) vs .*other.*\(now\).*another location"):
        Journal(location).bind(manifest(other))
    with pytest.raises(JournalMismatch, match=r"output schema: 'id BIGINT' \(journal\) vs 'id INT' \(now\)"):
        Journal(location).bind(manifest(schema="id INT"))
    Journal(location).bind(manifest())  # the same function and schema: accepted


def test_directory_task_reads_only_its_partition(tmp_path):
    bound = Journal(str(tmp_path / "j")).bind(manifest())
    write_run(bound, [("[1]", [1], None)], partition=0)
    write_run(bound, [("[2]", [2], None)], partition=1)
    p0 = bound.open_task(0, None, "x")
    assert p0.recorded("[1]") is not None and p0.recorded("[2]") is None
    streaming = bound.open_task(0, "7", "x")
    assert streaming.recorded("[1]") is None  # a micro-batch has its own directory


def test_truncated_and_corrupt_segments_are_skipped_never_a_crash(tmp_path):
    loc = str(tmp_path / "j")
    bound = Journal(loc).bind(manifest())
    view = bound.open_task(0, None, "t")
    view.flush_seconds = 3600  # one batch per write below
    store_task = view.store_task
    store_task.write([(f"[{i}]", [], None) for i in range(10)])   # batch 1
    store_task.write([(f"[{i}]", [], None) for i in range(10, 20)])  # batch 2
    store_task.close()
    path = store_task.path
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-48])  # a killed writer: the last batch half written (and no end marker)
    known = bound.open_task(0, None, "r").known
    assert sorted(known) == sorted(f"[{i}]" for i in range(10))
    # a flipped byte inside a batch: that batch's crc fails, its rows are called again; the
    # batch after it still counts
    flipped = bytearray(data)
    at = bytes(flipped).index(b"[3]")
    flipped[at + 1] = ord("4")  # the identity now reads [4] with the batch's crc of [3]
    open(path, "wb").write(bytes(flipped))
    known = bound.open_task(0, None, "r").known
    assert sorted(known) == sorted(f"[{i}]" for i in range(10, 20))
    for junk in (b"", b"garbage", data[:20]):
        open(path, "wb").write(junk)
        assert bound.open_task(0, None, "r").known == {}
    assert read_segment(b"\xff" * 100) == ({}, 0)


def test_unwritable_location_is_refused_up_front(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match="cannot write to .*file/journal"):
        Journal(str(blocker / "journal")).bind(manifest())
    # a directory nobody may create files in, root included (a chmod'ed one is writable for root)
    with pytest.raises(OSError, match="cannot write"):
        Journal("/proc/aiospark-journal/j").bind(manifest())


def test_definition_time_validation():
    with pytest.raises(TypeError, match="location"):
        Journal(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ftp:// is not a journal location"):
        Journal("ftp://host/x")
    with pytest.raises(TypeError, match="key="):
        Journal("/tmp/x", key=[])
    with pytest.raises(ValueError, match="twice"):
        Journal("/tmp/x", key=["a", "a"])
    with pytest.raises(TypeError, match="keep_errors"):
        Journal("/tmp/x", keep_errors="yes")  # type: ignore[arg-type]
    assert "hunter2" not in repr(Journal("redis://:hunter2@127.0.0.1:1/0"))
    assert Journal("file:///tmp/x").store.location == "file:///tmp/x"


def test_unpicklable_results_fail_the_record_clearly(tmp_path):
    view = Journal(str(tmp_path / "j")).bind(manifest()).open_task(0, None, "t")
    view.record("[1]", [lambda: 1], None)  # pickled a batch at a time, on the writer thread
    with pytest.raises(TypeError, match="pickled"):  # at the next record() or at close()
        view.close()


def test_redis_that_goes_away_fails_clearly():
    srv = RedisServer().start()
    url = srv.url
    bound = Journal(url).bind(manifest())
    view = bound.open_task(0, None, "t")
    view.flush_seconds = 0.05
    view.record("[1]", [1], None)
    srv.stop()
    with pytest.raises(JournalStoreError, match=r"journal's Redis at redis://127.0.0.1:\d+/0 failed"):
        for _ in range(200):
            view.record("[2]", [2], None)
            __import__("time").sleep(0.02)
        view.close()
    with pytest.raises(JournalStoreError, match="failed"):
        Journal(url).bind(manifest())
