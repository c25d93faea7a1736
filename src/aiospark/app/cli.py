"""The ``aiospark`` command: ``aiospark demo``, ``aiospark enrich``, ``aiospark journal`` and ``aiospark batch``.

Errors are short: one or two lines saying what failed and what to change, exit code 2 for a bad
argument or input (found before Spark starts), 1 for a job that failed, 3 for a job that wrote its
output with failed rows in it (``--on-error row``). Spark's own console output (JVM logs, stack
traces) goes to a log file whose path the error names; ``--verbose`` shows it all. No line the
command prints holds a credential of ``--url`` or of the ``--header-*``/``--auth-token-*`` options.

Example::

    aiospark enrich in.csv out.parquet --url 'http://127.0.0.1:8080/item/{id}' --schema 'name STRING'
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from typing import Any, TextIO

from .. import __version__
from .arguments import budget, count, positive_int, rate, seconds
from .cli_errors import short_error


class _HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default where it says something: not for required options, flags that are
    off, options without one, or help that already speaks of its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (action.required or default is None or default is False or default == argparse.SUPPRESS
                or "default" in text or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose subcommand reports its own unknown options, with its own usage
    (argparse leaves them to the top-level parser, which shows the top-level usage)."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(parsed, "command", None)
            commands = getattr(self, "commands", {})
            (commands.get(command) or self).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``--help`` shows every default).

    Example::

        build_parser().parse_args(["demo", "--rows", "1000"]).rows   # 1000
    """
    fmt = _HelpFormatter
    parser = _Parser(prog="aiospark", description="Flink-style Async I/O for PySpark.", formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"aiospark {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=argparse.ArgumentParser)
    parser.commands = commands.choices  # type: ignore[attr-defined]  # read by _Parser.parse_args
    demo = commands.add_parser("demo", help="enrich 100k rows from a local HTTP service, vs a blocking UDF",
                               formatter_class=fmt)
    demo.add_argument("--rows", type=positive_int, default=100_000, help="rows to enrich")
    demo.add_argument("--sample", type=positive_int, default=400, help="rows for the blocking-UDF baseline")
    demo.add_argument("--latency", type=seconds, default=0.03, help="service latency in seconds")
    demo.add_argument("--jitter", type=seconds, default=0.01, help="+/- seconds around the latency")
    demo.add_argument("--capacity", type=positive_int, default=200, help="calls in flight per task")
    demo.add_argument("--tasks", type=positive_int, default=2, help="local Spark cores/partitions")
    enrich = commands.add_parser(
        "enrich", help="enrich every row of a dataset from an HTTP endpoint", formatter_class=fmt,
        description="Look every row up at --url and write the input columns plus the --schema columns of the "
                    "response. OUTPUT appears only when the job succeeded.")
    enrich.add_argument("input", help="input dataset: a Parquet, CSV (with a header) or JSON Lines file or directory")
    enrich.add_argument("output", help="where to write the enriched dataset (must not exist, unless --overwrite)")
    enrich.add_argument("--url", required=True,
                        help="URL template with input columns as placeholders, e.g. http://127.0.0.1:8080/item/{id}")
    enrich.add_argument("--schema", required=True,
                        help="Spark DDL of the response fields to add, e.g. 'name STRING, price DOUBLE'")
    enrich.add_argument("--concurrency", type=positive_int, default=100, help="calls in flight per task")
    enrich.add_argument("--timeout", type=seconds, default=30.0,
                        help="seconds per row, retries included; no request outlives it")
    enrich.add_argument("--retries", type=count, default=3, help="retries after the first call (5xx, 429, network)")
    enrich.add_argument("--ordered", action="store_true", help="keep each partition's row order")
    enrich.add_argument("--how", choices=("left", "inner"), default="left",
                        help="left keeps rows the endpoint has no data for (404), with NULL columns")
    enrich.add_argument("--on-error", choices=("fail", "row"), default="fail",
                        help="fail: a row that fails after its retries, or a malformed CSV/JSON input line, "
                             "fails the job (a malformed line before any call, named); row: write it with its "
                             "error in column _error, go on, and exit with code 3 when any row failed")
    enrich.add_argument("--format", "--input-format", dest="input_format", choices=("parquet", "csv", "json"),
                        help="input format (default: from the input's name)")
    enrich.add_argument("--output-format", choices=("parquet", "csv", "json"),
                        help="output format (default: from OUTPUT's extension, else the input's)")
    enrich.add_argument("--multiline", action="store_true",
                        help="CSV records may span lines (a quoted field holding a line break), as Spark's "
                             "multiLine option reads them")
    enrich.add_argument("--overwrite", action="store_true",
                        help="replace an existing OUTPUT (only once the new one is complete)")
    enrich.add_argument("--allow-empty-columns", action="store_true",
                        help="accept a --schema column that is NULL in every response (else the job fails)")
    enrich.add_argument("--cache-rows", type=count, default=0, help="per-worker cache of responses (0 = off)")
    enrich.add_argument("--input-schema", metavar="DDL",
                        help="the input's columns and types, e.g. 'id STRING, qty INT' (default: CSV columns are "
                             "strings, JSON numbers with a fraction or exponent their text: values are sent and "
                             "written as written)")
    enrich.add_argument("--header-env", action="append", metavar="NAME=ENV",
                        help="send header NAME with the value of environment variable ENV (repeatable)")
    enrich.add_argument("--header-file", action="append", metavar="NAME=PATH",
                        help="send header NAME with the value in file PATH (repeatable)")
    enrich.add_argument("--auth-token-env", metavar="ENV",
                        help="send 'Authorization: Bearer <token>' with the token in environment variable ENV")
    enrich.add_argument("--auth-token-file", metavar="PATH",
                        help="send 'Authorization: Bearer <token>' with the token in file PATH")
    enrich.add_argument("--journal", metavar="LOCATION",
                        help="record each row's outcome in a journal (a directory, or a redis:// URL): a rerun "
                             "calls only the rows not recorded yet")
    enrich.add_argument("--budget", type=budget, metavar="N",
                        help="start at most N calls in the whole job (retries included); rows beyond it fail")
    enrich.add_argument("--rate-limit", type=rate, metavar="R/s",
                        help="at most R calls per second in each running Spark task (R/s, R/min or R/h; N tasks at once: N x R)")
    enrich.add_argument("--dry-run", action="store_true",
                        help="print what the run would call (rows, NULL keys, distinct keys, outcomes already in "
                             "--journal, calls left), computed by Spark; call and write nothing")
    enrich.add_argument("--master", help="Spark master (default local[*]; under spark-submit, spark-submit's)")
    enrich.add_argument("--verbose", action="store_true", help="show Spark's logs and full stack traces")
    from .journal_cli import add_parser as add_journal

    add_journal(commands, fmt)
    from .batch_cli import add_parser as add_batch

    add_batch(commands, fmt)
    return parser


class _SparkConsole:
    """Sends this process's file descriptors 1 and 2 -- which the JVM Spark starts inherits -- to a
    log file, while ``sys.stdout``/``sys.stderr`` keep writing to the terminal."""

    def __init__(self) -> None:
        handle, self.path = tempfile.mkstemp(prefix="aiospark-enrich-", suffix=".log")
        os.close(handle)
        self._saved: list[int] = []
        self._streams: list[TextIO] = []

    def __enter__(self) -> _SparkConsole:
        sys.stdout.flush()
        sys.stderr.flush()
        log = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            self._saved.append(os.dup(fd))
            stream = open(os.dup(self._saved[-1]), "w", buffering=1, encoding="utf-8")
            self._streams.append(getattr(sys, name))
            setattr(sys, name, stream)
            os.dup2(log, fd)
        os.close(log)
        # py4j reports some failures with logging.exception on the root logger, which would set up a
        # handler writing to the terminal: they go to the log file with Spark's own output
        self._handler = logging.FileHandler(self.path, encoding="utf-8")
        logging.getLogger().addHandler(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self._handler)
        self._handler.close()
        for fd, name, saved, previous in zip((1, 2), ("stdout", "stderr"), self._saved, self._streams):
            getattr(sys, name).flush()
            os.dup2(saved, fd)
            os.close(saved)
            getattr(sys, name).close()
            setattr(sys, name, previous)


#: the exit code of a run that wrote its output with failed rows in it (``--on-error row``)
ROWS_FAILED = 3
#: the exit code of a run stopped by Ctrl-C (SIGINT), as shells report 128 + SIGINT
INTERRUPTED = 130


def _enrich_extras(args: argparse.Namespace) -> dict[str, Any]:
    """The options made into objects (credentials read, journal/budget/rate limit built): before
    Spark starts, each refused with what to change."""
    from .enrich_checks import EnrichError
    from .enrich_request import credentials

    headers, token = credentials(args.header_env or [], args.header_file or [], args.auth_token_env,
                                 args.auth_token_file)
    extras: dict[str, Any] = dict(headers=headers, auth_token=token, input_schema=args.input_schema)
    try:
        if args.journal is not None:
            from .. import Journal
            from .enrich_output import check_journal

            check_journal(args.journal, args.input, args.output)
            extras["journal"] = Journal(args.journal)
        if args.budget is not None:
            from .. import Budget

            extras["budget"] = Budget(args.budget)
        if args.rate_limit is not None:
            from .. import RateLimit

            extras["rate_limit"] = RateLimit(args.rate_limit[0], per=args.rate_limit[1])
    except (TypeError, ValueError) as exc:
        raise EnrichError(str(exc)) from None
    return extras


def _run_enrich(args: argparse.Namespace) -> int:
    from .enrich_request import Scrubber, url_secrets

    scrub = Scrubber(url_secrets(args.url))

    def say(text: str, stream: TextIO) -> None:
        print(scrub(str(text)), file=stream)

    try:
        return _enrich(args, scrub, say)
    except KeyboardInterrupt:  # before Spark started (or a second Ctrl-C): nothing was written
        say(f"aiospark enrich: interrupted; nothing was written to {args.output}", sys.stderr)
        return INTERRUPTED
    except Exception as exc:  # never a traceback with a credential in it
        if args.verbose:
            raise
        say(f"aiospark enrich: failed: {short_error(exc)}", sys.stderr)
        return 1


def _enrich(args: argparse.Namespace, scrub: Any, say: Any) -> int:
    from .enrich import EnrichError, run_enrich
    from .enrich_checks import check_enrich

    options = dict(url=args.url, schema=args.schema, concurrency=args.concurrency, timeout=args.timeout,
                   retries=args.retries, ordered=args.ordered, how=args.how, input_format=args.input_format,
                   output_format=args.output_format, overwrite=args.overwrite, on_error=args.on_error,
                   allow_empty_columns=args.allow_empty_columns, cache_rows=args.cache_rows, master=args.master,
                   multiline=args.multiline, dry_run=args.dry_run)
    try:  # everything that can be checked without Spark, before Spark starts
        extras = _enrich_extras(args)
        scrub.add(*extras["headers"].values(), *([extras["auth_token"]] if extras["auth_token"] else []))
        plan = check_enrich(args.input, args.output, url=args.url, schema=args.schema, on_error=args.on_error,
                     overwrite=args.overwrite, input_format=args.input_format, output_format=args.output_format,
                     concurrency=args.concurrency, timeout=args.timeout, input_schema=args.input_schema,
                     headers=extras["headers"], auth_token=extras["auth_token"])
        if args.multiline and plan.in_format != "csv":
            raise EnrichError(f"--multiline is for CSV input; {args.input} is read as {plan.in_format}")
    except EnrichError as exc:
        say(f"aiospark enrich: {exc}", sys.stderr)
        return 2
    options.update(extras)
    console = None if args.verbose or os.environ.get("PYSPARK_GATEWAY_PORT") else _SparkConsole()

    def run() -> dict[str, Any]:
        from .enrich import spark_session
        from .interrupt import interruptible

        spark = spark_session(args.master)
        try:
            with interruptible(spark):
                return run_enrich(args.input, args.output, out=lambda line: say(line, sys.stdout),
                                  warn=lambda line: say(line, sys.stderr), **options)
        except KeyboardInterrupt:
            spark.stop()  # its jobs are cancelled; stopped here, its last logs still go to the log file
            raise

    try:
        if console is None:
            result = run()
        else:
            with console:
                result = run()
    except KeyboardInterrupt:
        if console is not None:
            os.unlink(console.path)
        journal = (f"rows recorded in the journal {args.journal} are not called again on a rerun"
                   if args.journal else "pass --journal LOCATION so that a rerun does not call again the rows done")
        say(f"aiospark enrich: interrupted; nothing was written to {args.output}; {journal}", sys.stderr)
        return INTERRUPTED
    except EnrichError as exc:  # the message says what to change: Spark's log is not needed
        if console is not None:
            os.unlink(console.path)
        say(f"aiospark enrich: {exc}", sys.stderr)
        return 2
    except Exception as exc:
        if args.verbose:
            raise
        message = short_error(exc)
        say(f"aiospark enrich: failed: {message}", sys.stderr)
        failed_row = args.on_error == "fail" and "AsyncFunctionError" in message
        hint = "; --on-error row writes failed rows with their error instead" if failed_row else ""
        where = f"; Spark's log: {console.path}" if console is not None else ""
        say(f"  nothing was written to {args.output} (rerun with --verbose for the full trace{where}{hint})",
            sys.stderr)
        return 1
    if console is not None:
        os.unlink(console.path)
    if result["error_rows"]:
        say(f"aiospark enrich: {result['error_rows']:,} rows failed (exit code {ROWS_FAILED}); "
            f"{args.output} holds them with their error in column _error", sys.stderr)
        return ROWS_FAILED
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``aiospark`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "journal":  # no Spark needed
        from .journal_cli import run

        return run(args)
    if args.command == "batch":  # no Spark needed
        from .batch_cli import run as run_batch

        return run_batch(args)
    from ..spark.session import use_this_python

    use_this_python()
    if args.command == "demo":
        if args.jitter >= args.latency and args.latency > 0:
            print("aiospark demo: --jitter must be smaller than --latency", file=sys.stderr)
            return 2
        from .demo import run_demo

        run_demo(rows=args.rows, sample=args.sample, latency=args.latency, jitter=args.jitter,
                 capacity=args.capacity, tasks=args.tasks)
        return 0
    return _run_enrich(args)


if __name__ == "__main__":
    sys.exit(main())
