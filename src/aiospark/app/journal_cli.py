"""``aiospark journal LOCATION [--drop-errors] [--compact]``: what a journal holds, dropping its errors, compacting it.

Prints what identifies the journal (entry point, function, code hash, output schema, key), its
size, its layout (a directory: its buckets, and how many segments are bucket segments, killed
tasks' parts, or folders of versions before buckets; Redis: one key per outcome), its outcomes
(results and kept errors, each identity counted once as a task reads it, with the first few error
texts). ``--drop-errors`` removes the kept errors so that a rerun calls only the rows that failed;
``--compact`` rewrites a directory journal written by many runs as one segment per bucket and one
table file per partition, every outcome kept (with ``--drop-errors``: without the kept errors, in the same pass); a Redis journal
has nothing to compact, and says so (exit 0). How, and why it is safe for readers:
:mod:`aiospark.journal.summary`. A location with no journal, a file, a Redis that refuses, or a
segment a running task still writes (for ``--drop-errors`` and ``--compact``) is one line on stderr
and exit code 2.

Example::

    $ aiospark journal /data/journals/enrich-v1
    journal /data/journals/enrich-v1 (directory)
      written by  unordered_wait tests.chaos.ServiceCall (code 3f2a9c...)
      schema      id LONG, key STRING, value LONG, name STRING
      key         id (bigint)
      size        41,322 bytes in 3 segments
      layout      2 buckets: 2 bucket segments in 2 buckets, 1 part; --compact makes it one segment per bucket
      outcomes    700: 600 results, 100 errors
      errors      [7] ValueError: row 7 is refused
                  ...
"""
from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ..journal.summary import QUIET_SECONDS, SAMPLES, Compaction, JournalSummary
from .arguments import count, seconds


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser],
               formatter: type) -> argparse.ArgumentParser:
    """The ``journal`` sub-command of ``aiospark``."""
    parser = commands.add_parser(
        "journal", help="show a journal's size, layout, outcomes and errors; --drop-errors so a rerun retries them; "
                        "--compact to make it one segment per bucket",
        formatter_class=formatter,  # type: ignore[arg-type]
        description="Show what a journal (aiospark.Journal) holds: what wrote it, its size, its layout, its outcomes "
                    "and kept errors (each row counted once, as a rerun reads it). --drop-errors removes the kept "
                    "errors, so that a rerun calls only the rows that failed. --compact rewrites a directory "
                    "journal written by many runs as one segment per bucket and one table file per partition, "
                    "every outcome kept.")
    parser.add_argument("location", help="the journal: a directory (path, file://, s3://, ...) or a redis:// URL "
                                         "(with ?prefix= if the job used one)")
    parser.add_argument("--drop-errors", action="store_true",
                        help="remove the recorded errors; a directory segment a running task still writes (it "
                             "holds a lease) refuses it")
    parser.add_argument("--compact", action="store_true",
                        help="rewrite a directory journal as one segment per bucket (its runs' segments, killed "
                             "tasks' parts and folders of versions before buckets) and one table file per "
                             "partition (runs written in the last minute are left), every outcome kept; with "
                             "--drop-errors, without the kept errors; a segment a running task still writes "
                             "refuses it; a Redis journal has nothing to compact")
    parser.add_argument("--errors", type=count, default=SAMPLES, help="error texts to show")
    parser.add_argument("--quiet", type=seconds, default=QUIET_SECONDS,
                        help="--drop-errors and --compact also refuse a directory segment changed less than this "
                             "many seconds ago (for journals written by versions that take no lease)")
    return parser


def describe(summary: JournalSummary) -> list[str]:
    """The lines ``aiospark journal`` prints for ``summary``.

    Example::

        describe(summarize("/tmp/j"))[0]   # 'journal /tmp/j (directory)'
    """
    m = summary.manifest
    key = ", ".join(f"{c} ({t})" for c, t in zip(m.key, m.key_types)) if m.key_types else ", ".join(m.key)
    if summary.segments is None:
        where = " (keys and values)"
    else:
        files = [_n(summary.segments, "segment")] if summary.segments or not summary.table_files else []
        files += [_n(summary.table_files, "table file")] if summary.table_files else []
        where = f" in {' and '.join(files)}"
    lines = [f"journal {summary.location} ({summary.store})",
             f"  written by  {m.entry_point} {m.function} (code {m.code})",
             f"  schema      {m.output_schema}",
             f"  key         {key or '(every input column)'}",
             f"  size        {summary.bytes:,} bytes{where}",
             f"  layout      {layout(summary)}",
             f"  outcomes    {summary.rows:,}: {summary.results:,} results, {summary.errors:,} errors"]
    if summary.skipped:
        lines.append(f"  skipped     {summary.skipped:,} rows with a bad checksum (called again on a rerun)")
    for i, (identity, text) in enumerate(summary.error_samples):
        shown = text if len(text) <= 200 else text[:197] + "..."
        lines.append(f"  {'errors' if i == 0 else '':<10}  {identity} {shown}")
    if summary.errors > len(summary.error_samples) and summary.error_samples:
        lines.append(f"              ... {summary.errors - len(summary.error_samples):,} more")
    return lines


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}{'s' if count != 1 else ''}"


