"""``aiospark journal``'s exact counts and ``--compact`` on directory journals written by many runs:
bucket folders of several runs, legacy ``p=`` and ``b=/p=`` folders (written as old versions did),
and a killed task's parts on a real S3-compatible server (moto's server mode on 127.0.0.1)."""
from __future__ import annotations

import dataclasses
import os
import time

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from aiospark.app.cli import main
from aiospark.journal import Journal, JournalStoreError, Manifest
from aiospark.journal.buckets import DEFAULT_BUCKETS, bucket_of
from aiospark.journal.segment import BATCHED, write_batch
from aiospark.journal.summary import compact, summarize
from tests.support.journal import found
from tests.support.s3 import SECRET_KEY

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


def result(i):
    return [{"id": i, "name": f"n{i}"}]


def error(i):
    return ValueError(f"no {i}")


def write_run(bound, attempt, outcomes):
    view = bound.open_task(0, None, attempt)
    for identity, results, err in outcomes:
        view.record(identity, results, err)
    view.close()


def write_legacy(fs, directory, entries):
    """A segment as versions before buckets wrote it, straight into a ``p=`` or ``b=/p=`` folder."""
    fs.create_dir(directory, recursive=True)
    with fs.open_output_stream(f"{directory}/1.1-abcd1234.arrow") as sink, \
            pa.ipc.new_stream(sink, BATCHED) as writer:
        write_batch(writer, entries)


