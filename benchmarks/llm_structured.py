"""Structured chat over N rows against a rate-limited endpoint: aiospark against the per-partition
``asyncio.gather`` people write today (openaivec-style), side by side, in one Spark session.

The endpoint is the demo one (``python -m aiospark.app.demo_service --openai``, in a process of its
own) with ``--latency-ms 50`` and a request limit it advertises in OpenAI's ``x-ratelimit-*``
headers and enforces with 429 + ``Retry-After`` (``--rps``: a bucket of that many requests,
refilled at that rate). Every row asks for structured output
(``response_format`` ``json_schema`` of ``label STRING, score INT, tags ARRAY<STRING>``):

* **aiospark** -- ``OpenAIChat(..., response_format=DDL)`` through ``unordered_wait`` (``capacity``
  calls in flight per task, ``default_retry(retries)``: 429s retried no sooner than their
  ``Retry-After``; the connector paces itself by the endpoint's headers where that is built in).
* **gather** -- ``mapInArrow`` whose function runs, per Arrow batch, ``asyncio.gather`` over the
  batch's rows under an ``asyncio.Semaphore(capacity)`` with one plain ``aiohttp`` session per
  partition; a 429 is retried up to ``retries`` times with openaivec's transport retry policy (full
  jitter: a delay drawn from ``[0, d)``, ``d`` from 0.5 s doubling to 8 s; ``Retry-After`` not read).
  The JSON answer is parsed into the same STRUCT column.

Both write to Spark's ``noop`` sink over ``local[2]`` (two tasks). The 429 share is the endpoint's
count of refused requests over all requests it received during that side's run. Run:

    python benchmarks/llm_structured.py --rows 100000          # --rows 5000 for a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ["PYSPARK_PYTHON"] = sys.executable  # workers run this interpreter (see NOTES: pyarrow)

DDL = "label STRING, score INT, tags ARRAY<STRING>"


def gather_side(df, base_url: str, capacity: int, retries: int):
    """The openaivec-style job: one ``asyncio.gather`` per Arrow batch, a semaphore per partition."""
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from aiospark.connectors.openai.schema import json_schema as to_json_schema
    from aiospark.connectors.openai.schema import response_struct  # the same strict schema as aiospark's

    struct, _ = response_struct(DDL)
    out_schema = StructType(df.schema.fields + [StructType.fromDDL(f"answer STRUCT<{DDL}>").fields[0]])
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": to_json_schema(struct),
                                                   "strict": True}}

    def run_partition(batches):
        import asyncio
        import random

        import aiohttp

        loop = asyncio.new_event_loop()
        session = None

        async def one(sem, text):
            async with sem:
                delay = 0.5
                for attempt in range(retries + 1):
                    body = {"model": "demo", "messages": [{"role": "user", "content": text}], "response_format": fmt}
                    async with session.post(base_url + "/chat/completions", json=body) as resp:
                        data = await resp.read()
                        if resp.status == 429 and attempt < retries:
                            await asyncio.sleep(random.uniform(0, delay))
                            delay = min(8.0, delay * 2)
                            continue
                        if resp.status != 200:
                            raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
                        return json.loads(json.loads(data)["choices"][0]["message"]["content"])
            raise AssertionError("unreachable")

        async def batch_answers(texts):
            nonlocal session
            if session is None:
                session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=capacity))
            sem = asyncio.Semaphore(capacity)
            return await asyncio.gather(*(one(sem, t) for t in texts))

        try:
            for batch in batches:
                answers = loop.run_until_complete(batch_answers(batch.column("text").to_pylist()))
                arrays = list(batch.columns) + [pa.array(answers, type=pa.struct([
                    ("label", pa.string()), ("score", pa.int32()), ("tags", pa.list_(pa.string()))]))]
                yield pa.RecordBatch.from_arrays(arrays, names=batch.schema.names + ["answer"])
        finally:
            if session is not None:
                loop.run_until_complete(session.close())
            loop.close()

    return df.mapInArrow(run_partition, out_schema)


def aiospark_side(df, base_url: str, capacity: int, retries: int):
    import aiospark
    from aiospark.connectors.openai import OpenAIChat, default_retry

    chat = OpenAIChat("demo", base_url=base_url, input="text", response_format=DDL, max_connections=capacity)
    return aiospark.unordered_wait(df, chat, chat.output_schema(df), capacity=capacity, timeout=120,
                                   retry=default_retry(retries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rps", type=float, default=300.0, help="the endpoint's advertised request limit")
    parser.add_argument("--capacity", type=int, default=64, help="calls in flight per task (both sides)")
    parser.add_argument("--retries", type=int, default=12, help="429 retries per row (both sides)")
    parser.add_argument("--sides", default="aiospark,gather")
    parser.add_argument("--rounds", type=int, default=1, help="runs per side, the order alternating")
    args = parser.parse_args()

    import aiospark
    from aiospark.app.demo_openai import DemoOpenAI

    spark = aiospark.local_session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, args.rows, 1, 2).selectExpr("id", "concat('review number ', id) AS text")
    warm = spark.range(0, 400, 1, 2).selectExpr("id", "concat('warm-up ', id) AS text")
    sides = {"aiospark": aiospark_side, "gather": gather_side}
    order = args.sides.split(",")
    results = []
    for round_ in range(args.rounds):
        for name in order if round_ % 2 == 0 else order[::-1]:  # alternate: neither side always goes first
            # a fresh endpoint per run; a warm-up (workers started, imports done) then a full bucket
            with DemoOpenAI(latency_ms=args.latency_ms, rps=args.rps) as endpoint:
                sides[name](warm, endpoint.base_url, args.capacity, args.retries).write.format("noop") \
                    .mode("overwrite").save()
                time.sleep(2.0)  # the bucket (--rps requests) refills within 1 s
                before = endpoint.stats()
                out = sides[name](df, endpoint.base_url, args.capacity, args.retries)
                start = time.perf_counter()
                failed = ""
                try:
                    out.write.format("noop").mode("overwrite").save()
                except Exception as exc:  # a side whose job dies (a row out of retries) is a result too
                    failed = next((line.strip() for line in str(exc).splitlines()
                                   if "Error" in line and "Traceback" not in line), type(exc).__name__)[:160]
                seconds = time.perf_counter() - start
                after = endpoint.stats()
            answered = after["answered"] - before["answered"]
            refused = after["rate_limited"] - before["rate_limited"]
            sent = answered + refused
            results.append((name, seconds, args.rows / seconds, answered, refused, refused / sent if sent else 0.0,
                            failed))
    bound = min(args.rps, 2 * args.capacity / (args.latency_ms / 1000))
    print(f"\ncommand: python benchmarks/llm_structured.py {' '.join(sys.argv[1:])}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"endpoint {args.latency_ms:g} ms, --rps {args.rps:g}; bound {bound:g} rows/s")
    print("| side | rows | seconds | rows/s | of bound | answered | 429s | 429 share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, seconds, rate, answered, refused, share, failed in results:
        shown = f"{rate:.0f} | {rate / bound:.2f}" if not failed else "job failed | -"
        print(f"| {name} | {args.rows} | {seconds:.1f} | {shown} | {answered} | {refused} | {share:.1%} |")
    for name, *_, failed in results:
        if failed:
            print(f"{name} failed: {failed}")
    spark.stop()


if __name__ == "__main__":
    main()
