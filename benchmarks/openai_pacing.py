"""Pacing by the endpoint's ``x-ratelimit-*`` headers, through Spark: the issue-28 target.

A Spark job of N chat rows (``OpenAIChat``, 2 tasks, ``capacity`` calls in flight per task,
``retry=default_retry()``) against :mod:`tests.support.openai_server` enforcing a token bucket of
``--rate`` requests per second, refilled continuously, which it advertises in OpenAI's headers
(``x-ratelimit-limit-requests`` / ``-remaining-requests`` / ``-reset-requests``). Each row runs
with pacing on (the default) and off (``pace_by_headers=False``), and the table shows the requests
the server refused with 429 (share of all it got) and the rate it served between its first and
last accepted request, against the advertised rate.

Target: paced, <= 5 % refused and >= 0.80 of the advertised rate served. Run:

    python benchmarks/openai_pacing.py --rows 1000 --rate 50 --capacity 64 --rounds 2
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiospark  # noqa: E402
from aiospark.connectors.openai import OpenAIChat, default_retry  # noqa: E402
from tests.support.openai_server import OpenAIServer, answer  # noqa: E402


def one_run(spark, rows: int, rate: float, capacity: int, pace: bool, latency: float) -> dict:
    with OpenAIServer(rate_limit=rate, latency=latency) as srv:
        df = spark.createDataFrame([(i, f"question {i}") for i in range(rows)], "id INT, prompt STRING")
        df = df.repartition(2).cache()
        df.count()
        chat = OpenAIChat("bench", base_url=srv.base_url)
        chat.pace_by_headers = pace
        out = aiospark.unordered_wait(df, chat, chat.output_schema(df), capacity=capacity,
                                      retry=default_retry(30))
        start = time.perf_counter()
        got = out.collect()
        wall = time.perf_counter() - start
        assert len(got) == rows and all(r.answer == answer(r.prompt) for r in got)
        served = sorted(s["time"] for s in srv.seen)
        total = len(served) + srv.refused
        span = served[-1] - served[0]
        return {"pace": "on" if pace else "off", "requests": total, "refused": srv.refused,
                "share": srv.refused / total, "served_rate": (len(served) - 1) / span,
                "ratio": (len(served) - 1) / span / rate, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0, help="the bucket: requests per second")
    parser.add_argument("--capacity", type=int, default=64, help="calls in flight per task")
    parser.add_argument("--latency", type=float, default=0.0, help="the server's seconds per request")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-off", action="store_true", help="skip the runs with pacing off")
    args = parser.parse_args()
    spark = aiospark.local_session("local[2]")
    results = []
    try:
        for _ in range(args.rounds):
            for pace in (True,) if args.no_off else (True, False):
                results.append(one_run(spark, args.rows, args.rate, args.capacity, pace, args.latency))
    finally:
        spark.stop()
    print(f"\n{args.rows} chat rows, 2 tasks x capacity {args.capacity}, bucket {args.rate:g} req/s "
          f"(latency {args.latency:g} s)")
    print(f"{'pacing':>7} {'requests':>9} {'429s':>6} {'429 %':>6} {'served/s':>9} {'of rate':>8} {'wall s':>7}")
    for r in results:
        print(f"{r['pace']:>7} {r['requests']:>9} {r['refused']:>6} {100 * r['share']:>5.1f}% "
              f"{r['served_rate']:>9.1f} {r['ratio']:>8.2f} {r['wall']:>7.1f}")
    print("\ncommand: python benchmarks/openai_pacing.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
