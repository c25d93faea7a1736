"""Segment bytes: the batched layout (one pickle and one crc per batch) and the per-row layout
journals were first written in, both read; a damaged batch costs only its own rows."""
from __future__ import annotations

import pyarrow as pa

from aiospark.journal.segment import BATCH_ROWS, BATCHED, SCHEMA, crc, pickled, read_outcomes, write_batch


def stream(schema, write) -> bytes:
    sink = pa.BufferOutputStream()
    writer = pa.ipc.new_stream(sink, schema)
    write(writer)
    writer.close()
    return sink.getvalue().to_pybytes()


def test_batched_layout_round_trip_results_errors_and_precedence():
    entries = [("[1]", [{"id": 1}], None), ("[2]", None, "ValueError: no"), ("[3]", [], None), ("[4]", [None], None)]
    data = stream(BATCHED, lambda w: (write_batch(w, entries), write_batch(w, [("[2]", [{"id": 2}], None),
                                                                          ("[1]", None, "KeyError: late")])))
    found, skipped = read_outcomes(data)
    assert skipped == 0
    # a result outranks a kept error, whichever came first
    assert found == {"[1]": ([{"id": 1}], None), "[2]": ([{"id": 2}], None), "[3]": ([], None), "[4]": ([None], None)}


def test_a_flush_larger_than_a_batch_is_split():
    entries = [(f"[{i}]", [i], None) for i in range(BATCH_ROWS + 5)]
    data = stream(BATCHED, lambda w: write_batch(w, entries))
    reader = pa.ipc.open_stream(data)
    assert [b.num_rows for b in reader] == [BATCH_ROWS, 5]
    assert len(read_outcomes(data)[0]) == BATCH_ROWS + 5


def test_a_damaged_batch_loses_only_its_rows():
    data = stream(BATCHED, lambda w: [write_batch(w, [(f"[{i}]", [i], None) for i in range(b * 10, b * 10 + 10)])
                                      for b in range(3)])
    flipped = bytearray(data)
    at = data.index(b"[15]")
    flipped[at + 2] = ord("6")  # batch 2 now says [16] twice: its crc fails
    found, skipped = read_outcomes(bytes(flipped))
    assert skipped == 10 and sorted(found) == sorted(f"[{i}]" for i in [*range(10), *range(20, 30)])
    assert found["[25]"] == ([25], None)


def test_the_per_row_layout_is_still_read():
    rows = [("[1]", pickled([{"id": 1}]), None), ("[2]", None, "ValueError: no"), ("[3]", pickled([3]), None)]
    bad = ("[9]", pickled([9]), None)

    def write(writer):
        writer.write_batch(pa.record_batch(
            [pa.array([r[0] for r in rows + [bad]], pa.string()), pa.array([r[1] for r in rows + [bad]], pa.binary()),
             pa.array([r[2] for r in rows + [bad]], pa.string()),
             pa.array([crc(*r) for r in rows] + [crc(*bad) ^ 1], pa.uint32())], schema=SCHEMA))

    found, skipped = read_outcomes(stream(SCHEMA, write))
    assert skipped == 1
    assert found == {"[1]": ([{"id": 1}], None), "[2]": (None, "ValueError: no"), "[3]": ([3], None)}
