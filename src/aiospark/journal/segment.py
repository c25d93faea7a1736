"""A journal segment's bytes: one task attempt's outcomes as an Arrow IPC stream.

A segment is appended to one record batch per flush (at most :data:`BATCH_ROWS` rows each) and
never rewritten. Two layouts are read:

* **batched** (what tasks write): columns ``identity`` (string), ``error`` (string, ``""`` for a
  result) and ``results`` (binary: row 0 holds the batch's results pickled as *one* list, one
  entry per row, None for an error row; the other rows are empty), and a crc32 of the batch's
  buffers in the batch's custom metadata. One pickle and one checksum per batch, not per row:
  writing and reading cost a fraction of a microsecond a row (per-row pickles and crcs cost ~2 us).
  A batch whose crc does not match is skipped whole (its rows are called again); the batches
  after it still count. A killed writer's torn tail ends the reading; the batches before it count.
* **per row** (:data:`SCHEMA`: ``identity, results, error, crc``, one pickle and crc per row):
  the first layout, still read (journals written before the batched one).

Example::

    sink = pa.BufferOutputStream()
    writer = pa.ipc.new_stream(sink, BATCHED)
    write_batch(writer, [("[1]", [{"id": 1}], None)])
    writer.close()
    read_outcomes(sink.getvalue().to_pybytes())   # ({'[1]': ([{'id': 1}], None)}, 0)
"""
from __future__ import annotations

import itertools
import pickle
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: the per-row layout (the first one; still read)
SCHEMA = pa.schema([("identity", pa.string()), ("results", pa.binary()), ("error", pa.string()),
                    ("crc", pa.uint32())])

#: the batched layout tasks write (see the module docstring)
BATCHED = pa.schema([("identity", pa.string()), ("error", pa.string()), ("results", pa.binary())])

#: rows per record batch at most (a batch's results are one pickled value: kept well below 2 GiB)
BATCH_ROWS = 10_000

PICKLE_PROTOCOL = 5

#: identity -> (results, or None for a kept error; error text or None)
Outcomes = dict[str, tuple[Any, str | None]]


def crc(identity: str, payload: bytes | None, error: str | None) -> int:
    """The per-row layout's checksum of one row."""
    body = payload if payload is not None else (error or "").encode("utf-8", "surrogatepass")
    return zlib.crc32(body, zlib.crc32(identity.encode("utf-8", "surrogatepass")))


def batch_crc(batch: pa.RecordBatch) -> int:
    """crc32 of a batched-layout batch's bytes: each column's offsets and the data they span
    (the columns hold no nulls, so there is no validity buffer to cover)."""
    n = batch.num_rows
    check = zlib.crc32(struct.pack("<q", n))
    for column in batch.columns:
        if column.null_count or column.offset:
            raise ValueError("not a batched-layout column")
        _, offsets, data = column.buffers()
        ends = memoryview(offsets)[:4 * (n + 1)]
        check = zlib.crc32(ends, check)
        end = struct.unpack_from("<i", ends, 4 * n)[0]
        if data is not None and end:
            check = zlib.crc32(memoryview(data)[:end], check)
    return check


def pickled(results: list[Any]) -> bytes:
    """``results`` pickled, or a TypeError saying what the journal needs."""
    try:
        return pickle.dumps(results, PICKLE_PROTOCOL)
    except Exception as exc:
        raise TypeError(f"the journal stores results pickled, and a call's results cannot be: {exc}. "
                        "Return plain values (dicts, lists, numbers, strings, dates, Decimals)") from exc


def batches(entries: Sequence[tuple[str, Any, str | None]]) -> list[tuple[pa.RecordBatch, dict[str, str]]]:
    """``entries`` (identity, results or None, error text or None) as batched-layout record
    batches of at most :data:`BATCH_ROWS` rows, each with its metadata (its crc)."""
    out = []
    for start in range(0, len(entries), BATCH_ROWS):
        part = entries[start:start + BATCH_ROWS]
        blob = pickled([e[1] if e[2] is None else None for e in part])
        batch = pa.record_batch([pa.array([e[0] for e in part], pa.string()),
                                 pa.array([e[2] or "" for e in part], pa.string()),
                                 pa.array([blob] + [b""] * (len(part) - 1), pa.binary())], schema=BATCHED)
        out.append((batch, {"crc": str(batch_crc(batch))}))
    return out


