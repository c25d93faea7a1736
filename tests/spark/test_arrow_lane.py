"""The columnar lane of the wait functions (``batch_size=n, batch_format="pyarrow"``) on a real local
Spark session: the function gets RecordBatch slices and returns Arrow; a slice succeeds or fails
as a whole; outputs are matched to the schema exactly; arguments are refused at definition time.
(Structured Streaming: test_batching_keys.py; Connect: tests/isolated/connect.)"""
from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import aiospark
from aiospark import AsyncFunction, RetryStrategy

# -- functions run on the workers (pickled by reference to this module) -----------------------------


async def doubled(batch: pa.RecordBatch) -> pa.RecordBatch:
    assert isinstance(batch, pa.RecordBatch)
    await asyncio.sleep(0.002)
    ids = batch.column("id")
    n = batch.num_rows
    # int32 and int64 into LONG/INT columns: cast only where no value changes
    return pa.record_batch({"id": ids, "doubled": pc.multiply(ids, 2),
                            "size": pa.array([n] * n, pa.int64())})


def _ends_in_13(batch: pa.RecordBatch) -> bool:
    return any(i % 100 == 13 for i in batch.column("id").to_pylist())


async def refuses_batches_with_13(batch: pa.RecordBatch) -> pa.RecordBatch:
    await asyncio.sleep(0.001)
    if _ends_in_13(batch):
        raise ValueError("a batch holding an id ending in 13 is refused")
    return pa.record_batch({"id": batch.column("id")})


