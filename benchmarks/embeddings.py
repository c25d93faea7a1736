"""Embeddings of N rows through ``OpenAIEmbeddings``: batches of 64 texts per request against one
text per request, at the same capacity (calls in flight), side by side.

The endpoint is :mod:`tests.support.openai_server` in a separate process, answering after a fixed
service time per request plus a small cost per input (``--latency 0.02 --per-input 0.0002``: 20 ms
+ 0.2 ms per text, like a GPU server whose batch costs little more than one input). The rows go
through the core operator (``AsyncWaitOperator``, what every Spark task runs) in this process, so
the figures are one task's; Spark adds the same per-row costs to both variants. Prints one table,
with the command that produced it. Run:

    python benchmarks/embeddings.py --rows 100000
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiospark import AsyncWaitOperator  # noqa: E402
from aiospark.connectors.openai import OpenAIEmbeddings  # noqa: E402


def start_server(latency: float, per_input: float) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server", "--latency", str(latency),
                             "--per-input", str(per_input)], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                            text=True)
    port = int(proc.stdout.readline())  # type: ignore[union-attr]
    return proc, port


async def run(base_url: str, rows: int, batch_size: int, capacity: int) -> dict:
    fn = OpenAIEmbeddings("bench", base_url=base_url, batch_size=batch_size, batch_delay=0.005,
                          max_connections=capacity)
    done = 0

    def output(element) -> None:
        nonlocal done
        done += 1

    op = AsyncWaitOperator(fn, output, ordered=False, capacity=capacity, timeout=60)
    await op.open()
    cpu0, start = time.process_time(), time.perf_counter()
    try:
        for i in range(rows):
            await op.process_element({"id": i, "text": f"row {i} of the benchmark"})
        await op.finish()
        seconds = time.perf_counter() - start
        stats = fn.stats()
    finally:
        await op.close()
    assert done == rows, (done, rows)
    return {"seconds": seconds, "rows_s": rows / seconds, "requests": stats["source_calls"],
            "cpu_ms_per_row": (time.process_time() - cpu0) * 1000 / rows,
            "tokens": op.metrics.usage.get("prompt_tokens", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--capacity", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.02, help="server seconds per request")
    parser.add_argument("--per-input", type=float, default=0.0002, help="server seconds per text")
    args = parser.parse_args()
    proc, port = start_server(args.latency, args.per_input)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        results = [(f"batches of {args.batch_size}", asyncio.run(run(base_url, args.rows, args.batch_size, args.capacity))),
                   ("one row per request", asyncio.run(run(base_url, args.rows, 1, args.capacity)))]
    finally:
        proc.terminate()
        proc.wait(10)
    load = os.getloadavg()[0]
    print(f"`python benchmarks/embeddings.py --rows {args.rows} --capacity {args.capacity} "
          f"--batch-size {args.batch_size} --latency {args.latency} --per-input {args.per_input}` "
          f"(load average {load:.1f}, {os.cpu_count()} cores)\n")
    print("| variant | capacity | rows | requests | seconds | rows/s | client CPU ms/row | tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results:
        print(f"| {name} | {args.capacity} | {args.rows:,} | {r['requests']:,} | {r['seconds']:.1f} | "
              f"{r['rows_s']:,.0f} | {r['cpu_ms_per_row']:.3f} | {r['tokens']:,.0f} |")
    speedup = results[0][1]["rows_s"] / results[1][1]["rows_s"]
    print(f"\nbatching: {speedup:.1f}x the rows/s of one row per request")


if __name__ == "__main__":
    main()
