"""The hash partition ``repartition(B, cols)`` sends a row to, computed in Python from its values.

Spark partitions a row of ``repartition(B, c1, c2, ...)`` by ``pmod(hash(c1, c2, ...), B)``:
``hash`` is Murmur3 (x86, 32 bits) with seed 42, each non-NULL value mixed into the hash of the
ones before it (a NULL leaves it as it was), by the value's type (Spark's documented ``hash``
function, whose values ``F.hash`` gives and the tests compare with). The table route
(:mod:`.table_route`) needs the partition of its task's rows to name the task's folder; reading it
from one row here, instead of a column Spark computes for every row, saves the JVM a column per
row (about 0.1 CPU-s per million rows on this machine: docs/design.md).

Only the table route's join types are hashed here (integers, strings, binary, booleans, dates,
decimals); any other raises :class:`TypeError`, failing the task rather than naming a folder Spark
would not have chosen.

Example::

    key_partition([pa.scalar(7, pa.int64())], 4)   # == Spark's pmod(hash(7L), 4)
"""
from __future__ import annotations

import datetime
import decimal
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["key_partition", "spark_hash"]

_SEED = 42
_MASK = 0xFFFFFFFF
#: where Spark keeps a decimal's unscaled value in a long (``Decimal.MAX_LONG_DIGITS``)
_LONG_DIGITS = 18
#: room for any decimal128 (38 digits) moved by its scale without rounding
_EXACT = decimal.Context(prec=100)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK
    return (_rotl(k1, 15) * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def _hash_int(value: int, seed: int) -> int:
    return _fmix(_mix_h1(seed, _mix_k1(value & _MASK)), 4)


def _hash_long(value: int, seed: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed, _mix_k1(value & _MASK))
    return _fmix(_mix_h1(h1, _mix_k1(value >> 32)), 8)


def _hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``hashUnsafeBytes``: little-endian words, then each trailing byte on its own (as a
    signed byte), not the reference Murmur3 tail."""
    aligned = len(data) - len(data) % 4
    h1 = seed
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    return _fmix(h1, len(data))


def _hash_value(value: Any, data_type: pa.DataType, seed: int) -> int:
    if value is None:
        return seed
    if pa.types.is_boolean(data_type):
        return _hash_int(1 if value else 0, seed)
    if pa.types.is_integer(data_type) and pa.types.is_signed_integer(data_type):
        return _hash_long(value, seed) if data_type.bit_width == 64 else _hash_int(value, seed)
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return _hash_bytes(value.encode("utf-8"), seed)
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return _hash_bytes(bytes(value), seed)
    if pa.types.is_date32(data_type):
        return _hash_int((value - datetime.date(1970, 1, 1)).days, seed)
    if pa.types.is_decimal128(data_type):
        unscaled = int(value.scaleb(data_type.scale, context=_EXACT))
        if data_type.precision <= _LONG_DIGITS:
            return _hash_long(unscaled, seed)
        # java.math.BigInteger.toByteArray: the shortest two's complement, big-endian
        size = (~unscaled if unscaled < 0 else unscaled).bit_length() // 8 + 1
        return _hash_bytes(unscaled.to_bytes(size, "big", signed=True), seed)
    raise TypeError(f"no Spark hash of {data_type} here")


def spark_hash(values: Sequence[Any], types: Sequence[pa.DataType]) -> int:
    """Spark's ``hash(values...)`` (a signed 32-bit int) of Python values of these Arrow types."""
    h1 = _SEED
    for value, data_type in zip(values, types, strict=True):
        h1 = _hash_value(value, data_type, h1)
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def key_partition(values: Sequence[pa.Scalar], buckets: int) -> int:
    """The partition of ``repartition(buckets, columns...)`` for a row whose columns hold ``values``."""
    return spark_hash([v.as_py() for v in values], [v.type for v in values]) % buckets
