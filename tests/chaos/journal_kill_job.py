"""Driver subprocess of test_journal_kill: a job with a journal, killed (a worker, or this driver).

Run: ``python -m tests.chaos.journal_kill_job --url URL --journal DIR --mode worker|driver [--rows N]
[--partitions P] [--cores C] [--capacity C] [--marker-dir DIR]``

``worker``: :class:`~tests.chaos.kill_worker_job.KillOnce` SIGKILLs its Python worker 60 % into
partition 1; ``local[2,4]`` gives the task further attempts, which read the journal the killed one
wrote. ``driver``: a plain :class:`~tests.chaos.ServiceCall`; the test SIGKILLs this whole process
tree at 60 % and runs it again. Prints ``RESULT {json}`` with the output rows (id, key, value, name).
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--mode", choices=("worker", "driver"), required=True)
    parser.add_argument("--rows", type=int, default=12000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2, help="local[cores,4]: a rerun may get another core count")
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--marker-dir", default=None)
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    import aiospark
    from tests.chaos import ITEM_SCHEMA, ServiceCall
    from tests.chaos.kill_worker_job import KILLED_PARTITION, KillOnce

    spark = aiospark.local_session(f"local[{args.cores},4]", app_name="aiospark-journal-kill", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": 500})
    try:
        per_partition = args.rows // args.partitions
        df = spark.range(0, args.rows, 1, args.partitions).select("id", F.format_string("j%05d", "id").alias("key"))
        if args.mode == "worker":
            kill_id = KILLED_PARTITION * per_partition + int(per_partition * 0.6)
            function = KillOnce(args.url, os.path.join(args.marker_dir, "worker.marker"), kill_id)
            schema = ITEM_SCHEMA + ", partition INT, attempt INT, pid INT"
        else:
            function, schema = ServiceCall(args.url, attempt_timeout=30), ITEM_SCHEMA
        out = aiospark.unordered_wait(df, function, schema, capacity=args.capacity, timeout=60,
                                      journal=aiospark.Journal(args.journal, key="id"), output_batch_rows=100,
                                      dedup=False)  # the kill is aimed at partition 1's rows as given
        rows = sorted((r.id, r.key, r.value, r.name) for r in out.collect())
        killed = None
        if args.marker_dir and os.path.exists(os.path.join(args.marker_dir, "worker.marker")):
            with open(os.path.join(args.marker_dir, "worker.marker")) as f:
                killed = json.loads(f.read() or "null")
    finally:
        spark.stop()
    print("RESULT " + json.dumps({"rows": rows, "killed": killed}), flush=True)


if __name__ == "__main__":
    from tests.chaos.journal_kill_job import main as _main  # functions pickled by reference, not __main__

    _main(sys.argv[1:])
