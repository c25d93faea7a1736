"""``dedup=``: equal keys paid once per job, by a shuffle that brings them into one task.

Before the operator's ``mapInArrow``, a pre-pass computes each row's journal identity (the same
:class:`~aiospark.journal.RowIdentity` the operator uses) and appends :data:`PART_COLUMN`, an int
that sends the row's bucket ``b`` (:func:`~aiospark.journal.buckets.bucket_of`) to Spark partition
``b`` of ``repartition(B, PART_COLUMN)`` (:func:`~aiospark.journal.buckets.partition_values`). So
all rows with equal keys meet in one task, where the operator calls each key once and gives its
outcome to every row holding it; and each task reads about one bucket of a directory journal.
The operator's lane drops the column before it makes rows: the function, ``_input`` error rows
and identities never see it. A row without an identity (a NULL in a ``key=`` column) goes to the
partition of bucket 0: it is always called.

The shuffle moves rows between partitions, so it is only made where no order is kept: not for
``ordered_wait``, nor for ``unordered_wait(key=...)`` unless its key columns include every
identity column (then equal order keys still meet, in their order, in one task).

Example (what ``_wait`` does)::

    if use_dedup(call.dedup, journal, ordered=False, order_key=None, durable=durable, what=name):
        df = shuffled(df, durable, name)
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import IntegerType, StructField, StructType

from ..journal.buckets import bucket_of, partition_values
from .arrow_names import map_in_arrow
from .schema import to_python

if TYPE_CHECKING:
    from .journaled import Durable

__all__ = ["PART_COLUMN", "check_dedup", "check_free", "shuffled", "use_dedup"]

#: the column the pre-pass adds (dropped by the operator's lane before rows are made)
PART_COLUMN = "_aiospark_part"


def check_dedup(dedup: Any, what: str) -> bool | None:
    if dedup is None or isinstance(dedup, bool):
        return dedup
    raise TypeError(f"{what}(dedup=...) takes True, False or None (on where a journal is given and no order "
                    f"is kept), got {dedup!r}")


def check_free(columns: Sequence[str], what: str) -> None:
    """A ValueError when the DataFrame already has a column named :data:`PART_COLUMN`."""
    if PART_COLUMN in columns:
        raise ValueError(f"{what}: the DataFrame has a column named {PART_COLUMN!r}, the name of the column the "
                         "dedup shuffle adds: rename it (df.withColumnRenamed), or pass dedup=False")


def use_dedup(dedup: bool | None, has_journal: bool, ordered: bool, order_key: Sequence[str] | None,
              identity_columns: Sequence[str], what: str) -> bool:
    """Whether to shuffle rows by their journal bucket (see the module docstring). ``dedup=True``
    where it cannot be done is a ValueError saying why and what to do."""
    if dedup is False:
        return False
    why = None
    if not has_journal:
        why = ("it shares the outcomes of equal keys through a journal, and none is given: pass "
               "journal=aiospark.Journal(..., key=...) or drop dedup=")
    elif ordered:
        why = (f"the shuffle moves rows between partitions, and {what.split(' ')[0]} keeps each partition's order: "
               "use unordered_wait (or lookup_join(ordered=False)) to pay equal keys once per job, or drop dedup= "
               "(the journal still finds recorded outcomes wherever rows land; equal keys are shared within a task)")
    elif order_key is not None and not set(identity_columns) <= set(order_key):
        missing = [c for c in identity_columns if c not in order_key]
        why = (f"the shuffle would move rows of one key= order group ({list(order_key)!r}) apart, since the journal "
               f"identity also holds {missing!r}: pass key= covering the journal's key columns, or drop dedup=")
    if why is None:
        return True
    if dedup:
        raise ValueError(f"{what.split(' ')[0]}(dedup=True): {why}")
    return False


class _AddPart:
    """The pre-pass ``mapInArrow`` runs in every task: each row's :data:`PART_COLUMN` (picklable)."""

    def __init__(self, of: Callable[[Any], str | None], buckets: int, columns: Sequence[str]):
        self.of = of
        self.buckets = buckets
        self.columns = list(columns)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        values = partition_values(self.buckets)
        of, buckets, nobody = self.of, self.buckets, values[0]
        for batch in batches:
            parts = []
            for row in to_python(batch.select(self.columns)):
                try:
                    identity = of(row)
                except Exception:  # the operator computes it again: that row's error
                    identity = None
                parts.append(nobody if identity is None else values[bucket_of(identity, buckets)])
            yield batch.append_column(PART_COLUMN, pa.array(parts, pa.int32()))


def shuffled(df: Any, durable: Durable, what: str) -> Any:
    """``df`` with :data:`PART_COLUMN` added, repartitioned so equal identities share a task."""
    assert durable.bound is not None
    check_free(df.columns, what)
    buckets = durable.bound.buckets
    schema = StructType(df.schema.fields + [StructField(PART_COLUMN, IntegerType(), False)])
    added = map_in_arrow(df, _AddPart(durable.of, buckets, durable.columns), schema)
    return added.repartition(buckets, PART_COLUMN)


def without_part(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` without :data:`PART_COLUMN` (the operator's lane, before it makes rows)."""
    index = batch.schema.get_field_index(PART_COLUMN)
    return batch if index < 0 else batch.remove_column(index)