async def one_row_short(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.record_batch({"id": batch.column("id")}).slice(1)


async def bad_output_for_13(batch: pa.RecordBatch) -> pa.Table:
    if _ends_in_13(batch):  # 1.5 into a LONG column: not exact
        return pa.table({"id": pa.array([1.5] * batch.num_rows)})
    return pa.table({"id": batch.column("id")})


async def slow_on_13(batch: pa.RecordBatch) -> pa.RecordBatch:
    await asyncio.sleep(30 if _ends_in_13(batch) else 0.001)
    return pa.record_batch({"id": batch.column("id")})


class SlowWithFallback(AsyncFunction):
    async def async_invoke(self, batch):
        await asyncio.sleep(30 if _ends_in_13(batch) else 0.001)
        return [pa.record_batch({"id": batch.column("id"), "source": pa.array(["call"] * batch.num_rows)})]

    def timeout(self, batch):
        return [pa.record_batch({"id": batch.column("id"), "source": pa.array(["fallback"] * batch.num_rows)})]


_ATTEMPTS: dict = {}


async def first_answer_is_empty(batch: pa.RecordBatch) -> pa.RecordBatch:
    key = batch.column("id")[0].as_py()
    _ATTEMPTS[key] = _ATTEMPTS.get(key, 0) + 1
    text = "" if _ATTEMPTS[key] == 1 else "ok"
    return pa.record_batch({"id": batch.column("id"), "text": pa.array([text] * batch.num_rows)})


def _retry_empty(results):
    assert all(isinstance(r, pa.RecordBatch) for r in results), results  # the function's own output
    return any(r.column("text")[0].as_py() == "" for r in results)


# -- batch DataFrames ---------------------------------------------------------------------------------


def test_ordered_wait_passes_record_batch_slices_and_keeps_partition_order(spark):
    df = spark.range(0, 3000, numPartitions=2)
    out = aiospark.ordered_wait(df, doubled, "id LONG, doubled LONG, size INT", capacity=256, batch_size=64,
                                batch_format="pyarrow")
    rows = out.collect()
    assert [r.id for r in rows] == list(range(3000))
    assert all(r.doubled == 2 * r.id for r in rows)
    assert max(r.size for r in rows) == 64 and sum(1 for r in rows if r.size == 64) >= 2800
    calls = out.aiospark_metrics.total.calls
    assert 3000 / 64 <= calls <= 3000 / 64 + 4, calls  # one call per slice (a partial one per partition end)


def test_a_failed_slice_gives_every_row_of_it_an_error_row_and_only_those(spark):
    df = spark.range(0, 1000, numPartitions=2)
    out = aiospark.unordered_wait(df, refuses_batches_with_13, "id LONG", capacity=64, batch_size=16,
                                  batch_format="pyarrow", on_error="row")
    rows = out.collect()
    assert len(rows) == 1000
    failed = sorted(r._input.id for r in rows if r._error is not None)
    # the slices are 16 rows of each partition's Arrow batch: every row of a slice holding *13 fails
    expected = sorted(i for s in range(0, 500, 16) for part in (0, 500)
                      for i in range(part + s, min(part + s + 16, part + 500))
                      if any(j % 100 == 13 for j in range(part + s, min(part + s + 16, part + 500))))
    assert failed == expected
    assert all(r._error == "ValueError: a batch holding an id ending in 13 is refused"
               for r in rows if r._error is not None)
    assert sorted(r.id for r in rows if r._error is None) == sorted(set(range(1000)) - set(expected))


def test_a_failed_slice_fails_the_task_naming_its_input(spark):
    df = spark.range(0, 200, numPartitions=1)
    out = aiospark.ordered_wait(df, refuses_batches_with_13, "id LONG", batch_size=32, batch_format="pyarrow")
    with pytest.raises(Exception) as info:
        out.collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "a batch holding an id ending in 13 is refused" in text, text[-2000:]
    assert "pyarrow.RecordBatch" in text, text[-2000:]  # the input named is the slice


def test_one_row_per_input_row_is_the_contract(spark):
    df = spark.range(0, 100, numPartitions=1)
    out = aiospark.ordered_wait(df, one_row_short, "id LONG", batch_size=10, batch_format="pyarrow")
    with pytest.raises(Exception, match=r"returned 9 rows for a batch of 10 inputs.*; for the batch of 10 input "
                                        r"rows starting with \[\{'id': 0\}\]"):
        out.collect()
    rows = aiospark.ordered_wait(df, one_row_short, "id LONG", batch_size=10, batch_format="pyarrow",
                                 on_error="row").collect()
    assert len(rows) == 100 and all(r.id is None and "returned 9 rows" in r._error for r in rows)


def test_an_output_that_does_not_fit_fails_or_becomes_error_rows_of_its_slice(spark):
    df = spark.range(0, 200, numPartitions=1)
    with pytest.raises(Exception, match=r"output column 'id' \(int64\), which does not fit exactly.*starting with "
                                        r"\[\{'id': 0\}\]"):
        aiospark.ordered_wait(df, bad_output_for_13, "id LONG", batch_size=20, batch_format="pyarrow").collect()
    rows = aiospark.ordered_wait(df, bad_output_for_13, "id LONG", batch_size=20, batch_format="pyarrow",
                                 on_error="row").collect()
    assert [r.id for r in rows if r._error is None] == [i for i in range(200) if i % 100 >= 20]
    bad = [r for r in rows if r._error is not None]
    assert [r._input.id for r in bad] == [i for i in range(200) if i % 100 < 20]
    assert all(r._error.startswith("OutputSchemaError: ") and "truncated" in r._error for r in bad), bad[0]._error


def test_a_slice_that_times_out_is_an_error_or_its_timeout_results(spark):
    df = spark.range(0, 100, numPartitions=1)
    rows = aiospark.unordered_wait(df, slow_on_13, "id LONG", batch_size=10, timeout=0.5, batch_format="pyarrow",
                                   on_error="row").collect()
    bad = sorted(r._input.id for r in rows if r._error is not None)
    assert bad == list(range(10, 20))
    assert all(r._error.startswith("AsyncTimeoutError") for r in rows if r._error is not None)

    rows = aiospark.ordered_wait(df, SlowWithFallback(), "id LONG, source STRING", batch_size=10, timeout=0.5,
                                 batch_format="pyarrow").collect()
    assert [r.id for r in rows] == list(range(100))
    assert [r.id for r in rows if r.source == "fallback"] == list(range(10, 20))


def test_a_retry_predicate_sees_the_functions_own_table(spark):
    df = spark.range(0, 64, numPartitions=1)
    retry = RetryStrategy.fixed_delay(3, 0.01, result_predicate=_retry_empty)
    out = aiospark.ordered_wait(df, first_answer_is_empty, "id LONG, text STRING", batch_size=16,
                                batch_format="pyarrow", retry=retry)
    rows = out.collect()
    assert [r.text for r in rows] == ["ok"] * 64
    assert out.aiospark_metrics.total.retries == 4 and out.aiospark_metrics.total.calls == 8


def test_a_budget_charges_a_slice_its_rows(spark):
    budget = aiospark.Budget(100)
    df = spark.range(0, 300, numPartitions=1)
    rows = aiospark.ordered_wait(df, doubled, "id LONG, doubled LONG, size INT", batch_size=25, capacity=25,
                                 batch_format="pyarrow", budget=budget, on_error="row").collect()
    assert sum(1 for r in rows if r._error is None) == 100
    assert all(r._error.startswith("BudgetExhausted") for r in rows if r._error is not None)
    assert budget.started == 100


# -- definition-time errors ---------------------------------------------------------------------------


def test_arguments_are_refused_before_any_job(spark, tmp_path):
    df = spark.range(3)
    with pytest.raises(ValueError, match=r"batch_format must be one of \('rows', 'pyarrow'\)"):
        aiospark.ordered_wait(df, doubled, "id LONG", batch_size=4, batch_format="arrow")
    with pytest.raises(ValueError, match="batch_format='pyarrow' needs batch_size="):
        aiospark.ordered_wait(df, doubled, "id LONG", batch_format="pyarrow")
    with pytest.raises(ValueError, match="takes a number for capacity"):
        aiospark.ordered_wait(df, doubled, "id LONG", batch_size=4, capacity="auto", batch_format="pyarrow")
    with pytest.raises(ValueError, match="the rate_limit's cost"):
        aiospark.ordered_wait(df, doubled, "id LONG", batch_size=4, batch_format="pyarrow",
                              rate_limit=aiospark.RateLimit(10, cost=lambda row: 1))
    with pytest.raises(ValueError, match="the budget's cost"):
        aiospark.ordered_wait(df, doubled, "id LONG", batch_size=4, batch_format="pyarrow",
                              budget=aiospark.Budget(10, cost=lambda row: 1))
    with pytest.raises(ValueError, match="a journal records rows one by one"):
        aiospark.ordered_wait(df, doubled, "id LONG", batch_size=4, batch_format="pyarrow",
                              journal=aiospark.Journal(str(tmp_path)))


def test_the_rows_lane_is_unchanged_by_batch_format_rows(spark):
    async def rows_fn(rows):
        assert isinstance(rows, list) and isinstance(rows[0], dict)
        return [{"id": r["id"]} for r in rows]

    rows = aiospark.ordered_wait(spark.range(0, 50, numPartitions=1), rows_fn, "id LONG", batch_size=8,
                                 batch_format="rows").collect()
    assert [r.id for r in rows] == list(range(50))


def test_python_rows_from_a_pyarrow_function_are_refused_naming_the_contract(spark):
    async def returns_dicts(batch):
        return [{"id": 1}] * batch.num_rows

    df = spark.range(0, 10, numPartitions=1)
    with pytest.raises(Exception, match="returns a pyarrow.RecordBatch or pyarrow.Table"):
        aiospark.ordered_wait(df, returns_dicts, "id LONG", batch_size=5, batch_format="pyarrow").collect()

