"""A Structured Streaming query with a journal: its driver SIGKILLed mid-micro-batch and restarted
on its checkpoint calls again only the rows that were in flight (plus about a second of
completions not yet flushed), not the whole replayed batch.

``python -m tests.spark.journal_stream_job`` (a driver subprocess with its own local[2] session)
streams FILES JSON files of ROWS_PER_FILE rows, one file per micro-batch, through
``unordered_wait(..., journal=Journal(dir, key="id"))`` calling a counting HTTP server on 127.0.0.1
(latency LATENCY, CAPACITY calls in flight) into a Parquet file sink. Once a batch is committed and
the next one has made KILL_AFTER calls, the driver, its JVM and its Python workers are SIGKILLed.
A new driver on the same checkpoint replays that batch (same batch id, so its tasks find the
batch's outcomes in their buckets, ``k=<bucket>/``) and runs to the end. Without a journal the replayed batch
would call its KILL_AFTER rows again; the bound below is well under that.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos import ROOT, kill_tree, log_tail, wait_until
from tests.support.service import FaultService, ServiceConfig, item_value

pytestmark = pytest.mark.slow

FILES = 4
ROWS_PER_FILE = 600
TOTAL = FILES * ROWS_PER_FILE
LATENCY = 0.05
CAPACITY = 8
KILL_AFTER = 360          # calls of the batch in flight made before the kill
START_TIMEOUT = 240
RESTART_TIMEOUT = 300
#: in flight + a second of completions at the most the service allows (CAPACITY / LATENCY a second)
BOUND = CAPACITY + int(CAPACITY / LATENCY)


@pytest.fixture
def driver(tmp_path):
    procs: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        log_path = tmp_path / f"driver-{len(procs)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "tests.spark.journal_stream_job", *args], cwd=ROOT,
                                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                    start_new_session=True)
        proc.log_path = str(log_path)  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        kill_tree(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def write_inputs(input_dir: Path) -> None:
    input_dir.mkdir()
    now = time.time()
    for f in range(FILES):
        ids = range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE)
        tmp = input_dir / f".part-{f:03d}.tmp"  # the file source ignores dot-files: no half-written reads
        tmp.write_text("".join(json.dumps({"id": i, "key": f"j{i:05d}"}) + "\n" for i in ids))
        os.utime(tmp, (now - FILES + f, now - FILES + f))  # increasing mtimes: the source's order
        tmp.rename(input_dir / f"part-{f:03d}.json")


def batch_ids(log_dir: Path) -> list:
    return sorted(int(p.name) for p in log_dir.glob("[0-9]*")) if log_dir.exists() else []


@pytest.mark.version_agnostic  # a driver kill: the micro-batch journal tests above cover the version surface
def test_driver_killed_mid_micro_batch_recalls_only_what_was_in_flight(spark, driver, tmp_path):
    svc = FaultService(ServiceConfig(latency=LATENCY)).start()
    try:
        input_dir, sink, checkpoint, journal = (tmp_path / n for n in ("in", "sink", "checkpoint", "journal"))
        write_inputs(input_dir)
        args = ("--input", str(input_dir), "--sink", str(sink), "--checkpoint", str(checkpoint),
                "--journal", str(journal), "--url", svc.url, "--capacity", str(CAPACITY))

        first = driver(*args)

        def mid_batch():
            if first.poll() is not None:
                pytest.fail(f"the first driver exited early (code {first.returncode}):\n{log_tail(first)}")
            done = len(batch_ids(checkpoint / "commits"))
            calls = svc.stats(keys=False)["requests"] - done * ROWS_PER_FILE
            return 1 <= done < FILES and calls >= KILL_AFTER

        wait_until(mid_batch, START_TIMEOUT, interval=0.02, what="a committed batch and the next one in flight")
        killed = kill_tree(first)
        offsets, commits = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
        hits_at_kill = svc.stats()["key_hits"]
        in_batch = sum(hits_at_kill.values()) - len(commits) * ROWS_PER_FILE
        assert len(killed) >= 3, f"expected driver, JVM and Python workers to be killed, got pids {killed}"
        assert offsets[-1] > commits[-1], f"the kill should land mid-batch: offsets {offsets}, commits {commits}"
        assert KILL_AFTER <= in_batch < ROWS_PER_FILE, in_batch

        second = driver(*args)
        try:
            out, _ = second.communicate(timeout=RESTART_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the restarted query did not finish within {RESTART_TIMEOUT} s:\n{log_tail(second)}")
        assert second.returncode == 0, f"restart failed (exit {second.returncode}):\n{log_tail(second)}"
        done_lines = [line for line in out.decode().splitlines() if line.startswith("DONE ")]
        assert done_lines, f"no DONE line:\n{log_tail(second)}"
        rerun = json.loads(done_lines[-1][5:])["batches"]
        hits = svc.stats()["key_hits"]
    finally:
        svc.stop()

    rows = spark.read.parquet(str(sink)).collect()
    counts = Counter(r.key for r in rows)
    recalled = sorted(k for k, v in hits.items() if v > 1)
    total_calls = sum(hits.values())
    print(f"\n[streaming journal] {FILES} files x {ROWS_PER_FILE} rows, capacity {CAPACITY}, {LATENCY * 1000:.0f} ms; "
          f"killed in batch {offsets[-1]} after {in_batch} of its calls; restart ran batches {rerun}; "
          f"called again {len(recalled)} (bound {BOUND}); calls in all {total_calls} for {TOTAL} rows")

    assert sorted(counts) == sorted(f"j{i:05d}" for i in range(TOTAL)) and set(counts.values()) == {1}
    assert all(r.value == item_value(r.key) and r.key == f"j{r.id:05d}" for r in rows)
    # Spark's streaming.sql.batchId is the micro-batch id (file f is batch f), also in a replayed
    # batch; the journal keeps outcomes by bucket, never by micro-batch (a later batch finds them)
    assert {r.name for r in rows if r.id // ROWS_PER_FILE == 0} == {"b0"}
    assert all(r.name == f"b{r.id // ROWS_PER_FILE}" for r in rows), Counter(r.name for r in rows)
    assert not list(journal.glob("*/b=*")) and list(journal.glob("*/k=*/*.arrow"))
    assert rerun and rerun[0] == offsets[-1], f"the restart should resume with batch {offsets[-1]}, ran {rerun}"
    assert len(recalled) <= BOUND and total_calls <= TOTAL + BOUND, (len(recalled), total_calls)
    assert max(hits.values()) <= 2
