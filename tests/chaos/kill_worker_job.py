"""Driver subprocess of test_task_failure: a Python worker is SIGKILLed in the middle of a partition.

Run: ``python -m tests.chaos.kill_worker_job --url http://127.0.0.1:PORT --marker-dir DIR [--rows 4000]``

Starts its own classic session on ``local[2,4]`` (local mode with up to 4 attempts per task: plain
``local[n]`` gives a task a single attempt), then runs one ``unordered_wait`` and one ``ordered_wait``
job over ``--rows`` rows in 4 partitions. The function (:class:`KillOnce`) calls the FaultService
at ``--url``; when it meets the row ``kill_id`` (60 % into partition 1) it creates a marker file with
``O_CREAT | O_EXCL`` -- so only the first call of the job gets to do it -- and SIGKILLs its own worker
process, with other calls in flight and (``output_batch_rows=100``) hundreds of the partition's rows
already handed to Spark. Spark re-runs the task on a fresh worker.

Prints one line ``RESULT {json}`` per run of this script: for each mode the rows out, lost and
duplicated keys, wrong values, the marker's content (pid / partition / attempt that died) and, per
partition, the task attempts and worker pids that produced its output rows.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from tests.chaos import ITEM_SCHEMA, ServiceCall

ROWS = 4000
PARTITIONS = 4
KILLED_PARTITION = 1
SCHEMA = ITEM_SCHEMA + ", partition INT, attempt INT, pid INT"
PREFIX = {"unordered": "u", "ordered": "o"}


def task_info() -> dict[str, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()  # a class attribute: also visible from the worker's event-loop thread
    return {"partition": ctx.partitionId(), "attempt": ctx.attemptNumber(), "pid": os.getpid()}


class KillOnce(ServiceCall):
    """ServiceCall that SIGKILLs its worker at row ``kill_id``, once per ``marker`` file."""

    def __init__(self, url: str, marker: str, kill_id: int):
        super().__init__(url, attempt_timeout=10.0)
        self.marker = marker
        self.kill_id = kill_id

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        if row["id"] == self.kill_id:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pass  # a worker was already killed in this job: this is the retry, go on
            else:
                os.write(fd, json.dumps(task_info()).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        out = await super().async_invoke(row)
        out[0].update(task_info())
        return out


def run(spark: Any, mode: str, url: str, marker: str, rows: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    import aiospark
    from aiospark import RetryStrategy
    from aiospark.connectors import is_retryable
    from tests.support.service import item_value

    per_partition = rows // PARTITIONS
    kill_id = KILLED_PARTITION * per_partition + int(per_partition * 0.6)
    prefix = PREFIX[mode]
    df = spark.range(0, rows, 1, PARTITIONS).select("id", F.format_string(prefix + "%05d", "id").alias("key"))
    wait = aiospark.ordered_wait if mode == "ordered" else aiospark.unordered_wait
    out = wait(df, KillOnce(url, marker, kill_id), SCHEMA, capacity=32, timeout=30,
               retry=RetryStrategy.fixed_delay(3, 0.05, exception_predicate=is_retryable), output_batch_rows=100)
    t0 = time.monotonic()
    got = out.collect()
    wall = time.monotonic() - t0

    counts = Counter(r.key for r in got)
    expected = {f"{prefix}{i:05d}" for i in range(rows)}
    attempts: dict[int, set] = defaultdict(set)
    pids: dict[int, set] = defaultdict(set)
    for r in got:
        attempts[r.partition].add(r.attempt)
        pids[r.partition].add(r.pid)
    killed = None
    if os.path.exists(marker):
        with open(marker) as f:
            killed = json.loads(f.read() or "null")
    ids = [r.id for r in got]
    return {
        "rows_in": rows, "rows_out": len(got), "wall": round(wall, 2), "kill_id": kill_id,
        "per_partition": per_partition,
        "lost": sorted(expected - set(counts))[:20], "lost_count": len(expected - set(counts)),
        "duplicated": sorted(k for k, c in counts.items() if c > 1)[:20],
        "duplicated_count": sum(1 for c in counts.values() if c > 1),
        "bad_values": sum(1 for r in got if r.value != item_value(r.key) or r.key != f"{prefix}{r.id:05d}"),
        "in_order": ids == list(range(rows)),
        "killed": killed,
        "attempts": {str(p): sorted(a) for p, a in sorted(attempts.items())},
        "pids": {str(p): sorted(s) for p, s in sorted(pids.items())},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--marker-dir", required=True)
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--modes", default="unordered,ordered")
    args = parser.parse_args(argv)

    import aiospark

    spark = aiospark.local_session("local[2,4]", app_name="aiospark-kill-worker", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": 100,
    })
    try:
        result = {mode: run(spark, mode, args.url, os.path.join(args.marker_dir, f"{mode}.marker"), args.rows)
                  for mode in args.modes.split(",")}
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    # Re-import under the package name so Spark pickles KillOnce by reference (not as __main__).
    from tests.chaos.kill_worker_job import main as _main

    _main(sys.argv[1:])