def segments(fs, top):
    """``{folder relative to top: [segment names]}``."""
    out: dict[str, list[str]] = {}
    for info in fs.get_file_info(pafs.FileSelector(top, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and info.path.endswith(".arrow"):
            folder, name = info.path[len(top) + 1:].rsplit("/", 1)
            out.setdefault(folder, []).append(name)
    return {k: sorted(v) for k, v in out.items()}


def test_an_identity_in_two_folders_is_counted_once_and_a_result_outranks_an_error(tmp_path):
    """Before: the summary merged outcomes per folder, so [1] (a bucket segment and a legacy p=
    folder) counted twice, and [2] (an error in p=0, its result in k=) counted as a result and an
    error: (4, 3) instead of (3, 1)."""
    loc = str(tmp_path / "j")
    bound = Journal(loc, keep_errors=True, buckets=4).bind(manifest())
    write_run(bound, "1.1", [("[1]", [1], None), ("[2]", [2], None)])
    fs, top = pafs.LocalFileSystem(), f"{loc}/{bound.manifest.digest}"
    write_legacy(fs, f"{top}/p=0", [("[1]", [1], None), ("[2]", None, "ValueError: no"),
                                    ("[3]", None, "ValueError: three")])
    write_legacy(fs, f"{top}/b=7/p=0", [("[3]", None, "ValueError: three"), ("[4]", [4], None)])
    s = summarize(loc)
    assert (s.results, s.errors) == (3, 1), (s.results, s.errors)
    assert s.error_samples == [("[3]", "ValueError: three")]
    assert (s.buckets, s.legacy, s.parts) == (4, 2, 0) and s.compactable


def test_many_runs_legacy_folders_and_a_killed_tasks_parts_on_s3_compact_to_one_segment_per_bucket(s3):
    location = s3.uri()
    bound = Journal(location, keep_errors=True, buckets=4).bind(manifest())
    fs, root = bound.store.fs
    top = f"{root}/{bound.manifest.digest}"
    expected: dict[str, tuple] = {}

    # two runs: each closed task's parts become one segment per bucket, so a bucket holds two
    first = [(f"[{i}]", result(i), None) for i in range(40) if i != 5] + [("[5]", None, error(5))]
    write_run(bound, "1.1", first)
    second = [(f"[{i}]", result(i), None) for i in range(20, 60) if i != 50] + [("[5]", result(5), None),
                                                                               ("[50]", None, error(50))]
    write_run(bound, "2.1", second)
    for identity, results, err in first + second:
        if results is not None or identity not in expected:  # a result outranks a kept error
            expected[identity] = (results, None if err is None else f"ValueError: {err}")
    assert expected["[5]"] == (result(5), None) and expected["[50]"] == (None, "ValueError: no 50")

    # a journal written before buckets: legacy folders, [30] and [65] in two folders each, [70] an
    # error in one and a result in the other
    write_legacy(fs, f"{top}/p=0", [(f"[{i}]", result(i), None) for i in (*range(60, 70), 30)]
                 + [("[70]", None, "ValueError: no 70")])
    write_legacy(fs, f"{top}/b=3/p=1", [("[65]", result(65), None), ("[70]", result(70), None),
                                        ("[71]", None, "ValueError: no 71")])
    expected.update({f"[{i}]": (result(i), None) for i in range(60, 71)})
    expected["[71]"] = (None, "ValueError: no 71")

    # a killed task: its parts stay (the writer is never closed), its lease runs out
    killed = bound.open_task(0, None, "3.1")
    for i in (*range(80, 90), 0):
        killed.record(f"[{i}]", result(i), None)
    killed.record("[90]", None, error(90))
    expected.update({f"[{i}]": (result(i), None) for i in range(80, 90)})
    expected["[90]"] = (None, "ValueError: no 90")
    eventually(lambda: "[90]" in found(bound, "3.2", ["[90]"]), "the killed task's parts written")
    killed._stop.set()  # its writer thread stops renewing: what a killed worker's does
    killed._thread.join()
    with fs.open_output_stream(killed.store_task.parts.lease.path) as f:
        f.write(repr(time.time() - 1).encode())  # ... and its lease has run out

    wanted = [f"[{i}]" for i in range(100)]
    assert found(bound, "4.1", wanted) == expected  # what a task reads: the reference
    before = summarize(location)
    results = sum(1 for r, _ in expected.values() if r is not None)
    assert (before.results, before.errors) == (results, len(expected) - results)
    assert before.parts >= 1 and before.legacy == 2 and before.bucket_folders == 4 and before.bucket_segments == 8
    assert before.compactable

    done = compact(location)
    assert (done.results, done.errors, done.rows) == (before.results, before.errors, before.rows)
    assert (done.written, done.kept, done.removed_parts, done.removed_legacy) == (4, 0, before.parts, 2)
    assert done.removed == before.segments and done.dropped == 0
    layout = segments(fs, top)
    assert sorted(layout) == [f"k={b}" for b in range(4)], layout  # no parts, no legacy segment
    assert all(len(names) == 1 and names[0].startswith("compact-") for names in layout.values()), layout
    after = summarize(location)
    assert (after.results, after.errors) == (before.results, before.errors)
    assert (after.segments, after.bucket_segments, after.parts, after.legacy) == (4, 4, 0, 0)
    assert not after.compactable
    assert found(bound, "5.1", wanted) == expected  # results and kept errors, equal values

    again = compact(location)  # nothing left to do
    assert (again.written, again.removed, again.kept, again.rows) == (0, 0, 4, before.rows)
    assert segments(fs, top) == layout


def test_a_bucket_already_one_segment_is_left_untouched_and_a_legacy_journal_gets_its_buckets(tmp_path):
    loc = tmp_path / "j"
    legacy = dataclasses.replace(manifest(), buckets=None)  # a journal from before buckets
    store = Journal(str(loc)).store
    store.write_manifest(legacy)
    top = f"{loc}/{legacy.digest}"
    write_legacy(pafs.LocalFileSystem(), f"{top}/p=2", [(f"[{i}]", result(i), None) for i in range(5)])
    assert summarize(str(loc)).buckets is None
    done = compact(str(loc))
    assert done.buckets == DEFAULT_BUCKETS and done.removed_legacy == 1 and done.rows == 5
    assert store.read_manifest().buckets == DEFAULT_BUCKETS  # the B its k= folders were written with
    assert not os.path.exists(f"{top}/p=2")  # the empty legacy folder went too
    bound = Journal(str(loc), keep_errors=True).bind(manifest())
    assert bound.buckets == DEFAULT_BUCKETS
    assert found(bound, "1.1", [f"[{i}]" for i in range(5)]) == {f"[{i}]": (result(i), None) for i in range(5)}

    # one segment in each bucket; then a legacy folder adds to one bucket only
    fresh = Journal(str(tmp_path / "k"), keep_errors=True, buckets=4).bind(manifest())
    write_run(fresh, "1.1", [(f"[{i}]", result(i), None) for i in range(20)])
    ftop = f"{tmp_path / 'k'}/{fresh.manifest.digest}"
    untouched = {p: os.stat(os.path.join(ftop, p, n)).st_mtime_ns
                 for p, names in segments(pafs.LocalFileSystem(), ftop).items() for n in names}
    target = bucket_of("[100]", 4)
    write_legacy(pafs.LocalFileSystem(), f"{ftop}/p=0", [("[100]", None, "ValueError: no 100")])
    done = compact(str(tmp_path / "k"))
    assert (done.written, done.kept, done.removed, done.errors) == (1, 3, 2, 1)
    now = segments(pafs.LocalFileSystem(), ftop)
    assert now[f"k={target}"][0].startswith("compact-") and len(now[f"k={target}"]) == 1
    for folder, mtime in untouched.items():
        if folder != f"k={target}":
            (name,) = now[folder]
            assert os.stat(os.path.join(ftop, folder, name)).st_mtime_ns == mtime  # not rewritten
    assert found(fresh, "2.1", ["[100]", "[3]"]) == {"[100]": (None, "ValueError: no 100"), "[3]": (result(3), None)}


def test_compact_with_drop_errors_leaves_the_errors_out_in_one_pass(tmp_path):
    loc = str(tmp_path / "j")
    bound = Journal(loc, keep_errors=True, buckets=2).bind(manifest())
    write_run(bound, "1.1", [(f"[{i}]", result(i), None) for i in range(10)] + [("[10]", None, error(10)),
                                                                                 ("[11]", None, error(11))])
    before = summarize(loc)  # one segment per bucket: compaction alone would do nothing
    assert not before.compactable and before.errors == 2
    done = compact(loc, drop_errors=True)
    assert (done.dropped, done.results, done.errors) == (2, 10, 0)
    after = summarize(loc)
    assert (after.results, after.errors, after.bucket_segments) == (10, 0, after.bucket_folders)
    assert found(bound, "2.1", ["[10]", "[11]", "[1]"]) == {"[1]": (result(1), None)}


@pytest.mark.parametrize("store", ["dir", "s3"])
def test_a_live_writers_lease_refuses_the_compaction_and_nothing_changes(tmp_path, s3, capsys, store):
    """A live writer's segment (a disk) or parts (S3) would be rewritten: refused, one line, exit
    code 2 from the command, and not a file changed."""
    loc = str(tmp_path / "j") if store == "dir" else s3.uri()
    bound = Journal(loc, keep_errors=True, buckets=1).bind(manifest())
    fs, root = bound.store.fs
    write_run(bound, "1.1", [("[1]", result(1), None)])
    live = bound.open_task(0, None, "2.1")  # open and recording: its lease is live
    live.record("[2]", result(2), None)
    eventually(lambda: "[2]" in found(bound, "2.2", ["[2]"]), "the live writer's outcome written")

    def disk():
        infos = [i for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))
                 if i.type == pafs.FileType.File]
        arrows = {}
        for info in infos:
            if info.path.endswith(".arrow"):
                with fs.open_input_stream(info.path) as f:
                    arrows[info.path] = f.read()
        return arrows, sorted(i.path for i in infos)

    was = disk()
    assert len(was[0]) >= 2, was[1]  # the finished run's segment, the live writer's segment or part
    with pytest.raises(JournalStoreError, match=r"is being written \(segment .*held by a running task.*compact it "
                                                r"once the job has ended") as caught:
        compact(loc)
    assert len(str(caught.value).splitlines()) == 1
    assert main(["journal", loc, "--compact"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "held by a running task" in err, err
    assert SECRET_KEY not in err
    assert disk() == was  # nothing rewritten, nothing deleted
    live.record("[3]", result(3), None)
    live.close()
    done = compact(loc)
    assert (done.written, done.rows) == (1, 3) and done.removed >= 2
    assert found(bound, "3.1", ["[1]", "[2]", "[3]"]) == {f"[{i}]": (result(i), None) for i in (1, 2, 3)}


def test_a_file_compaction_cannot_read_as_a_segment_stops_it_and_nothing_is_deleted(tmp_path):
    """Compaction deletes what it rewrote: a foreign ``.arrow`` in a bucket folder, or a segment it
    cannot read, is never taken for an empty segment."""
    loc = tmp_path / "j"
    bound = Journal(str(loc), keep_errors=True, buckets=2).bind(manifest())
    write_run(bound, "1.1", [(f"[{i}]", result(i), None) for i in range(10)])
    write_run(bound, "1.2", [(f"[{i}]", result(i), None) for i in range(10, 20)])  # two segments per bucket
    top = f"{loc}/{bound.manifest.digest}"
    foreign = tmp_path / "j" / bound.manifest.digest / "k=0" / "someone-else.arrow"
    foreign.write_bytes(b"not a journal's")
    before = segments(pafs.LocalFileSystem(), top)
    with pytest.raises(JournalStoreError, match="someone-else.arrow is not a journal segment: move it out"):
        compact(str(loc))
    assert foreign.read_bytes() == b"not a journal's"
    assert segments(pafs.LocalFileSystem(), top) == before  # refused before anything changed
    assert len(found(bound, "2.1", [f"[{i}]" for i in range(20)])) == 20
    foreign.unlink()
    assert compact(str(loc)).rows == 20


def test_a_task_on_a_local_disk_keeps_a_bounded_number_of_segments_open(tmp_path):
    """Without the dedup shuffle a task holds rows of every bucket: beyond MAX_OPEN_SEGMENTS open
    files its outcomes go into parts (one file per flush), split into bucket segments at close."""
    from aiospark.journal.directory_task import MAX_OPEN_SEGMENTS

    loc = tmp_path / "j"
    bound = Journal(str(loc), keep_errors=True, buckets=4 * MAX_OPEN_SEGMENTS).bind(manifest())
    identities = [f"[{i}]" for i in range(20 * MAX_OPEN_SEGMENTS)]
    view = bound.open_task(0, None, "1.1")
    view.store_task.write([(i, result(i), None) for i in identities])  # what one flush hands the store
    assert len(view.store_task.writers) == MAX_OPEN_SEGMENTS and view.store_task.parts is not None
    view.close()
    top = f"{loc}/{bound.manifest.digest}"
    after = segments(pafs.LocalFileSystem(), top)
    assert "parts" not in after and len(after) == len({bucket_of(i, 4 * MAX_OPEN_SEGMENTS) for i in identities})
    assert found(bound, "2.1", identities) == {i: (result(i), None) for i in identities}