def layout(summary: JournalSummary) -> str:
    """How the journal's outcomes lie, and whether ``--compact`` would change it.

    Example::

        layout(summarize("/tmp/j"))   # '4 buckets: 6 bucket segments in 4 buckets, 2 parts; --compact makes ...'
    """
    if summary.segments is None:
        return summary.layout or "no segments"
    kinds = [f"{_n(summary.bucket_segments, 'bucket segment')} in {_n(summary.bucket_folders, 'bucket')}"]
    if summary.parts:
        kinds.append(_n(summary.parts, "part"))
    if summary.legacy:
        kinds.append(_n(summary.legacy, "legacy segment") + " (before buckets)")
    if summary.table_files:
        foreign = f", {summary.table_foreign:,} not aiospark's" if summary.table_foreign else ""
        kinds.append(f"{_n(summary.table_files, 'table file')} in {_n(summary.table_groups, 'partition')} "
                     f"(results Spark joins{foreign})")
    head = f"{summary.buckets:,} buckets" if summary.buckets is not None else "no buckets yet (written before buckets)"
    shape = "one segment per bucket" + (" and one table file per partition" if summary.table_files else "")
    tail = f"--compact makes it {shape}" if summary.compactable else shape
    return f"{head}: {', '.join(kinds)}; {tail}"


def dropped_line(dropped: int) -> str:
    """What ``--drop-errors`` says it did: ``dropped_line(1)`` is 'dropped 1 recorded error: a rerun calls that row again'."""
    return (f"dropped {_n(dropped, 'recorded error')}: a rerun calls {'those rows' if dropped != 1 else 'that row'} "
            "again")


def describe_compaction(done: Compaction, dropped: bool = False) -> list[str]:
    """The lines ``aiospark journal --compact`` prints for ``done`` (``dropped``: with --drop-errors).

    Example::

        describe_compaction(compact("/tmp/j"))[0]   # 'compacted 4 buckets into one segment each, removed ...'
    """
    lines = [dropped_line(done.dropped)] if dropped else []
    if done.note:
        lines.append(f"nothing to compact: {done.note}")
    elif done.written or done.removed:
        bucket_segments = done.removed - done.removed_parts - done.removed_legacy
        lines.append(f"compacted {_n(done.written, 'bucket')} into one segment each, removed "
                     f"{_n(done.removed, 'segment')} ({bucket_segments:,} bucket, {done.removed_parts:,} parts, "
                     f"{done.removed_legacy:,} legacy); {_n(done.kept, 'bucket')} already one segment")
    elif done.table_removed:
        if done.kept:
            lines.append(f"every bucket is one segment already ({_n(done.kept, 'bucket')})")
    elif done.kept:
        lines.append(f"nothing to compact: every bucket is one segment ({_n(done.kept, 'bucket')})")
    else:
        lines.append("nothing to compact")
    if done.table_removed:
        lines.append(f"merged {_n(done.table_removed, 'table file')} into {done.table_written:,} (one per partition)")
    if done.table_busy:
        lines.append(f"left {_n(done.table_busy, 'table file')} of runs written in the last {done.table_window:g} s "
                     "as they are (compact again once they have ended)")
    lines.append(f"{_n(done.rows, 'outcome')} kept: {_n(done.results, 'result')}, {_n(done.errors, 'error')}")
    return lines


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``aiospark journal``; returns the exit code (2: no journal there, it cannot be read, or a
    running task still writes what --drop-errors or --compact would rewrite)."""
    from ..journal.summary import compact, drop_errors, summarize

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.compact:
            done = compact(args.location, quiet=args.quiet, drop_errors=args.drop_errors)
            for line in describe_compaction(done, args.drop_errors):
                print(line, file=out)
        elif args.drop_errors:
            print(dropped_line(drop_errors(args.location, quiet=args.quiet)), file=out)
        for line in describe(summarize(args.location, samples=args.errors)):
            print(line, file=out)
    except BrokenPipeError:  # `aiospark journal ... | head`: the reader left, nothing to say
        return 1
    except Exception as exc:  # every failure here is about the location: one line, exit 2
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if type(exc).__name__ not in ("JournalNotFound", "JournalStoreError"):
            text = f"cannot read the journal at {_shown(args.location)}: {type(exc).__name__}: {text}"
        print(f"aiospark journal: {_scrubbed(args.location, text)}", file=err)
        return 2
    return 0


def _shown(location: str) -> str:
    from ..journal.location import redacted

    return redacted(location)


def _scrubbed(location: str, text: str) -> str:
    """``text`` without the credentials of ``location`` (a filesystem's error may echo it whole)."""
    from ..journal.location import Location

    try:
        return Location(location).scrub(text)
    except Exception:  # not even a location: nothing of it to scrub
        return text
