"""The ``aiospark`` command: ``aiospark demo`` (the main job) and friends."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiospark", description="Flink-style Async I/O for PySpark.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="enrich 100k rows from a local HTTP service, vs a blocking UDF")
    demo.add_argument("--rows", type=_positive_int, default=100_000)
    demo.add_argument("--sample", type=_positive_int, default=400, help="rows for the blocking-UDF baseline")
    demo.add_argument("--latency", type=_seconds, default=0.03, help="service latency in seconds")
    demo.add_argument("--jitter", type=_seconds, default=0.01, help="+/- seconds around the latency")
    demo.add_argument("--capacity", type=_positive_int, default=200, help="calls in flight per task")
    demo.add_argument("--tasks", type=_positive_int, default=2, help="local Spark cores/partitions")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from .spark.session import use_this_python

    use_this_python()
    if args.command == "demo":
        if args.jitter >= args.latency and args.latency > 0:
            print("aiospark demo: --jitter must be smaller than --latency", file=sys.stderr)
            return 2
        from .demo import run_demo

        run_demo(rows=args.rows, sample=args.sample, latency=args.latency, jitter=args.jitter,
                 capacity=args.capacity, tasks=args.tasks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
