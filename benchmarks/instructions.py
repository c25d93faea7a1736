#!/usr/bin/env python3
"""Instructions per element, counted by callgrind: the same count whatever else the machine does.

    python benchmarks/instructions.py                                   # this interpreter, this tree
    python benchmarks/instructions.py --python /tmp/aiospark-ci/py3.12/bin/python --src /tmp/old/src

Three workloads, each run under ``valgrind --tool=callgrind`` at two sizes; the difference divided by
the difference in elements is what one element costs (start-up and imports cancel out):

* ``bare``: a no-op coroutine per element as a bare Task (eager on 3.12+) with a done callback;
* ``unordered`` / ``ordered``: the same coroutine through ``AsyncWaitOperator`` (capacity 100, timeout
  60 s) on ``asyncio.run``'s loop, fed with ``try_process`` / ``wait_for_space``;
* ``bare worker loop`` / ``unordered worker loop``: ``bare`` and ``unordered`` on the Spark worker's loop
  (``aiospark.runtime.worker_loop.new_event_loop``: uvloop by default, ``AIOSPARK_LOOP`` chooses);
* ``arrow to python`` / ``python to arrow``: the rows lane's conversions alone, per row: one Arrow batch
  of 10,000 rows of one LONG column to a list of dicts (``to_python``), and such a list back to a batch
  with every output check (``RowConverter.to_batch``), each made once and converted over and over;
* ``spark runner``: the function ``unordered_wait`` gives ``mapInArrow``, over in-memory Arrow batches
  of one LONG column (Arrow in, the worker loop's thread and the bridge, Arrow out), no JVM, on the
  worker's default loop (``AIOSPARK_LOOP``);
* ``batched runner``: the same with ``batch_size=256``, capacity 1024 and a no-op batch function.

The gen-0 GC threshold is 50,000 in every workload, as the Spark worker sets it while partitions run
(``aiospark.runtime.gc_policy``). ``--src`` puts another checkout's ``src`` first on ``sys.path``
(e.g. ``git archive <commit> src | tar -x -C /tmp/old``) to compare two commits.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import subprocess
import sys
from typing import Any

WORKLOADS = {"bare": (2_000, 22_000), "unordered": (2_000, 22_000), "ordered": (2_000, 22_000),
             "bare worker loop": (2_000, 22_000), "unordered worker loop": (2_000, 22_000),
             "arrow to python": (20_000, 220_000), "python to arrow": (20_000, 220_000),
             "spark runner": (10_000, 50_000), "batched runner": (20_000, 220_000)}
CONVERTED = 10_000  # rows per batch of the conversion workloads, as Spark's maxRecordsPerBatch


async def _noop(x: object) -> object:
    return x


async def _noop_batch(xs: list) -> list:
    return xs


async def _bare(n: int) -> None:
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 12):
        def start(coro):  # what the operator does on 3.12+ (eager tasks)
            return asyncio.Task(coro, loop=loop, eager_start=True)
    else:
        start = loop.create_task
    done = loop.create_future()
    left = [n]
    out: list[object] = []

    def on_done(task: asyncio.Task) -> None:
        out.append(task.result())
        left[0] -= 1
        if left[0] == 0:
            done.set_result(None)

    for i in range(n):
        task = start(_noop(i))
        if task.done():
            on_done(task)
        else:
            task.add_done_callback(on_done)
        if i % 100 == 99:
            await asyncio.sleep(0)
    await done


async def _operator(n: int, ordered: bool) -> None:
    from aiospark.core import AsyncWaitOperator

    out: list[object] = []
    op = AsyncWaitOperator(_noop, out.append, ordered=ordered, capacity=100, timeout=60)
    await op.open()
    for i in range(n):
        while not op.try_process(i):
            await op.wait_for_space()
    await op.finish()
    await op.close()
    assert len(out) == n


def _spark_runner(n: int, batch_size: int | None = None) -> None:
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from aiospark.journal import RowIdentity
    from aiospark.spark.journaled import Durable
    from aiospark.spark.options import CallOptions
    from aiospark.spark.wait import _PartitionRunner

    function, capacity = (_noop, 100) if batch_size is None else (_noop_batch, 4 * batch_size)
    options = CallOptions.create(function, ordered=False, timeout=60.0, capacity=capacity, retry=None,
                                 rate_limit=None, metrics=None, name="unordered_wait", batch_size=batch_size,
                                 batch_delay=0.01, order_key=None, budget=None)
    schema = StructType([StructField("id", LongType(), True)])
    runner = _PartitionRunner(options, schema, "fail", "_error", "_input", 10_000, "instructions")
    runner.durable = Durable(RowIdentity(["id"]), None)  # as _wait sets it: idempotency_key() works, no journal
    batches = [pa.record_batch([pa.array(range(s, min(n, s + 10_000)), pa.int64())], names=["id"])
               for s in range(0, n, 10_000)]
    assert sum(b.num_rows for b in runner(iter(batches))) == n


def _conversions(n: int, to_arrow: bool) -> None:
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    from aiospark.spark.schema import RowConverter, to_python

    batch = pa.record_batch([pa.array(range(CONVERTED), pa.int64())], names=["id"])
    rows = to_python(batch)
    converter = RowConverter(StructType([StructField("id", LongType(), True)]), "instructions")
    for _ in range(n // CONVERTED):
        if to_arrow:
            converter.to_batch(rows)
        else:
            to_python(batch)


def _on_worker_loop(coro: Any) -> None:
    from aiospark.runtime.worker_loop import new_event_loop

    loop = new_event_loop()
    try:
        loop.run_until_complete(coro)
    finally:
        loop.close()


def child(workload: str, n: int) -> None:
    gc.set_threshold(50_000, 10, 10)
    if workload == "bare":
        asyncio.run(_bare(n))
    elif workload in ("unordered", "ordered"):
        asyncio.run(_operator(n, workload == "ordered"))
    elif workload == "bare worker loop":
        _on_worker_loop(_bare(n))
    elif workload == "unordered worker loop":
        _on_worker_loop(_operator(n, False))
    elif workload in ("arrow to python", "python to arrow"):
        _conversions(n, workload == "python to arrow")
    elif workload == "batched runner":
        _spark_runner(n, batch_size=256)
    else:
        _spark_runner(n)


def count(python: str, src: str, workload: str, n: int) -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python,
                           os.path.abspath(__file__), "--child", workload, str(n)],
                          capture_output=True, text=True, env=env, timeout=3600)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{workload} ({n}) failed under callgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to count")
    parser.add_argument("--src", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                      "src"), help="the aiospark source tree to count")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated subset of: {', '.join(WORKLOADS)}")
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    print(f"command: python {' '.join(sys.argv)}")
    print(f"python {version}, src {args.src}, AIOSPARK_LOOP={os.environ.get('AIOSPARK_LOOP', 'auto')}\n")
    print("| workload | instructions per element |")
    print("|---|---:|")
    chosen = [w.strip() for w in args.workloads.split(",")]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}: choose from {', '.join(WORKLOADS)}")
    for workload in chosen:
        small, large = WORKLOADS[workload]
        per = (count(args.python, args.src, workload, large) - count(args.python, args.src, workload, small)) \
            / (large - small)
        print(f"| {workload} | {per:,.0f} |")


if __name__ == "__main__":
    main()
