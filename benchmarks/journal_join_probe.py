"""Design probe for issue 48's scale targets: a fully recorded rerun served by a Spark join against
the journal read as a table, beside today's rerun (each task loads the journal buckets its rows touch).

Run:  python benchmarks/journal_join_probe.py [--rows-per-task N] [--tasks T] [--rounds R]

A journal is written once by ``aiospark.unordered_wait(df, noop, journal=Journal(dir, key="key"))``
(``spark.range(N*T)`` in T partitions, ``key = id``). Then, per round:

* ``plain``  -- the same job without a journal (calls a no-op ``async def``);
* ``rerun``  -- the same job with the journal: every row recorded, nothing called (today's route);
* ``join``   -- what a join route would run, built by hand from public Spark and the journal's
  segment reader: the segments listed on the driver and read as a table by ``mapInArrow``
  (``_id``, the row's results pickled alone, the kept error), reduced to one outcome per identity
  (``groupBy``, a result before an error), the input's identities computed by a Python pre-pass
  (``mapInArrow``: the operator's cost of an identity), a left join on the identity, and a
  ``mapInArrow`` that unpickles each row's results into the output (the operator's replay);
* ``merge``  -- the same journal table and identities, but no join: the journal's rows and the
  input's rows in one ``union``, ``repartition`` by identity and ``sortWithinPartitions`` by
  (identity, journal first), and one ``mapInArrow`` that walks the sorted stream keeping only the
  current identity's outcome (what an operator fed so would hold: one outcome, whatever the rows).

Rows/s are per task (rows / wall / T); peak RSS is the largest of one Python worker
(``_spark.WorkerPeakRss``). The point: whether a route whose Python memory does not grow with the
rows of a task or the journal's size can also read at >= 200,000 rows/s per task.
"""
from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # run as a file: benchmarks._spark

from benchmarks._spark import MIB, WorkerPeakRss, command_line, load_line, local_spark, markdown_table, median  # noqa: E402

SCHEMA = "key LONG, v LONG"
CAPACITY = 100


async def noop(row):
    return {"key": row["key"], "v": row["key"] + 1}


def read_segments(batches):
    """``path`` batches -> (identity, results pickled alone or None, error or None) batches."""
    import pyarrow as pa

    from aiospark.journal.segment import read_outcomes

    for batch in batches:
        for path in batch.column(0).to_pylist():
            with open(path, "rb") as f:
                found, _ = read_outcomes(f.read())
            ids = list(found)
            recs = [None if r is None else pickle.dumps(r, 5) for r, _ in found.values()]
            errs = [e for _, e in found.values()]
            for start in range(0, len(ids), 10_000):
                yield pa.record_batch([pa.array(ids[start:start + 10_000], pa.string()),
                                       pa.array(recs[start:start + 10_000], pa.binary()),
                                       pa.array(errs[start:start + 10_000], pa.string())],
                                      names=["_id", "rec", "err"])


def identities(batches):
    """The input plus ``_id`` as the operator writes an int key's identity (``[<int>]``)."""
    import pyarrow as pa

    for batch in batches:
        ids = ["[" + int.__repr__(k) + "]" for k in batch.column(1).to_pylist()]
        yield pa.record_batch(list(batch.columns) + [pa.array(ids, pa.string())],
                              names=list(batch.schema.names) + ["_id"])


def replay(batches):
    """Each joined row's recorded results, unpickled, as the output rows (the operator's replay)."""
    import pyarrow as pa

    loads = pickle.loads
    for batch in batches:
        keys, vs = [], []
        for rec in batch.column(batch.schema.get_field_index("rec")).to_pylist():
            if rec is None:
                raise SystemExit("a row without a recorded outcome: the probe's journal is incomplete")
            for out in loads(rec):
                keys.append(out["key"])
                vs.append(out["v"])
        yield pa.record_batch([pa.array(keys, pa.int64()), pa.array(vs, pa.int64())], names=["key", "v"])


