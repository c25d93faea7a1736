"""A journal makes a failure cost only the calls in flight: a Python worker and the driver SIGKILLed.

Both jobs run in driver subprocesses (``python -m tests.chaos.journal_kill_job``, ``local[2,4]``:
task retries on) against a counting FaultService here, 50 ms per call, capacity 16 per task; the
journal is a local directory, or an ``s3://`` location on an S3-compatible server (moto's server
mode on 127.0.0.1, tests/support/s3.py), where each flush is an object of its own.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.s3 import S3Server
from tests.support.service import item_value

from . import kill_tree, log_tail, wait_until

pytestmark = pytest.mark.slow

LATENCY = 0.05
CAPACITY = 16
DRIVER_TIMEOUT = 300
#: calls in flight plus one second of completions (the durability window) of one task
WINDOW = CAPACITY + int(CAPACITY / LATENCY)  # 336


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


@pytest.fixture(params=["dir", "s3"])
def journal_location(request, tmp_path):
    if request.param == "dir":
        return str(tmp_path / "journal")
    return request.getfixturevalue("s3").uri()


def expected(rows):
    return [[i, f"j{i:05d}", item_value(f"j{i:05d}"), f"item-j{i:05d}"] for i in range(rows)]


def result_of(proc):
    try:
        out, _ = proc.communicate(timeout=DRIVER_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not finish within {DRIVER_TIMEOUT} s:\n{log_tail(proc)}")
    assert proc.returncode == 0, f"driver failed (exit {proc.returncode}):\n{log_tail(proc)}"
    lines = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    assert lines, f"no RESULT line:\n{log_tail(proc)}"
    return json.loads(lines[-1][len("RESULT "):])


# a worker kill on the object store only: its parts are what a killed worker leaves behind; the local
# disk's segments survive a kill the same way in the driver-kill test below
@pytest.mark.parametrize("journal_location", ["s3"], indirect=True)
def test_worker_killed_mid_partition_recalls_only_the_last_second(fault_service, driver, tmp_path,
                                                                   journal_location):
    rows = 12000
    svc = fault_service(latency=LATENCY)
    proc = driver("tests.chaos.journal_kill_job", "--url", svc.url, "--journal", journal_location,
                  "--mode", "worker", "--rows", str(rows), "--partitions", "4", "--capacity", str(CAPACITY),
                  "--marker-dir", str(tmp_path))
    result = result_of(proc)
    stats = svc.stats()
    again = stats["requests"] - rows
    store = "s3" if journal_location.startswith("s3:") else "dir"
    print(f"\n[journal {store}, worker killed] calls {stats['requests']} for {rows} rows: {again} rows called again "
          f"(bound {CAPACITY} + {WINDOW - CAPACITY} = {WINDOW}; ~1,800 without a journal); killed {result['killed']}")
    assert result["killed"] is not None and result["killed"]["partition"] == 1, result["killed"]
    assert [r[:4] for r in result["rows"]] == expected(rows)
    assert 0 < again <= 352, again


def test_driver_killed_at_60_percent_and_rerun_on_another_core_count_pays_only_the_last_second(fault_service, driver, tmp_path,
                                                                         journal_location):
    rows, partitions = 6000, 2
    svc = fault_service(latency=LATENCY)
    args = ("tests.chaos.journal_kill_job", "--url", svc.url, "--journal", journal_location,
            "--mode", "driver", "--rows", str(rows), "--partitions", str(partitions), "--capacity", str(CAPACITY))
    first = driver(*args)
    wait_until(lambda: svc.stats()["requests"] >= int(rows * 0.6) or first.poll() is not None, DRIVER_TIMEOUT,
               what="60 % of the rows called")
    assert first.poll() is None, f"the first run ended before it was killed:\n{log_tail(first)}"
    kill_tree(first)
    at_kill = svc.stats()["requests"]
    # the rerun on another core count and partitioning: outcomes are found by key, not by partition
    rerun = list(args)
    rerun[rerun.index("--partitions") + 1] = "3"
    result = result_of(driver(*rerun, "--cores", "1"))
    total = svc.stats()["requests"]
    store = "s3" if journal_location.startswith("s3:") else "dir"
    print(f"\n[journal {store}, driver killed] {at_kill} calls before the kill, {total - at_kill} after, {total} in all "
          f"for {rows} rows: {total - rows} paid twice (bound {partitions} x {WINDOW} = {partitions * WINDOW})")
    assert result["rows"] == expected(rows)  # as an uninterrupted run: nothing lost, nothing twice
    assert total <= rows + partitions * WINDOW, total
