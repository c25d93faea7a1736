"""Reading a whole journal from outside a job: what it holds, dropping its kept errors, compacting it.

:func:`summarize` says what identifies a journal (its manifest), its size, its layout and its
outcomes (results, kept errors with the first few texts), each identity counted once as a task
reads it (a result outranks a kept error) whatever folders hold it; :func:`drop_errors` removes
the kept errors, so a rerun calls only the rows that failed; :func:`compact` rewrites a directory
journal written by many runs (bucket folders of several runs, killed tasks' parts, folders of
versions before buckets) as one segment per bucket, each outcome kept. They work on directory and
Redis journals; they print nothing (the ``aiospark journal`` command does,
:mod:`aiospark.app.journal_cli`).

Each store does it its own way, behind :class:`~aiospark.journal.store.JournalStore` (no
tombstones: readers of older versions and the task's read path stay as they are): a directory
rewrites the segments holding errors (:mod:`~aiospark.journal.directory_admin`; a segment a live
task still writes refuses it); Redis deletes every ``E`` key with a server-side script that deletes
it only if it still holds an error (:mod:`aiospark.connectors.redis.journal_store`). Compacting
is a directory's (:mod:`~aiospark.journal.directory_compact`): Redis keeps one key per outcome, so
its counts are exact and it is always in its one layout; :func:`compact` of a Redis journal does
nothing and says so (:attr:`Compaction.note`), so a script may compact every journal alike.

Example::

    s = summarize("/data/journals/enrich-v1")
    s.results, s.errors, s.error_samples[:1]    # 1900, 100, [('[7]', 'ValueError: row 7 ...')]
    drop_errors("/data/journals/enrich-v1")     # 100
    compact("/data/journals/enrich-v1").written  # 12: buckets now one segment each
"""
from __future__ import annotations

from .location import redacted
from .schemes import scheme_of, store_class, supported
from .store import Compaction, JournalNotFound, JournalStore, JournalSummary

__all__ = ["QUIET_SECONDS", "SAMPLES", "Compaction", "JournalNotFound", "JournalSummary", "compact", "drop_errors",
           "open_store", "summarize"]

#: by default no quiet period: a live writer is known by its lease (journal/lease.py), not by silence
QUIET_SECONDS = 0.0

#: error texts :func:`summarize` keeps by default
SAMPLES = 5


def open_store(location: str) -> JournalStore:
    """The store at ``location`` (a directory or a Redis store, by its scheme)."""
    if not isinstance(location, str) or not location.strip():
        raise JournalNotFound(f"not a journal location: {location!r}")
    cls = store_class(location)
    if cls is None:
        raise JournalNotFound(f"{redacted(location)}: {scheme_of(location)}:// is not a journal location "
                              f"({supported()})")
    return cls(location)


def summarize(location: str, samples: int = SAMPLES) -> JournalSummary:
    """What the journal at ``location`` holds (see :class:`JournalSummary`).

    Raises :class:`JournalNotFound` when there is none, :class:`JournalStoreError` (Redis) or
    ``OSError`` (directory) when the store cannot be read."""
    return open_store(location).summarize(samples)


def drop_errors(location: str, quiet: float = QUIET_SECONDS) -> int:
    """Remove the kept errors of the journal at ``location``; returns how many were removed.
    A rerun then calls those rows again (see the module docstring for how, and its safety).
    A directory segment holding errors whose writer's lease is live (or that changed less than
    ``quiet`` seconds ago) refuses the drop (:class:`JournalStoreError`): a task still writes it."""
    return open_store(location).drop_errors(quiet)


def compact(location: str, quiet: float = QUIET_SECONDS, drop_errors: bool = False) -> Compaction:
    """Rewrite the directory journal at ``location`` as one segment per bucket, every outcome kept
    (``drop_errors=True``: without its kept errors, in the same pass); returns what was done, its
    counts equal to :func:`summarize`'s before and after. A segment it would rewrite whose writer's
    lease is live (or that changed less than ``quiet`` seconds ago) refuses it, before anything
    changes (:class:`JournalStoreError`). A Redis journal has nothing to compact: nothing is
    rewritten and :attr:`Compaction.note` says why (``drop_errors=True`` still drops its errors).

    Example::

        c = compact("/data/journals/enrich-v1")
        (c.written, c.removed, c.rows)     # (12, 40, 2000)
    """
    return open_store(location).compact(quiet, drop_errors)
