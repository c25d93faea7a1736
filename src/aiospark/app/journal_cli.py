"""``aiospark journal LOCATION [--drop-errors]``: what a journal holds, and dropping its errors.

Prints what identifies the journal (entry point, function, code hash, output schema, key), its
size, its outcomes (results and kept errors, with the first few error texts). ``--drop-errors``
removes the kept errors so that a rerun calls only the rows that failed (how, and why it is safe
for readers: :mod:`aiospark.journal.summary`). A location with no journal, a file, or a Redis that
refuses is one line on stderr and exit code 2.

Example::

    $ aiospark journal /data/journals/enrich-v1
    journal /data/journals/enrich-v1 (directory)
      written by  unordered_wait tests.chaos.ServiceCall (code 3f2a9c...)
      schema      id LONG, key STRING, value LONG, name STRING
      key         id (bigint)
      size        41,322 bytes in 2 segments
      outcomes    700: 600 results, 100 errors
      errors      [7] ValueError: row 7 is refused
                  ...
"""
from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ..journal.summary import QUIET_SECONDS, SAMPLES, JournalSummary
from .arguments import count, seconds


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser],
               formatter: type) -> argparse.ArgumentParser:
    """The ``journal`` sub-command of ``aiospark``."""
    parser = commands.add_parser(
        "journal", help="show a journal's size, outcomes and errors; --drop-errors so a rerun retries them",
        formatter_class=formatter,  # type: ignore[arg-type]
        description="Show what a journal (aiospark.Journal) holds: what wrote it, its size, its outcomes and "
                    "kept errors. --drop-errors removes the kept errors, so that a rerun calls only the rows "
                    "that failed.")
    parser.add_argument("location", help="the journal: a directory (path, file://, s3://, ...) or a redis:// URL "
                                         "(with ?prefix= if the job used one)")
    parser.add_argument("--drop-errors", action="store_true",
                        help="remove the recorded errors; a directory segment a running task still writes (it "
                             "holds a lease) refuses it")
    parser.add_argument("--errors", type=count, default=SAMPLES, help="error texts to show")
    parser.add_argument("--quiet", type=seconds, default=QUIET_SECONDS,
                        help="--drop-errors also refuses a directory segment changed less than this many seconds "
                             "ago (for journals written by versions that take no lease)")
    return parser


def describe(summary: JournalSummary) -> list[str]:
    """The lines ``aiospark journal`` prints for ``summary``.

    Example::

        describe(summarize("/tmp/j"))[0]   # 'journal /tmp/j (directory)'
    """
    m = summary.manifest
    key = ", ".join(f"{c} ({t})" for c, t in zip(m.key, m.key_types)) if m.key_types else ", ".join(m.key)
    where = f" in {summary.segments:,} segment{'s' if summary.segments != 1 else ''}" \
        if summary.segments is not None else " (keys and values)"
    lines = [f"journal {summary.location} ({summary.store})",
             f"  written by  {m.entry_point} {m.function} (code {m.code})",
             f"  schema      {m.output_schema}",
             f"  key         {key or '(every input column)'}",
             f"  size        {summary.bytes:,} bytes{where}",
             f"  outcomes    {summary.rows:,}: {summary.results:,} results, {summary.errors:,} errors"]
    if summary.skipped:
        lines.append(f"  skipped     {summary.skipped:,} rows with a bad checksum (called again on a rerun)")
    for i, (identity, text) in enumerate(summary.error_samples):
        shown = text if len(text) <= 200 else text[:197] + "..."
        lines.append(f"  {'errors' if i == 0 else '':<10}  {identity} {shown}")
    if summary.errors > len(summary.error_samples) and summary.error_samples:
        lines.append(f"              ... {summary.errors - len(summary.error_samples):,} more")
    return lines


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``aiospark journal``; returns the exit code (2: no journal there, or it cannot be read)."""
    from ..journal.summary import drop_errors, summarize

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if args.drop_errors:
            dropped = drop_errors(args.location, quiet=args.quiet)
            print(f"dropped {dropped:,} recorded error{'s' if dropped != 1 else ''}: a rerun calls "
                  f"{'those rows' if dropped != 1 else 'that row'} again", file=out)
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
