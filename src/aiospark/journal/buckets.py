"""Which bucket a row's outcome lives in, and which Spark partition a bucket's rows are sent to.

A directory journal keeps its outcomes in ``B`` buckets (``k=<bucket>/`` folders): a row's bucket
is ``crc32(identity) % B``, a function of its identity alone, so a rerun finds a recorded outcome
wherever Spark puts the row, and the CLI can re-bucket a journal without Spark. ``B`` is the
journal's (its manifest's ``buckets``), fixed at its first bind.

The dedup pre-pass (:mod:`aiospark.spark.dedup`) sends every row of bucket ``b`` to Spark
partition ``b`` with ``df.repartition(B, col)``, ``col`` holding :func:`partition_values`'s
``v_b``: Spark's hash partitioning puts an int ``v`` in partition
``pmod(murmur3_x86_32(v, seed=42), B)``; :func:`spark_hash_int` is that hash, in Python.

Example::

    bucket_of('[7]', 200)                          # 0..199, the same on every machine
    values = partition_values(200)                 # values[b] lands in Spark partition b
    spark_hash_int(values[5]) % 200                # 5
"""
from __future__ import annotations

import functools
import zlib

__all__ = ["DEFAULT_BUCKETS", "MAX_BUCKETS", "bucket_of", "check_buckets", "partition_values", "signed", "spark_hash_int",
           "spark_partition_of"]

#: buckets of a journal made without ``buckets=`` (Spark's default shuffle partitions)
DEFAULT_BUCKETS = 200
#: the most buckets a journal may have (folders per question; partitions of the dedup shuffle)
MAX_BUCKETS = 65536

_M32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def bucket_of(identity: str, buckets: int) -> int:
    """The bucket of ``identity`` among ``buckets`` (stable across processes and machines)."""
    return zlib.crc32(identity.encode()) % buckets


def check_buckets(buckets: object, what: str = "Journal(buckets=...)") -> int:
    """``buckets`` if it is an int in 1..:data:`MAX_BUCKETS`, else a ValueError saying so."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 1 <= buckets <= MAX_BUCKETS:
        raise ValueError(f"{what} takes an int from 1 to {MAX_BUCKETS} (the folders outcomes are spread over, "
                         f"and the partitions of the dedup shuffle), got {buckets!r}")
    return buckets


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt(value, seed)`` as a non-negative int in 0..2**32-1 (what
    ``pmod(hash, n)`` of Spark's ``HashPartitioning`` reads as a signed int: see
    :func:`spark_partition_of`)."""
    k1 = (value & _M32) * _C1 & _M32
    k1 = _rotl(k1, 15) * _C2 & _M32
    h1 = (seed & _M32) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _M32
    h1 ^= 4  # the length in bytes of an int
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1


def signed(value: int) -> int:
    """A 32-bit value as Java's signed int."""
    return value - (1 << 32) if value & 0x80000000 else value


def spark_partition_of(value: int, partitions: int) -> int:
    """The partition ``df.repartition(partitions, c)`` sends an INT ``c == value`` to."""
    return signed(spark_hash_int(value)) % partitions  # Python's % is Spark's pmod for a positive divisor


@functools.lru_cache(maxsize=16)
def partition_values(buckets: int) -> tuple[int, ...]:
    """For each bucket ``b``, the smallest non-negative int Spark's hash partitioning into
    ``buckets`` partitions sends to partition ``b``."""
    out: list[int | None] = [None] * buckets
    left, v = buckets, 0
    while left:
        p = spark_partition_of(v, buckets)
        if out[p] is None:
            out[p] = v
            left -= 1
        v += 1
    return tuple(x for x in out if x is not None)
