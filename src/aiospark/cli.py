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
    enrich = commands.add_parser("enrich", help="enrich every row of a dataset from an HTTP endpoint")
    enrich.add_argument("input", help="input dataset (Parquet, CSV or JSON file or directory)")
    enrich.add_argument("output", help="where to write the enriched dataset")
    enrich.add_argument("--url", required=True,
                        help="URL template with input columns as placeholders, e.g. http://127.0.0.1:8080/item/{id}")
    enrich.add_argument("--schema", required=True,
                        help="Spark DDL of the response fields to add, e.g. 'name STRING, price DOUBLE'")
    enrich.add_argument("--concurrency", type=_positive_int, default=100, help="calls in flight per task")
    enrich.add_argument("--timeout", type=_seconds, default=30.0, help="seconds per row, retries included")
    enrich.add_argument("--retries", type=int, default=3, help="retries after the first call (5xx, 429, network)")
    enrich.add_argument("--ordered", action="store_true", help="keep each partition's row order")
    enrich.add_argument("--how", choices=("left", "inner"), default="left",
                        help="left keeps rows the endpoint has no data for (404)")
    enrich.add_argument("--input-format", choices=("parquet", "csv", "json"))
    enrich.add_argument("--output-format", choices=("parquet", "csv", "json"))
    enrich.add_argument("--mode", choices=("error", "overwrite", "append", "ignore"), default="error",
                        help="what to do when the output exists")
    enrich.add_argument("--cache-rows", type=int, default=0, help="per-worker cache of responses (0 = off)")
    enrich.add_argument("--master", help="Spark master (default local[*]; under spark-submit, spark-submit's)")
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
    elif args.command == "enrich":
        if args.retries < 0:
            print("aiospark enrich: --retries must be >= 0", file=sys.stderr)
            return 2
        from .enrich import run_enrich

        try:
            run_enrich(args.input, args.output, url=args.url, schema=args.schema, concurrency=args.concurrency,
                       timeout=args.timeout, retries=args.retries, ordered=args.ordered, how=args.how,
                       input_format=args.input_format, output_format=args.output_format, mode=args.mode,
                       cache_rows=args.cache_rows, master=args.master)
        except (ValueError, TypeError) as exc:
            print(f"aiospark enrich: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
