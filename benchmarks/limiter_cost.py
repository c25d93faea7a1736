"""CPU cost per call of the pacing parts every attempt passes through (one core, no loop).

Run:  python benchmarks/limiter_cost.py [--calls N] [--repeat R]

``TokenBucket.reserve()`` runs once per attempt under ``rate_limit=``; ``AdaptiveConcurrency
.on_success()`` once per finished call under ``max_concurrency="auto"``. Each is timed in CPU time
(``time.process_time``), best of R rounds, so other processes on the machine do not count. Target:
under 3 µs per call, a small fraction of the operator's own cost per element
(``benchmarks/core_overhead.py``).
"""
from __future__ import annotations

import argparse
import platform
import time

from aiospark.core.adaptive import AdaptiveConcurrency
from aiospark.core.token_bucket import TokenBucket

TARGET_US = 3.0


def best_cpu_seconds_per_call(step, calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(calls):
            step()
        best = min(best, (time.process_time() - t0) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    bucket = TokenBucket(1e9, 10)           # never limits: the cost is the bookkeeping alone
    adaptive = AdaptiveConcurrency(10_000, initial=100)
    rows = [
        ("TokenBucket.reserve()", best_cpu_seconds_per_call(bucket.reserve, args.calls, args.repeat)),
        ("AdaptiveConcurrency.on_success()",
         best_cpu_seconds_per_call(lambda: adaptive.on_success(0.010, 100), args.calls, args.repeat)),
    ]
    print(f"python {platform.python_version()}, {args.calls} calls, best of {args.repeat}\n")
    print("| part | µs per call (CPU) | target | |")
    print("|---|---|---|---|")
    for name, seconds in rows:
        us = seconds * 1e6
        print(f"| {name} | {us:.2f} | < {TARGET_US:.0f} | {'PASS' if us < TARGET_US else 'MISS'} |")


if __name__ == "__main__":
    main()
