"""Task failure: a Python worker SIGKILLed in the middle of a partition; Spark's retry must make the
output complete and free of duplicates, in unordered and ordered mode.

Task retries need a session of their own (``local[2,4]``; the suite's ``local[2]`` gives a task a
single attempt), so the job runs in a driver subprocess: ``python -m tests.chaos.kill_worker_job``
(see that module). The FaultService runs here, so its per-key hit counts show exactly which rows the
killed attempt had already called (they are called again by the retry) -- and that nothing else was.
"""
from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from . import log_tail

pytestmark = pytest.mark.slow

ROWS = 2000
DRIVER_TIMEOUT = 240


def test_worker_killed_mid_partition_output_complete_without_duplicates(fault_service, driver, tmp_path):
    svc = fault_service(latency=0.003)
    proc = driver("tests.chaos.kill_worker_job", "--url", svc.url, "--marker-dir", str(tmp_path),
                  "--rows", str(ROWS))
    try:
        out, _ = proc.communicate(timeout=DRIVER_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not finish within {DRIVER_TIMEOUT} s after its worker was killed:\n"
                    f"{log_tail(proc)}")
    assert proc.returncode == 0, f"driver failed (exit {proc.returncode}):\n{log_tail(proc)}"
    lines = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    assert lines, f"no RESULT line; stdout: {out[-2000:]!r}\n{log_tail(proc)}"
    result = json.loads(lines[-1][len("RESULT "):])
    hits = svc.stats()["key_hits"]

    for mode, prefix in (("unordered", "u"), ("ordered", "o")):
        r = result[mode]
        per, kill_id = r["per_partition"], r["kill_id"]
        mine = {k: v for k, v in hits.items() if k.startswith(prefix)}
        twice = sorted(int(k[1:]) for k, v in mine.items() if v == 2)
        print(f"\n[task failure] {mode}: rows in {r['rows_in']}, rows out {r['rows_out']}, lost {r['lost_count']}, "
              f"duplicated {r['duplicated_count']}, killed {r['killed']} at row {kill_id}, attempts per partition "
              f"{r['attempts']}, keys called twice {len(twice)} "
              f"({twice[0] if twice else '-'}..{twice[-1] if twice else '-'}), wall {r['wall']} s")

        # the fault really happened: partition 1's first attempt died at kill_id
        assert r["killed"] is not None, f"{mode}: no worker was killed (marker file missing)"
        assert r["killed"]["partition"] == 1 and r["killed"]["attempt"] == 0, r["killed"]
        # nothing lost, nothing duplicated, nothing wrong
        assert r["lost_count"] == 0, f"{mode}: {r['lost_count']} rows lost, e.g. {r['lost']}"
        assert r["duplicated_count"] == 0, f"{mode}: {r['duplicated_count']} keys duplicated, e.g. {r['duplicated']}"
        assert r["rows_out"] == ROWS and r["bad_values"] == 0, r
        # partition 1's output all comes from the retry, on another worker; the others' from attempt 0
        assert r["attempts"]["1"] == [1], r["attempts"]
        assert r["killed"]["pid"] not in r["pids"]["1"], r["pids"]
        assert all(r["attempts"][p] == [0] for p in ("0", "2", "3")), r["attempts"]
        if mode == "ordered":
            assert r["in_order"], "ordered output lost the input order after the retry"
        # service side: the killed attempt got more than half-way (those rows were called twice: once
        # by the dead attempt, once by the retry), and no other row was called twice
        assert len(mine) == ROWS
        assert max(mine.values()) <= 2, Counter(mine.values())
        assert len(twice) >= per // 2, f"{mode}: only {len(twice)} rows of partition 1 were called before the kill"
        assert all(per <= i < kill_id for i in twice), f"{mode}: rows outside the killed range called twice"