def write_batch(writer: Any, entries: Sequence[tuple[str, Any, str | None]]) -> None:
    """Append ``entries`` (identity, results or None, error text or None) as batched-layout
    record batches of at most :data:`BATCH_ROWS` rows."""
    for batch, meta in batches(entries):
        writer.write_batch(batch, custom_metadata=meta)


def is_segment(data: bytes) -> bool:
    """Whether ``data`` starts as a journal segment (an Arrow stream with a segment's schema)."""
    try:
        names: list[str] = pa.ipc.open_stream(pa.py_buffer(data)).schema.names
    except Exception:
        return False
    return bool(names == BATCHED.names or names[:4] == SCHEMA.names)


def read_outcomes(data: bytes) -> tuple[Outcomes, int]:
    """The outcomes in one segment's bytes (results unpickled), and how many rows were skipped
    (a checksum that does not match). A broken tail (a killed writer) ends the reading; complete
    batches before it count. A result outranks a kept error of the same identity."""
    found: Outcomes = {}
    skipped = 0
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data))
    except Exception:
        return found, skipped  # not even a whole schema: an empty or foreign file
    batched = reader.schema.names == BATCHED.names
    if not batched and reader.schema.names[:4] != SCHEMA.names:
        return found, skipped
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        except Exception:
            break  # a truncated or corrupt batch: what came before stands
        try:
            rows, bad = (_batched(batch, meta) if batched else _per_row(batch))
        except Exception:
            rows, bad = [], batch.num_rows  # unreadable though whole: skipped, the next batch may be fine
        skipped += bad
        if type(rows) is dict:  # results only (the common batch): one C-level update
            found.update(rows)
            continue
        for identity, results, error in rows:
            if results is None and identity in found:
                continue
            found[identity] = (results, error)
    return found, skipped


def _batched(batch: pa.RecordBatch, meta: Any) -> tuple[Any, int]:
    """A batch's rows as a list of (identity, results, error), or as a dict identity -> (results,
    None) when it holds no error (a result always wins, so it can be merged in one update)."""
    if meta is None or batch_crc(batch) != int(meta[b"crc"]):
        return [], batch.num_rows
    ids = batch.column(0).to_pylist()
    results = pickle.loads(batch.column(2)[0].as_buffer()) if batch.num_rows else []
    if len(results) != len(ids):
        return [], batch.num_rows
    errors = batch.column(1)
    if pc.max(pc.binary_length(errors)).as_py() in (None, 0):
        return dict(zip(ids, zip(results, itertools.repeat(None)))), 0
    return [(i, None, e) if e else (i, r, None) for i, e, r in zip(ids, errors.to_pylist(), results)], 0


def _per_row(batch: pa.RecordBatch) -> tuple[list[tuple[str, Any, str | None]], int]:
    ids, payloads, errors, crcs = (batch.column(i).to_pylist() for i in range(4))
    rows, bad = [], 0
    for identity, payload, error, check in zip(ids, payloads, errors, crcs):
        if identity is None or check != crc(identity, payload, error):
            bad += 1
            continue
        rows.append((identity, None if payload is None else pickle.loads(payload), error))
    return rows, bad


def read_segment(data: bytes) -> tuple[dict[str, tuple[bytes | None, str | None]], int]:
    """:func:`read_outcomes` with each row's results pickled on its own (the per-row layout's
    form, what ``aiospark journal`` reads and compacts): slower, for tools, not tasks."""
    found, skipped = read_outcomes(data)
    return {i: (None if r is None else pickle.dumps(r, PICKLE_PROTOCOL), e) for i, (r, e) in found.items()}, skipped