def merge_replay(batches):
    """The sorted union: a journal row (``tag`` 0) sets the current outcome; each input row of that
    identity (``tag`` 1) replays it."""
    import pyarrow as pa

    loads = pickle.loads
    current_id, current = None, None
    for batch in batches:
        ids, tags, recs = (batch.column(batch.schema.get_field_index(n)).to_pylist() for n in ("_id", "tag", "rec"))
        keys, vs = [], []
        for identity, tag, rec in zip(ids, tags, recs):
            if tag == 0:
                current_id, current = identity, (None if rec is None else loads(rec))
                continue
            if identity != current_id or current is None:
                raise SystemExit("an input row without a recorded outcome: the probe's journal is incomplete")
            for out in current:
                keys.append(out["key"])
                vs.append(out["v"])
        yield pa.record_batch([pa.array(keys, pa.int64()), pa.array(vs, pa.int64())], names=["key", "v"])


def segments(path: str) -> list[str]:
    return sorted(os.path.join(d, n) for d, _, names in os.walk(path) for n in names if n.endswith(".arrow"))


def timed(df) -> tuple[float, int]:
    with WorkerPeakRss() as rss:
        start = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        wall = time.perf_counter() - start
    return wall, rss.peak


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-task", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from pyspark.sql import functions as F

    import aiospark

    tasks, rows = args.tasks, args.rows_per_task * args.tasks
    spark = local_spark(tasks)
    tmp = tempfile.mkdtemp(prefix="aiospark-join-probe-")
    journal_dir = f"{tmp}/journal"
    load_start = os.getloadavg()
    res: dict[str, list[tuple[float, int]]] = {"plain": [], "rerun": [], "join": [], "merge": []}
    try:
        df = spark.range(0, rows, 1, tasks).withColumn("key", F.col("id"))
        journal = aiospark.Journal(journal_dir, key="key")
        aiospark.unordered_wait(df, noop, SCHEMA, capacity=CAPACITY, journal=journal) \
            .write.format("noop").mode("overwrite").save()
        files = segments(journal_dir)
        for _ in range(args.rounds):
            res["plain"].append(timed(aiospark.unordered_wait(df, noop, SCHEMA, capacity=CAPACITY)))
            res["rerun"].append(timed(aiospark.unordered_wait(df, noop, SCHEMA, capacity=CAPACITY, journal=journal)))
            raw = spark.createDataFrame([(p,) for p in files], "path STRING") \
                .repartition(max(1, min(len(files), tasks * 4))) \
                .mapInArrow(read_segments, "_id STRING, rec BINARY, err STRING")
            table = raw.groupBy("_id").agg(F.first("rec", ignorenulls=True).alias("rec"),
                                           F.first("err", ignorenulls=True).alias("err"))
            ids = df.mapInArrow(identities, "id LONG, key LONG, _id STRING")
            joined = ids.join(table, "_id", "left").mapInArrow(replay, SCHEMA)
            res["join"].append(timed(joined))
            stream = raw.select("_id", F.lit(0).alias("tag"), "rec") \
                .unionByName(ids.select("_id", F.lit(1).alias("tag"), F.lit(None).cast("binary").alias("rec"))) \
                .repartition(tasks * 2, "_id").sortWithinPartitions("_id", "tag")
            res["merge"].append(timed(stream.mapInArrow(merge_replay, SCHEMA)))
        load_end = os.getloadavg()
        size = sum(os.path.getsize(p) for p in files)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    caption = (f"command: `{command_line(argv)}`  \n{load_line(load_start, load_end)}; local[{tasks}], "
               f"{args.rounds} rounds (medians); journal: {len(files)} segments, {size / MIB:.1f} MiB")
    body = []
    for side in ("plain", "rerun", "join", "merge"):
        rates = [rows / wall / tasks for wall, _ in res[side]]
        peaks = [peak / MIB for _, peak in res[side]]
        body.append([side, ", ".join(f"{r:,.0f}" for r in rates), f"{median(rates):,.0f}",
                     ", ".join(f"{p:.0f}" for p in peaks), f"{median(peaks):.0f}"])
    print(f"\n**Fully recorded rerun: today's route vs a join against the journal as a table, "
          f"{args.rows_per_task:,} rows per task**\n\n{caption}\n")
    print(markdown_table(["side", "rows/s per task (rounds)", "median", "peak RSS MiB/worker (rounds)", "median"],
                         body))


if __name__ == "__main__":
    main()
