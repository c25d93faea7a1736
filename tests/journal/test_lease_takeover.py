"""A writer that stalls past its lease never writes back over ``--drop-errors``' result, and a dead
writer's lease over no segment does not stay forever.

The stalled writer is a real Spark task SIGSTOPped (a swapped-out or frozen worker) while
``aiospark journal --drop-errors`` takes its segment over on moto's S3-compatible server, then
SIGCONTed. The lease is shortened with ``AIOSPARK_JOURNAL_LEASE_SECONDS`` (read on the driver).
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid

import pyarrow.fs as pafs
import pytest

import aiospark
from aiospark.journal import Journal, Manifest
from aiospark.journal.lease import SUFFIX
from aiospark.journal.summary import drop_errors, summarize
from tests.support.journal import found, only_segment

LEASE_ENV = "AIOSPARK_JOURNAL_LEASE_SECONDS"
LEASE = 6.0
ROWS = 900


def calls_of(work: str) -> int:
    try:
        with open(f"{work}/calls") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def make_fn(work: str):
    async def fn(row):
        with open(f"{work}/calls", "a") as f:
            f.write(f"{row['id']}\n")
        with open(f"{work}/pid", "w") as f:
            f.write(str(os.getpid()))
        await asyncio.sleep(0.05)
        if row["id"] % 5 == 0:
            raise ValueError(f"row {row['id']} refused, call {uuid.uuid4().hex}")  # each call's text unique
        return {"id": row["id"]}
    return fn


def error_texts(location: str) -> set[str]:
    return {text for _, text in summarize(location, samples=10**6).error_samples}


def recorded_errors(location: str) -> set[str]:
    try:
        return error_texts(location)
    except ValueError:  # no manifest yet: nothing written
        return set()


def leases(fs: pafs.FileSystem, path: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return [i.path for i in infos if i.path.endswith(SUFFIX)]


def test_a_writer_frozen_past_its_lease_never_brings_dropped_errors_back(spark, s3, tmp_path, monkeypatch):
    """Before: the drop compacted and deleted the frozen task's parts; resumed, the task compacted
    its parts again, every dropped error included: the user had been told they were dropped."""
    monkeypatch.setenv(LEASE_ENV, str(LEASE))
    work = str(tmp_path)
    name = f"frozen-{uuid.uuid4().hex[:6]}"
    location = s3.uri(name)
    # one bucket, no dedup shuffle: one task writing one segment, frozen mid-run
    journal = aiospark.Journal(location, key="id", keep_errors=True, buckets=1)
    fs = s3.filesystem()
    seen: dict[str, object] = {}

    def freezer() -> None:
        end = time.monotonic() + 300
        while time.monotonic() < end and not (calls_of(work) > 40 and recorded_errors(location)):
            time.sleep(0.05)  # until errors were recorded (a part landed)
        pid = 0
        while not pid:
            try:
                pid = int(open(f"{work}/pid").read())
            except ValueError:  # caught mid-write
                time.sleep(0.001)
        os.kill(pid, signal.SIGSTOP)
        try:
            # until every lease ran out (the lease's own expiry: 6 s here, 60 s on code that ignores the variable)
            while time.monotonic() < end:
                expiries = []
                for path in leases(fs, f"{s3.bucket}/{name}"):
                    try:
                        with fs.open_input_stream(path) as f:
                            expiries.append(float(f.read().decode()))
                    except (OSError, ValueError):
                        expiries.append(time.time() + 1)
                if expiries and max(expiries) < time.time() - 0.5:
                    break
                time.sleep(0.5)
            seen["before"] = error_texts(location)
            seen["dropped"] = drop_errors(location)
        except BaseException as exc:
            seen["failed"] = exc
        finally:
            os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=freezer, daemon=True)
    thread.start()
    df = spark.range(0, ROWS, 1, 1)
    try:
        aiospark.unordered_wait(df, make_fn(work), "id LONG", journal=journal, on_error="row", capacity=4,
                                dedup=False).collect()
        outcome = "the job finished"
    except Exception as exc:  # local[2] does not retry a task; a cluster would
        outcome = str(exc)
    thread.join(timeout=120)
    assert "failed" not in seen, seen.get("failed")
    assert seen["dropped"] and seen["before"], seen  # the drop took errors away from a frozen task's parts
    back = error_texts(location) & seen["before"]
    assert not back, f"{len(back)} dropped errors are back in the journal ({outcome[:300]})"
    assert "stalled" in outcome and "--drop-errors" in outcome, outcome[:2000]


async def one(row):
    return row


def test_a_dead_writers_lease_over_no_segment_is_removed_by_the_drop_and_the_next_run(tmp_path, capsys):
    """Before: a writer killed before its first part landed left its ``.lease`` for ever."""
    location = str(tmp_path / "j")
    bound = Journal(location, keep_errors=True, buckets=1).bind(Manifest.of("ordered_wait", one, "id BIGINT", ["id"],
                                                                 ["bigint"]))
    writer = bound.open_task(0, None, "1.1")
    writer.record("[1]", [{"id": 1}], None)
    writer.close()
    directory = os.path.dirname(only_segment(writer.store_task).path)
    dead, alive = f"{directory}/9.1-deadbeef{SUFFIX}", f"{directory}/9.2-cafecafe{SUFFIX}"
    for path, expires in ((dead, time.time() - 1), (alive, time.time() + 600)):
        with open(path, "w") as f:
            f.write(repr(expires))

    drop_errors(location)
    assert not os.path.exists(dead) and os.path.exists(alive)  # a live writer about to write keeps its lease

    with open(dead, "w") as f:
        f.write(repr(time.time() - 1))
    assert "[1]" in found(bound, "1.2", ["[1]"])  # the next run's task
    assert not os.path.exists(dead) and os.path.exists(alive)


@pytest.mark.parametrize("value", ["0", "abc", "99999"])
def test_the_lease_variable_is_checked_where_the_journal_is_made(tmp_path, monkeypatch, value):
    monkeypatch.setenv(LEASE_ENV, value)
    with pytest.raises(ValueError, match=LEASE_ENV):
        Journal(str(tmp_path / "j"))
