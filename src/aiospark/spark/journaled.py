"""``journal=`` of the Spark entry points: row identities, the manifest, each task's journal.

Every entry point gives its operator ``identify=`` so that ``aiospark.idempotency_key()`` works
inside any call. Without a journal the operator computes it only if the call asks for it (a
whole row's canonical JSON costs microseconds that most calls would pay for nothing); with one it
is computed for every row, since it is the journal's key.

A task finds a row's outcome by the row's identity alone, wherever Spark put the row (a
directory journal loads the row's bucket on demand: :mod:`aiospark.journal.directory`); with
``dedup=`` equal identities are brought into one task first (:mod:`aiospark.spark.dedup`).

A journal reaches the operator by one route (:func:`aiospark.spark.task.run_task`): the task's
view is the operator's ``journal=``; a recorded row completes inside the operator and leaves
through its one emit path, like a called one.

Example (what ``_wait`` and ``run_task`` do)::

    durable = Durable.prepare(journal, df, "ordered_wait", function, out_schema)
    view = durable.open_task()                # in the task, before any row
    op = await options.make_operator(..., identify=durable.of, journal=view)
"""
from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..journal import BoundJournal, Journal, Manifest, RowIdentity, TaskView
from ..journal.buckets import MAX_BUCKETS
from ..journal.identity import IdempotencyKey
from .journal_location import check_location

#: set while :func:`aiospark.plan` calls an entry point: the journal is checked, not written, and
#: ``_wait`` counts instead of mapping
PLANNING: contextvars.ContextVar[bool] = contextvars.ContextVar("aiospark_planning", default=False)


def planning() -> bool:
    """Whether the current entry-point call is a dry run (:func:`aiospark.plan`)."""
    return PLANNING.get()


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
                 idempotency: Callable[[Any], str] | None = None, columns: Sequence[str] = ()):
        #: a row's identity: the operator's ``identify=`` (without a journal it runs only when a
        #: call asks for its ``idempotency_key()``)
        self.of = of
        self.bound = bound
        self.idempotency = idempotency
        #: the columns a row's journal identity is made of (empty without a journal)
        self.columns = list(columns)
        #: whether NULLs are key values (the default key: every column) or make no identity
        self.nulls = True
        #: the table route's target (aiospark.spark.table_route), when the run takes it
        self.table: Any = None

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
        key = cls.identity_columns(journal, columns, what, function)
        check_location(journal, getattr(df, "sparkSession", None), what)
        types = [df.schema[c].dataType.simpleString() for c in key]
        manifest = Manifest.of(entry, function, output_schema, key, types)
        # the default key is the whole row: its values, NULLs among them, are the question asked
        of = whole if journal.key is None else RowIdentity(key, nulls=False)
        keys = IdempotencyKey(f"{entry}:{manifest.function}:{manifest.code}", of, whole)
        bound = journal.bind(manifest, default_buckets=shuffle_partitions(getattr(df, "sparkSession", None)),
                             write=not planning())
        durable = cls(of, bound, keys, key)
        durable.nulls = journal.key is None
        return durable

    @staticmethod
    def identity_columns(journal: Journal, columns: list[str], what: str, function: Any) -> list[str]:
        """The columns a row's journal identity is made of (checked: a ValueError names a missing one)."""
        key = journal.key_columns(columns, what)
        if journal.key is not None:  # a lookup join's ``on`` columns: its answer depends on them
            key += [c for c in getattr(function, "journal_identity_columns", ()) if c not in key]
        return key

    def open_task(self, encode: Any = None, rebuild: Any = None) -> TaskView | None:
        """This task's journal, its outcomes loaded (None without a journal)."""
        if self.bound is None:
            return None
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if self.table is not None:  # the table route: results go to typed Parquet
            partition, attempt = (0, "local") if ctx is None else (ctx.partitionId(),
                                                                   f"{ctx.stageId()}.{ctx.taskAttemptId()}")
            return self.table.open_view(self.bound, partition, attempt, encode, rebuild)
        if ctx is None:  # not in a Spark task (a direct call in tests)
            return self.bound.open_task(0, None, "local", encode, rebuild)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        return self.bound.open_task(ctx.partitionId(), batch, f"{ctx.stageId()}.{ctx.taskAttemptId()}",
                                    encode, rebuild)

    @staticmethod
    def asked_row_by_row(view: TaskView) -> bool:
        """Whether ``view``'s store is asked for outcomes row by row (Redis), not loaded up front
        (a directory): then a chunk's outcomes are fetched at once before the chunk is fed
        (:class:`aiospark.spark.task.FedIdentities`)."""
        return view.fetches_by_row


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


def run_journaled(view: TaskView | None, results: Iterator[Any]) -> Iterator[Any]:
    """``results`` (a task's output generator), closing ``view`` when it ends, however it ends."""
    failed = True
    try:
        yield from results
        failed = False
    finally:
        close_view(view, failed)


def shuffle_partitions(session: Any) -> int | None:
    """The session's ``spark.sql.shuffle.partitions`` (a new journal's buckets: the parallelism the
    user gave Spark's shuffles), or None when it cannot be read as an int in range."""
    if session is None:
        return None
    try:
        value = int(session.conf.get("spark.sql.shuffle.partitions"))
    except Exception:  # unset or unreadable (a Connect server that refuses it): the library's default
        return None
    return value if 1 <= value <= MAX_BUCKETS else None


__all__ = ["BATCH_ID_PROPERTY", "PLANNING", "Durable", "planning", "check_journal", "close_view", "run_journaled", "shuffle_partitions"]
