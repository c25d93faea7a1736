#!/usr/bin/env python3
"""OpenAI functions' requests/s on each ``client=``, against nginx answering the API on 127.0.0.1.

    python benchmarks/openai_transport.py                                # this tree, every client
    python benchmarks/openai_transport.py --rows 3000 --rounds 3 --base /tmp/base/src
                                                                         # and another tree's, side by side

nginx answers ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` with a fixed small
OpenAI-shaped body (one choice; one vector) far faster than a Python client asks, so the rate is
the client's: the connector's own work (limits, pacing, usage, JSON) plus its HTTP transport.

Each measurement is a fresh process running plain asyncio (no Spark): ``--rows`` rows through
``OpenAIChat.async_invoke`` (workload ``chat``) or ``OpenAIEmbeddings.async_invoke`` with
``batch_size=1`` (workload ``embeddings``: one request per row, through its batcher), ``--concurrency``
rows in flight, after a warm-up of 500 rows. ``--base DIR`` puts another checkout's ``src`` first on
``sys.path`` for the ``base`` rows (e.g. ``git archive <commit> src | tar -x -C /tmp/base``): its
clients are the ones it accepts (``aiohttp``, ``openai`` before the transport seam). The machine's
speed drifts, so every round runs each (tree, client) once, in a rotating order, and the table
shows medians and each one's ratio to the first row's median.

nginx is needed (``tests/support/nginx.py`` finds it).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHAT = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "bench",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}},
                  separators=(",", ":"))
EMBEDDINGS = json.dumps({"object": "list", "model": "bench",
                         "data": [{"object": "embedding", "index": 0, "embedding": [0.5] * 8}],
                         "usage": {"prompt_tokens": 3, "total_tokens": 3}}, separators=(",", ":"))

#: the OpenAI API's two paths on the test nginx (``tests/support/nginx.py``), answering fixed bodies
LOCATIONS = (f"location = /v1/chat/completions {{ return 200 '{CHAT}'; }}\n"
             f"location = /v1/embeddings {{ return 200 '{EMBEDDINGS}'; }}")


async def measure(workload: str, client: str, base_url: str, rows: int, concurrency: int) -> tuple[float, float]:
    """(rows/s, CPU µs per row) of ``rows`` rows, ``concurrency`` in flight, through one function of
    ``client``. The CPU time is the process's, every thread's (pyreqwest's Tokio thread included)."""
    from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings

    if workload == "chat":
        fn = OpenAIChat("bench", base_url=base_url, client=client, max_connections=concurrency)
    else:
        fn = OpenAIEmbeddings("bench", base_url=base_url, client=client, max_connections=concurrency,
                              batch_size=1, batch_delay=0.0)

    async def window(n: int, offset: int) -> tuple[float, float]:
        it = iter(range(offset, offset + n))

        async def worker() -> None:
            for i in it:
                await fn.async_invoke(f"question {i}")  # distinct texts: no coalescing

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6

    await fn.open()
    try:
        await window(min(rows, 500), 10**9)  # warm-up: the connection pool, imports, caches
        return await window(rows, 0)
    finally:
        await fn.close()


def child(args: argparse.Namespace) -> None:
    if args.src:
        sys.path.insert(0, args.src)
    import aiospark

    assert args.src is None or aiospark.__file__.startswith(args.src), aiospark.__file__
    got = asyncio.run(measure(args.workload, args.client, args.base_url, args.rows, args.concurrency))
    print(json.dumps(got), flush=True)
    os._exit(0)  # pyreqwest 0.15 can abort while the interpreter finalizes; the rate is out


def run_child(tree: str | None, workload: str, client: str, base_url: str,
              args: argparse.Namespace) -> list[float] | None:
    cmd = [sys.executable, __file__, "--child", "--workload", workload, "--client", client, "--base-url",
           base_url, "--rows", str(args.rows), "--concurrency", str(args.concurrency)]
    if tree:
        cmd += ["--src", tree]
    env = {k: v for k, v in os.environ.items() if k != "AIOSPARK_HTTP_TRANSPORT"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode:
        print(f"  {workload} {client} ({tree or 'this tree'}): failed: {p.stderr.strip().splitlines()[-3:]}",
              file=sys.stderr)
        return None
    return list(json.loads(p.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default="chat,embeddings")
    parser.add_argument("--clients", default="auto,pyreqwest,aiohttp,openai",
                        help="this tree's clients ('auto' resolves as on a worker)")
    parser.add_argument("--base", help="another checkout's src directory, measured beside this one")
    parser.add_argument("--base-clients", default="aiohttp,openai")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    variants = [("base", args.base, c) for c in args.base_clients.split(",")] if args.base else []
    variants += [("this", os.path.join(ROOT, "src"), c) for c in args.clients.split(",")]
    sys.path.insert(0, ROOT)
    from tests.support.nginx import NginxServer, nginx_binary

    if not nginx_binary():
        sys.exit("nginx is not installed (apt-get install nginx-light, or set $NGINX)")
    with NginxServer(locations=LOCATIONS) as nginx:
        base_url = nginx.url("/v1")
        results: dict[tuple, list[list[float]]] = {}
        for workload in args.workloads.split(","):
            for r in range(args.rounds):
                shift = r % len(variants)
                for tree_name, tree, client in variants[shift:] + variants[:shift]:
                    got = run_child(tree, workload, client, base_url, args)
                    if got is not None:
                        results.setdefault((workload, tree_name, client), []).append(got)
                        print(f"  {workload:<10} {tree_name:<4} {client:<9} round {r + 1}: {got[0]:8.0f} rows/s "
                              f"{got[1]:6.0f} CPU µs/row", flush=True)

    print(f"\n{args.rows} rows, {args.concurrency} in flight, one process, asyncio's loop; medians of "
          f"{args.rounds} rounds: rows/s (wall) and the process's CPU µs per row (all threads: steadier than "
          "the wall time on a loaded machine), each with its ratio to the first row of its workload")
    print(f"{'workload':<11} {'tree':<5} {'client':<10} {'rows/s':>8} {'ratio':>6} {'CPU µs':>7} {'ratio':>6}"
          "  rows/s of each round")
    for workload in args.workloads.split(","):
        first: tuple[float, float] | None = None
        for tree_name, _, client in variants:
            got = results.get((workload, tree_name, client))
            if not got:
                continue
            rate, cpu = statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)
            first = first or (rate, cpu)
            print(f"{workload:<11} {tree_name:<5} {client:<10} {rate:>8.0f} {rate / first[0]:>6.2f} {cpu:>7.0f} "
                  f"{cpu / first[1]:>6.2f}  " + " ".join(f"{g[0]:.0f}" for g in got))
    print("\ncommand: python benchmarks/openai_transport.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
