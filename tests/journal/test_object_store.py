"""A directory journal on an S3-compatible server (moto's server mode on 127.0.0.1), and the leases
that keep ``aiospark journal --drop-errors`` off segments a live task still writes.

The journal is driven as a task drives it (``Journal.bind(...).open_task``, ``record``, ``close``):
the Spark-level runs are in tests/journal/test_location_spark.py and tests/chaos/test_journal_kill.py.
"""
from __future__ import annotations

import os
import time

import pyarrow.fs as pafs
import pytest

from aiospark.app.cli import main
from aiospark.journal import Journal, Manifest
from aiospark.journal.buckets import bucket_of
from aiospark.journal.lease import SUFFIX
from aiospark.journal.segment import read_outcomes
from aiospark.journal.summary import summarize
from tests.support.journal import found, ids, only_segment

DEADLINE = 30.0  # generous: a flush is due every second


async def fn(row):
    return row


def manifest():
    return Manifest.of("ordered_wait", fn, "id BIGINT", ["id"], ["bigint"])


def eventually(check, what):
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"not within {DEADLINE} s: {what}")


def files(fs, path):
    return sorted(os.path.basename(i.path) for i in fs.get_file_info(pafs.FileSelector(path, recursive=True,
                                                                                        allow_not_found=True))
                  if i.type == pafs.FileType.File)


def test_s3_outcomes_are_readable_about_a_second_after_the_call_while_the_task_runs(s3):
    """Before: pyarrow's S3 output stream publishes an object only on close, so a task killed
    before its end left nothing (the whole partition paid again)."""
    location = s3.uri()
    bound = Journal(location, buckets=1).bind(manifest())  # one bucket: the task's one segment
    writer = bound.open_task(0, None, "1.1")
    for i in range(50):
        writer.record(f"[{i}]", [{"id": i}], None)
    # the writer is never closed before this: a killed worker's state
    eventually(lambda: len(found(bound, "1.2", ids(60))) == 50, "50 outcomes visible to a new attempt")
    writer.record("[50]", [{"id": 50}], None)
    eventually(lambda: "[50]" in found(bound, "1.3", ["[50]"]), "a later outcome visible")
    fs = s3.filesystem()
    top = f"{s3.bucket}/{location.split('@', 1)[1].split('/', 1)[1].split('?')[0]}/{bound.manifest.digest}"
    running = files(fs, f"{top}/parts")  # one part per flush, whatever buckets it holds, and the lease
    assert any("~" in name for name in running) and any(n.endswith(SUFFIX) for n in running), running
    assert not files(fs, f"{top}/k=0")
    writer.close()
    # at the end of the task its parts are one segment per bucket, and its lease is gone
    left = files(fs, f"{top}/k=0")
    assert len(left) == 1 and left[0].endswith(".arrow") and "~" not in left[0], left
    assert not files(fs, f"{top}/parts")
    known = found(bound, "1.4", ids(60))
    assert sorted(known) == sorted(f"[{i}]" for i in range(51)) and known["[7]"] == ([{"id": 7}], None)


def test_unpicklable_results_fail_clearly_on_s3_too(s3):
    view = Journal(s3.uri()).bind(manifest()).open_task(0, None, "t")
    view.record("[1]", [lambda: 1], None)
    with pytest.raises(TypeError, match="pickled"):
        view.close()


