"""``journal=`` of the Spark entry points: row identities, the manifest, each task's journal.

Every entry point gives its operator ``identify=`` so that ``aiospark.idempotency_key()`` works
inside any call. Without a journal the operator computes it only if the call asks for it (a
whole row's canonical JSON costs microseconds that most calls would pay for nothing); with one it
is computed for every row, since it is the journal's key.

A task finds its outcomes by its Spark partition id (and, in Structured Streaming, the micro-batch
id, Spark's ``streaming.sql.batchId`` local property): see :mod:`aiospark.journal.directory`.

Example (what ``_wait`` does)::

    durable = Durable.prepare(journal, df, "ordered_wait", function, out_schema)
    view = durable.open_task()                # in the task, before any row
    op = await options.make_operator(..., identify=durable.of, journal=view)
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..journal import BoundJournal, Journal, Manifest, RowIdentity, TaskView
from ..journal.identity import IdempotencyKey
from .journal_location import check_location

#: the local property Spark sets on the tasks of a streaming micro-batch
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def check_journal(journal: Any, what: str) -> Journal | None:
    if journal is None or isinstance(journal, Journal):
        return journal
    raise TypeError(f"{what}(journal=...) takes an aiospark.Journal (or None), got {type(journal).__name__}")


class Durable:
    """One entry point's identities, idempotency keys and journal (picklable; checked on the driver).

    ``of(row)``: the row's journal identity -- None for a row with a NULL in a ``key=`` column,
    which has none (it is always called, never recorded: NULL is no value, and two rows whose
    key is NULL are not the same row). ``idempotency(row)``: what ``aiospark.idempotency_key()``
    returns (:class:`IdempotencyKey`). ``rebuild``: a lookup join's journal outputs rebuilt from
    the current input row (:meth:`aiospark.spark.lookup_join._LookupJoin.journal_rows`)."""

    def __init__(self, of: Callable[[Any], str | None], bound: BoundJournal | None,
                 idempotency: Callable[[Any], str] | None = None):
        #: a row's identity: the operator's ``identify=`` (without a journal it runs only when a
        #: call asks for its ``idempotency_key()``)
        self.of = of
        self.bound = bound
        self.idempotency = idempotency

    @classmethod
    def prepare(cls, journal: Any, df: Any, what: str, function: Any, output_schema: str) -> Durable:
        """For a DataFrame entry point: rows are dicts; the key is ``journal.key`` or every column.
        ``output_schema`` is the schema the user declared (not the columns ``on_error`` adds)."""
        journal = check_journal(journal, what)
        columns = list(df.columns)
        # ordered_wait and unordered_wait give a row the same outputs: one journal serves both
        entry = "ordered_wait/unordered_wait" if what in ("ordered_wait", "unordered_wait") else what
        whole = RowIdentity(columns)
        if journal is None:
            return cls(whole, None, IdempotencyKey.of_function(entry, function, None, whole))
        key = journal.key_columns(columns, what)
        if journal.key is not None:  # a lookup join's ``on`` columns: its answer depends on them
            key += [c for c in getattr(function, "journal_identity_columns", ()) if c not in key]
        check_location(journal, getattr(df, "sparkSession", None), what)
        types = [df.schema[c].dataType.simpleString() for c in key]
        manifest = Manifest.of(entry, function, output_schema, key, types)
        # the default key is the whole row: its values, NULLs among them, are the question asked
        of = whole if journal.key is None else RowIdentity(key, nulls=False)
        keys = IdempotencyKey(f"{entry}:{manifest.function}:{manifest.code}", of, whole)
        return cls(of, journal.bind(manifest), keys)

    def open_task(self, encode: Any = None, rebuild: Any = None) -> TaskView | None:
        """This task's journal, its outcomes loaded (None without a journal)."""
        if self.bound is None:
            return None
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:  # not in a Spark task (a direct call in tests)
            return self.bound.open_task(0, None, "local", encode, rebuild)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        return self.bound.open_task(ctx.partitionId(), batch, f"{ctx.stageId()}.{ctx.taskAttemptId()}",
                                    encode, rebuild)

    def feed(self, chunks: Iterator[list[Any]], view: TaskView | None) -> Iterator[list[Any]]:
        """``chunks`` as they are, each one's outcomes asked for first when the store is asked
        row by row (Redis: one pipelined MGET per chunk)."""
        if view is None or not view.fetches_by_row:
            return chunks
        of = self.of

        def fed() -> Iterator[list[Any]]:
            for chunk in chunks:
                view.prefetch([i for i in map(of, chunk) if i is not None])
                yield chunk

        return fed()


def replayed(durable: Durable, view: TaskView | None, chunks: Iterable[list[Any]], out_rows: int,
             run: Callable[[Iterator[list[Any]]], Iterator[list[Any]]]) -> Iterator[list[Any]]:
    """A task's output values: first those of the partition's leading rows whose results are all
    recorded, straight from the journal (no operator: no queue entry, call record or emit per
    row; reading a finished journal needs about half the CPU), then ``run(rest)`` (the operator,
    from the first row that must be called on; a
    recorded row after it still completes through the operator). The order is the one the
    operator gives: each row's outputs in input order, the recorded prefix before everything
    after it. ``view.replayed`` counts the output values replayed so."""
    source = iter(chunks)
    if view is None or view.rebuild is not None:
        return run(durable.feed(source, view))

    def outputs() -> Iterator[list[Any]]:
        of, buffered = durable.of, []
        for chunk in source:
            try:
                ids = [of(v) for v in chunk]
            except Exception:  # a value without an identity: the operator makes it that row's error
                ids = []
            if ids:
                view.prefetch([i for i in ids if i is not None])
            values, n = view.recorded_prefix(ids)
            buffered += values
            if n < len(chunk):
                if buffered:
                    yield buffered
                yield from run(durable.feed(itertools.chain([chunk[n:]], source), view))
                return
            if len(buffered) >= out_rows:
                yield buffered
                buffered = []
        if buffered:
            yield buffered
        yield from run(iter(()))  # the operator's end-of-task work (metrics' final report) still runs

    return outputs()


def counting_replayed(view: TaskView | None, report: Any) -> Any:
    """``report`` of ``run_partition`` counting the rows :func:`replayed` emitted too."""
    if report is None or view is None:
        return report
    return lambda operator, rows, final: report(operator, rows + view.replayed, final)


def close_view(view: TaskView | None, failed: bool) -> None:
    """Close a task's journal: write what is left. After a failure the task's own error stands."""
    if view is None:
        return
    if not failed:
        view.close()
        return
    try:
        view.close()
    except Exception as exc:  # the task's own error is what it raises; this one is logged, not lost
        logging.getLogger("aiospark").warning(
            "aiospark: the journal of a failed task could not write its last outcomes (their rows will "
            "be called again on a rerun): %r", exc)


def run_journaled(durable: Durable | None, view: TaskView | None, results: Iterator[Any]) -> Iterator[Any]:
    """``results`` (a task's output generator), closing ``view`` when it ends, however it ends."""
    failed = True
    try:
        yield from results
        failed = False
    finally:
        close_view(view, failed)


__all__ = ["BATCH_ID_PROPERTY", "Durable", "check_journal", "close_view",
           "counting_replayed", "replayed", "run_journaled"]
