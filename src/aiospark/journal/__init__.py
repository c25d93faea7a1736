"""Journals of call outcomes: a row whose outcome is recorded is never called again.

:class:`Journal` is the public name (``aiospark.Journal``); a store implements
:mod:`~aiospark.journal.store`'s interface: :mod:`~aiospark.journal.directory` (Arrow IPC segments
on any filesystem pyarrow opens) and :mod:`aiospark.connectors.redis.journal_store`, chosen by the
location's scheme (:mod:`~aiospark.journal.schemes`); :mod:`~aiospark.journal.task` is one task's view, the
:class:`~aiospark.core.durable.TaskJournal` the operator uses; :mod:`~aiospark.journal.identity`
encodes a row's identity; :mod:`~aiospark.journal.manifest` says whose outcomes a journal holds.
No pyspark here: the Spark layer computes partitions and columns and passes them in.

Example::

    journal = Journal("/tmp/j", key="id")
    bound = journal.bind(Manifest.of("ordered_wait", fn, "id BIGINT", ["id"], ["bigint"]))
    view = bound.open_task(partition=0, batch=None, attempt="0")
"""
from .api import BoundJournal, Journal
from .errors import JournalStoreError
from .identity import IdempotencyKey, RowIdentity, ValuesIdentity, identity
from .manifest import JournalMismatch, Manifest
from .store import JournalStore, StoreTask
from .task import TaskView

__all__ = ["BoundJournal", "IdempotencyKey", "Journal", "JournalMismatch", "JournalStore", "JournalStoreError",
           "Manifest", "RowIdentity", "StoreTask", "TaskView", "ValuesIdentity", "identity"]