def cli(capsys, *argv):
    code = main(["journal", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("store", ["dir", "s3"])
def test_drop_errors_never_touches_a_segment_whose_writer_is_alive_but_quiet(tmp_path, s3, capsys, store):
    """Before: a segment quiet for 5 s was compacted and deleted under its live writer; what the task
    recorded afterwards went to a deleted file (a rerun paid for it again)."""
    location = str(tmp_path / "j") if store == "dir" else s3.uri()
    bound = Journal(location, keep_errors=True).bind(manifest())
    writer = bound.open_task(0, None, "2.1")
    writer.record("[1]", [{"id": 1}], None)
    writer.record("[2]", None, ValueError("no"))
    eventually(lambda: "[2]" in found(bound, "2.2", ["[2]"]), "the error recorded")
    time.sleep(6.5)  # the writer lives, and writes nothing: longer than the old 5 s quiet period

    code, out, err = cli(capsys, location, "--drop-errors")
    assert code == 2 and out == "", out
    assert "is being written" in err and "held by a running task" in err, err
    assert summarize(location).errors == 1

    writer.record("[3]", [{"id": 3}], None)  # the task goes on, and ends
    writer.close()
    code, out, err = cli(capsys, location, "--drop-errors")
    assert code == 0 and out.startswith("dropped 1 recorded error"), err
    known = found(bound, "2.3", ids(4))
    assert sorted(known) == ["[1]", "[3]"], known  # nothing the task recorded was lost


def test_a_dead_writers_expired_lease_does_not_block_the_drop(tmp_path, capsys):
    location = str(tmp_path / "j")
    bound = Journal(location, keep_errors=True, buckets=1).bind(manifest())  # one segment
    writer = bound.open_task(0, None, "3.1")
    writer.record("[1]", [{"id": 1}], None)
    writer.record("[2]", None, ValueError("no"))
    eventually(lambda: "[2]" in found(bound, "3.2", ["[2]"]), "the error recorded")
    writer._stop.set()  # the writer thread stops renewing: what a killed worker's does
    writer._thread.join()
    lease = only_segment(writer.store_task).lease.path
    assert os.path.exists(lease)
    code, _, err = cli(capsys, location, "--drop-errors")
    assert code == 2 and "held by a running task" in err  # the lease has not run out yet
    with open(lease, "w") as f:
        f.write(repr(time.time() - 1))  # ... and now it has: the writer is dead
    code, out, err = cli(capsys, location, "--drop-errors")
    assert code == 0 and out.startswith("dropped 1 recorded error"), err
    assert sorted(found(bound, "3.3", ids(3))) == ["[1]"]
    assert not os.path.exists(lease)  # the dead writer's lease went with its segment


def test_a_live_writer_renews_its_lease(tmp_path):
    bound = Journal(str(tmp_path / "j"), buckets=1).bind(manifest())
    writer = bound.open_task(0, None, "4.1")
    writer.record("[1]", [{"id": 1}], None)
    eventually(lambda: bool(writer.store_task.writers), "the segment opened")
    lease = only_segment(writer.store_task).lease
    lease.renew_every = 0.2
    eventually(lambda: os.path.exists(lease.path), "the lease written")
    first = float(open(lease.path).read())
    eventually(lambda: float(open(lease.path).read() or 0) > first + 0.5, "the lease renewed while quiet")
    writer.close()
    assert not os.path.exists(lease.path)


def test_a_flush_is_one_object_whatever_buckets_it_holds(s3):
    """Before: one object per bucket per flush; a task fed without the dedup shuffle holds rows of
    every bucket, and on a slow store its flushes fell behind the calls (a killed run paid again
    for more than the rows of its last second)."""
    location = s3.uri()
    bound = Journal(location, buckets=8).bind(manifest())
    writer = bound.open_task(0, None, "1.1")
    for i in range(200):  # every one of the 8 buckets, within a second or two
        writer.record(f"[{i}]", [{"id": i}], None)
    eventually(lambda: len(found(bound, "1.2", ids(200))) == 200, "200 outcomes visible to a new attempt")
    fs = s3.filesystem()
    top = f"{s3.bucket}/{location.split('@', 1)[1].split('/', 1)[1].split('?')[0]}/{bound.manifest.digest}"
    parts = [n for n in files(fs, f"{top}/parts") if n.endswith(".arrow")]
    held = []  # the buckets each part holds
    for name in parts:
        with fs.open_input_stream(f"{top}/parts/{name}") as f:
            held.append({bucket_of(i, 8) for i in read_outcomes(f.read())[0]})
    assert set().union(*held) == set(range(8)) and max(map(len, held)) > 1, held  # a part per flush, not per bucket
    assert len(parts) < 8, parts
    assert [n for n in files(fs, top) if n.endswith(".arrow")] == parts  # no bucket segment yet
    writer.close()
    buckets = {info.path.rsplit("/", 1)[-1]: files(fs, info.path)
               for info in fs.get_file_info(pafs.FileSelector(top)) if info.type == pafs.FileType.Directory}
    assert sorted(name for name, held in buckets.items() if held) == [f"k={b}" for b in range(8)], buckets
    assert all(len(held) == 1 for name, held in buckets.items() if name != "parts"), buckets
    assert not buckets.get("parts"), buckets
    known = found(bound, "1.3", ids(200))
    assert known == {f"[{i}]": ([{"id": i}], None) for i in range(200)}
