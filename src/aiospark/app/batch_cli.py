"""``aiospark batch status JOURNAL``: the provider batches a journal recorded (the batch lane's
:func:`aiospark.submit_batches`), each with its state, request counts and age.

The states are those recorded by the last ``submit_batches`` / ``collect_batches``; with
``--base-url`` each batch not yet ended is asked for again (``GET /batches/{id}``, the key from
``--api-key-env``), nothing written. No Spark.

Example::

    $ aiospark batch status /data/j/tickets --base-url https://api.openai.com/v1
    batch_6a1f...  completed     10,000 requests: 9,988 completed, 12 failed  age 3h12m  answers kept
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

__all__ = ["add_parser", "run", "describe"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser],
               formatter: type) -> argparse.ArgumentParser:
    """The ``batch`` sub-command of ``aiospark``."""
    parser = commands.add_parser(
        "batch", help="the provider batches a journal recorded (aiospark.submit_batches)",
        formatter_class=formatter,  # type: ignore[arg-type]
        description="The provider batches (OpenAI-compatible Batch API) that aiospark.submit_batches recorded in a "
                    "journal: each batch's state, request counts and age.")
    actions = parser.add_subparsers(dest="action", required=True)
    status = actions.add_parser("status", help="each batch's state, counts and age", formatter_class=formatter)  # type: ignore[arg-type]
    status.add_argument("location", help="the journal's directory (a path, file://, s3://, ...)")
    status.add_argument("--base-url", help="ask the provider for the state of each batch not yet ended (its base "
                                           "URL, ending in /v1); without it: the states last recorded")
    status.add_argument("--api-key-env", default="OPENAI_API_KEY",
                        help="the environment variable holding the key for --base-url")
    return parser


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def describe(records: list[dict[str, Any]], waiting: list[dict[str, Any]], now: float) -> list[str]:
    """The lines printed for batch ``records`` and uploads ``waiting`` for their batch."""
    lines = []
    for r in sorted(records, key=lambda r: r.get("created_at") or 0):
        age = _age(now - r["created_at"]) if r.get("created_at") else "?"
        kept = "answers kept" if r.get("answers") else "answers not read yet"
        lines.append(f"{r['batch_id']}  {r['status']:<11} {r.get('total') or 0:,} requests: "
                     f"{r.get('completed') or 0:,} completed, {r.get('failed') or 0:,} failed  age {age}  {kept}")
    for u in waiting:
        lines.append(f"(file {u['file_id']})  uploaded, no batch recorded: {len(u['custom_ids']):,} requests; the next "
                     "submit_batches adopts the batch the provider made of it, or creates it")
    if not lines:
        lines.append("no batches recorded in this journal")
    return lines


def run(args: argparse.Namespace) -> int:
    """``aiospark batch status``; the exit code."""
    import pyarrow.fs as pafs

    from ..journal import Journal
    from ..journal.directory import DirectoryStore
    from ..spark.batch_records import BatchRecords

    try:
        journal = Journal(args.location)
    except (TypeError, ValueError) as exc:
        print(f"aiospark batch status: {exc}", file=sys.stderr)
        return 2
    store = journal.store
    if not isinstance(store, DirectoryStore):
        print(f"aiospark batch status: {journal.location} is not a directory journal: the batch lane keeps its "
              "batches in a directory journal", file=sys.stderr)
        return 2
    try:
        fs, root = store.fs
        kind = fs.get_file_info(root).type
    except OSError as exc:
        print(f"aiospark batch status: {exc}", file=sys.stderr)
        return 2
    if kind == pafs.FileType.NotFound:
        print(f"aiospark batch status: no journal at {journal.location}: check the path", file=sys.stderr)
        return 2
    if kind != pafs.FileType.Directory:
        print(f"aiospark batch status: {journal.location} is a file, not a journal's directory", file=sys.stderr)
        return 2
    found = store.guarded("cannot list it", lambda: fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)))
    records: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for info in found:
        if info.type != pafs.FileType.Directory:
            continue
        book = BatchRecords(store, info.base_name)
        batches = book.batches()
        records += batches.values()
        waiting += [u for u in book.uploads() if u["file_id"] not in batches]
    if args.base_url:
        import os

        from ..connectors.errors import ConnectorError
        from ..runtime.worker_loop import worker_loop

        if args.api_key_env and not os.environ.get(args.api_key_env):
            print(f"aiospark batch status: --base-url needs the API key in ${args.api_key_env} (--api-key-env), "
                  "which is not set", file=sys.stderr)
            return 2
        try:
            records = worker_loop().submit(_refresh(records, args.base_url, args.api_key_env)).result()
        except (ConnectorError, ValueError) as exc:  # scrubbed of the key by the client
            print(f"aiospark batch status: cannot ask the provider: {exc}", file=sys.stderr)
            return 1
    print(f"journal {journal.location}: {len(records)} batch(es)")
    for line in describe(records, waiting, time.time()):
        print(line)
    return 0


async def _refresh(records: list[dict[str, Any]], base_url: str, key_env: str) -> list[dict[str, Any]]:
    from ..connectors.openai.batch_api import TERMINAL, BatchClient

    out = []
    async with BatchClient(base_url, api_key_env=key_env) as client:
        for r in records:
            if r["status"] not in TERMINAL:
                info = await client.retrieve(r["batch_id"])
                r = {**r, "status": info.status, "total": info.total, "completed": info.completed,
                     "failed": info.failed}
            out.append(r)
    return out
