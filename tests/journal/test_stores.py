"""The journal's stores against real parts: a local directory and a real redis-server."""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import zlib
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest

from aiospark.core.durable import Recorded
from aiospark.journal import Journal, JournalMismatch, JournalStoreError, Manifest
from aiospark.journal.buckets import DEFAULT_BUCKETS, bucket_of
from aiospark.journal.directory import read_segment
from aiospark.journal.segment import BATCHED, write_batch
from tests.support.journal import found, ids, only_segment
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


def test_directory_task_finds_outcomes_of_any_partition_and_micro_batch_in_their_buckets(tmp_path):
    bound = Journal(str(tmp_path / "j"), buckets=8).bind(manifest())
    write_run(bound, [("[1]", [1], None)], partition=0)
    write_run(bound, [("[2]", [2], None)], partition=1)
    streamed = bound.open_task(3, "7", "s")  # micro-batch 7's task
    streamed.record("[3]", [3], None)
    streamed.close()
    buckets = {i: bucket_of(i, 8) for i in ("[1]", "[2]", "[3]")}
    layout = sorted(p.relative_to(tmp_path / "j" / bound.manifest.digest).parts[0]
                    for p in (tmp_path / "j" / bound.manifest.digest).rglob("*.arrow"))
    assert layout == sorted(f"k={b}" for b in buckets.values())  # no p=, no b=: a bucket per identity
    reader = bound.open_task(5, "9", "x")  # another partition, a later micro-batch
    assert reader.fetches_by_row and reader.known == {}  # nothing read up front
    reader.prefetch(["[2]"])
    assert reader.store_task.loaded == {buckets["[2]"]}  # only the bucket asked for
    reader.prefetch(["[1]", "[3]", "[4]"])
    assert [reader.recorded(i).results for i in ("[1]", "[2]", "[3]")] == [[1], [2], [3]]
    assert reader.recorded("[4]") is None
    reader.close()


def test_a_legacy_partition_layout_is_still_read(tmp_path):
    """A journal written before buckets (``p=``/``b=`` folders, a manifest without buckets)."""
    loc = tmp_path / "j"
    legacy = dataclasses.replace(manifest(), buckets=None)
    store = Journal(str(loc)).store
    store.write_manifest(legacy)
    for sub, first in (("p=0", 0), ("p=3", 10), ("b=4/p=1", 20)):
        (loc / legacy.digest / sub).mkdir(parents=True)
        with pa.OSFile(str(loc / legacy.digest / sub / "1.1-abcd1234.arrow"), "wb") as sink, \
                pa.ipc.new_stream(sink, BATCHED) as writer:
            write_batch(writer, [(f"[{i}]", [i], None) for i in range(first, first + 5)])
    bound = Journal(str(loc)).bind(manifest())  # the same question: its digest unchanged by buckets
    assert bound.manifest.digest == legacy.digest and bound.buckets == DEFAULT_BUCKETS
    assert store.read_manifest().buckets == DEFAULT_BUCKETS  # the layout written once
    reader = bound.open_task(2, None, "r")
    reader.prefetch(["[0]", "[12]", "[24]", "[99]"])
    assert {i: reader.recorded(i).results for i in ("[0]", "[12]", "[24]")} == {"[0]": [0], "[12]": [12],
                                                                                "[24]": [24]}
    assert reader.recorded("[99]") is None and reader.store_task.segments == 3  # legacy read once, whole
    reader.record("[99]", [99], None)
    reader.close()
    assert found(bound, "again", ["[99]", "[1]"]) == {"[99]": ([99], None), "[1]": ([1], None)}
    assert list((loc / legacy.digest).glob(f"k={bucket_of('[99]', DEFAULT_BUCKETS)}/*.arrow"))


def test_buckets_are_validated_and_a_journal_keeps_its_own(tmp_path):
    for bad in (0, -1, 65537, "x", 2.0, True):
        with pytest.raises(ValueError, match=r"buckets=\.\.\.\) takes an int from 1 to 65536"):
            Journal(str(tmp_path / "j"), buckets=bad)
    assert Journal(str(tmp_path / "j"), buckets=16).bind(manifest()).buckets == 16
    with pytest.raises(ValueError, match="this journal has 16 buckets.*pass buckets=16 or leave buckets= out"):
        Journal(str(tmp_path / "j"), buckets=32).bind(manifest())
    assert Journal(str(tmp_path / "j")).bind(manifest()).buckets == 16  # its own, without buckets=
    assert Journal(str(tmp_path / "j"), buckets=16).bind(manifest()).buckets == 16


def test_bucket_routing_is_stable_and_spread():
    assert bucket_of("[7]", 200) == zlib.crc32(b"[7]") % 200  # written down: the CLI re-buckets without Spark
    counts = Counter(bucket_of(f"[{i}]", 16) for i in range(16_000))
    assert sorted(counts) == list(range(16)) and min(counts.values()) > 800


def test_truncated_and_corrupt_segments_are_skipped_never_a_crash(tmp_path):
    loc = str(tmp_path / "j")
    bound = Journal(loc, buckets=1).bind(manifest())  # one bucket: one segment
    view = bound.open_task(0, None, "t")
    view.flush_seconds = 3600  # one batch per write below
    store_task = view.store_task
    store_task.write([(f"[{i}]", [], None) for i in range(10)])   # batch 1
    store_task.write([(f"[{i}]", [], None) for i in range(10, 20)])  # batch 2
    store_task.close()
    path = only_segment(store_task).path
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-48])  # a killed writer: the last batch half written (and no end marker)
    known = found(bound, "r", ids(20))
    assert sorted(known) == sorted(f"[{i}]" for i in range(10))
    # a flipped byte inside a batch: that batch's crc fails, its rows are called again; the
    # batch after it still counts
    flipped = bytearray(data)
    at = bytes(flipped).index(b"[3]")
    flipped[at + 1] = ord("4")  # the identity now reads [4] with the batch's crc of [3]
    open(path, "wb").write(bytes(flipped))
    known = found(bound, "r", ids(20))
    assert sorted(known) == sorted(f"[{i}]" for i in range(10, 20))
    for junk in (b"", b"garbage", data[:20]):
        open(path, "wb").write(junk)
        assert found(bound, "r", ids(20)) == {}
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


def test_a_bucket_folder_created_while_a_task_lists_it_is_read_as_empty(tmp_path):
    """Before: pyarrow reported a bucket folder another task created between its two listing
    steps as not found (allow_not_found notwithstanding), and the task failed with
    ``Cannot list directory '.../k=0'``."""
    import threading

    from aiospark.journal import Journal, Manifest
    from tests.support.journal import found

    async def fn(row):
        return row

    bound = Journal(str(tmp_path / "j"), buckets=1).bind(Manifest.of("ordered_wait", fn, "id BIGINT", ["id"],
                                                                    ["bigint"]))
    folder = tmp_path / "j" / bound.manifest.digest / "k=0"
    folder.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()

    def churn():  # another task's first outcome of the bucket, again and again
        while not stop.is_set():
            try:
                folder.mkdir()
                folder.rmdir()
            except OSError:
                pass

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        for attempt in range(400):
            assert found(bound, f"1.{attempt}", ["[1]"]) == {}
    finally:
        stop.set()
        thread.join()
