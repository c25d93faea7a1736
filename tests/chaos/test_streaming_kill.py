"""Exactly-once streaming: SIGKILL the driver of a running query mid-stream, restart it from its checkpoint.

``python -m tests.chaos.stream_job`` (a driver subprocess with its own local[2] session) streams
FILES JSON files of ROWS_PER_FILE rows, one file per micro-batch, through ``unordered_wait`` calling
the FaultService (latency 0.12 s, 8 calls in flight: a batch takes a second or two) into a
Parquet file sink. Once two batches are committed and the next one has made at least 16 calls, the
driver, its JVM and its Python workers are SIGKILLed (a crash: no shutdown hooks run). A new driver
on the same checkpoint runs to the end. ``spark.read`` of the sink (which honours the sink's
``_spark_metadata`` log) must hold every input key exactly once, with the right value; the service's
hit counts show that the batch in flight at the kill was really called again after the restart.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.service import item_value

from . import kill_tree, log_tail, wait_until

pytestmark = pytest.mark.slow

FILES = 6
ROWS_PER_FILE = 80
TOTAL = FILES * ROWS_PER_FILE
LATENCY = 0.12
START_TIMEOUT = 180   # until 2 batches are committed (JVM start included)
RESTART_TIMEOUT = 240


def write_inputs(input_dir: Path) -> None:
    input_dir.mkdir()
    now = time.time()
    for f in range(FILES):
        ids = range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE)
        tmp = input_dir / f".part-{f:03d}.tmp"  # the file source ignores dot-files: no half-written reads
        tmp.write_text("".join(json.dumps({"id": i, "key": f"s{i:05d}"}) + "\n" for i in ids))
        os.utime(tmp, (now - FILES + f, now - FILES + f))  # increasing mtimes: the source's order
        tmp.rename(input_dir / f"part-{f:03d}.json")


def batch_ids(log_dir: Path) -> list:
    return sorted(int(p.name) for p in log_dir.glob("[0-9]*")) if log_dir.exists() else []


def test_driver_killed_mid_stream_sink_holds_every_key_exactly_once(spark, fault_service, driver, tmp_path):
    svc = fault_service(latency=LATENCY)
    input_dir, sink, checkpoint = tmp_path / "in", tmp_path / "sink", tmp_path / "checkpoint"
    write_inputs(input_dir)
    args = ("--input", str(input_dir), "--sink", str(sink), "--checkpoint", str(checkpoint), "--url", svc.url,
            "--capacity", "8")

    # run 1: kill once 2 batches are committed and the next one is half-way through its calls
    t0 = time.monotonic()
    first = driver("tests.chaos.stream_job", *args)

    def mid_batch():
        if first.poll() is not None:
            pytest.fail(f"the first driver exited early (code {first.returncode}):\n{log_tail(first)}")
        done = len(batch_ids(checkpoint / "commits"))
        calls = svc.stats(keys=False)["requests"] - done * ROWS_PER_FILE
        return 2 <= done < FILES and 16 <= calls <= ROWS_PER_FILE - 16

    wait_until(mid_batch, START_TIMEOUT, interval=0.05, what="2 committed batches and a third in flight")
    killed = kill_tree(first)
    t_kill = time.monotonic() - t0
    offsets, commits = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
    hits_at_kill = dict(svc.stats()["key_hits"])
    assert len(killed) >= 3, f"expected driver, JVM and Python daemon/workers to be killed, got pids {killed}"
    assert offsets and commits and offsets[-1] > commits[-1], (
        f"the kill should land while a batch is in flight: offsets {offsets}, commits {commits}")

    # run 2: restart from the checkpoint until all input is processed
    second = driver("tests.chaos.stream_job", *args)
    try:
        out, _ = second.communicate(timeout=RESTART_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the restarted query did not finish within {RESTART_TIMEOUT} s:\n{log_tail(second)}")
    assert second.returncode == 0, f"restart failed (exit {second.returncode}):\n{log_tail(second)}"
    done_lines = [line for line in out.decode().splitlines() if line.startswith("DONE ")]
    assert done_lines, f"no DONE line:\n{log_tail(second)}"
    rerun = json.loads(done_lines[-1][5:])["batches"]
    t_done = time.monotonic() - t0

    rows = spark.read.parquet(str(sink)).collect()
    counts = Counter(r.key for r in rows)
    expected = {f"s{i:05d}" for i in range(TOTAL)}
    lost = sorted(expected - set(counts))
    duplicated = sorted(k for k, c in counts.items() if c > 1)
    hits = svc.stats()["key_hits"]
    recalled = sorted(k for k, v in hits.items() if v > 1)
    data_files = [p for p in sink.glob("*.parquet")]
    print(f"\n[streaming] {FILES} files x {ROWS_PER_FILE} rows; killed with batches {commits} committed and "
          f"{offsets[-1]} in flight ({sum(hits_at_kill.values()) - len(commits) * ROWS_PER_FILE} of its calls "
          f"made); restart ran batches {rerun}; sink rows {len(rows)}, lost {len(lost)}, "
          f"duplicated {len(duplicated)}; keys called twice {len(recalled)}; data files on disk {len(data_files)}; "
          f"kill at {t_kill:.1f} s, restart done at {t_done:.1f} s")

    assert lost == [], f"{len(lost)} keys missing from the sink, e.g. {lost[:5]}"
    assert duplicated == [], f"{len(duplicated)} keys duplicated in the sink, e.g. {duplicated[:5]}"
    assert len(rows) == TOTAL
    assert all(r.value == item_value(r.key) and r.key == f"s{r.id:05d}" for r in rows)
    # at-least-once processing underneath: the batch in flight at the kill was run again (its keys
    # called twice), and no key was called more than twice
    assert rerun and rerun[0] == offsets[-1], f"the restart should resume with batch {offsets[-1]}, ran {rerun}"
    assert len(recalled) >= 16 and max(hits.values()) == 2, Counter(hits.values())
