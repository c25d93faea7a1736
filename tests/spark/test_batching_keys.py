"""Batched calls (batch_size) and key-ordered output (key=) through the Spark entry points, on the
classic session: batch and Structured Streaming (with a cost-weighted rate limit too). (Connect:
tests/isolated/connect.)"""
from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import aiospark

# -- functions run on the workers (pickled by reference to this module) -----------------------------


async def double_batch(rows):
    await asyncio.sleep(0.002)
    sizes = len(rows)
    return [{"id": r["id"], "doubled": r["id"] * 2, "batch": sizes} for r in rows]


async def fails_on_13(rows):
    await asyncio.sleep(0.001)
    if any(r["id"] % 100 == 13 for r in rows):
        raise ValueError("id ending in 13 is refused")
    return [{"id": r["id"], "doubled": r["id"] * 2, "batch": len(rows)} for r in rows]


async def too_few(rows):
    return [{"id": r["id"], "doubled": 0, "batch": 0} for r in rows[1:]]


async def double_arrow(batch):
    import pyarrow as pa
    import pyarrow.compute as pc

    await asyncio.sleep(0.002)
    ids = batch.column("id")
    return pa.record_batch({"id": ids, "doubled": pc.multiply(ids, 2), "batch": pa.array([len(ids)] * len(ids))})


async def upper_batch(names, ids):
    await asyncio.sleep(0.002)
    return [f"{n.upper()}-{i}" for n, i in zip(names, ids)]


async def lengths_batch(names):
    return [len(n) for n in names]


async def apply_change(row):
    # the result depends on the order per key: the running balance is kept by this worker
    await asyncio.sleep(random.random() * 0.004)
    state = _BALANCES.setdefault((os.getpid(), row["run"]), {})
    balance = state.get(row["account"], 0) + row["delta"]
    state[row["account"]] = balance
    return {"account": row["account"], "seq": row["seq"], "balance": balance}


_BALANCES: dict = {}


# -- batch DataFrames ---------------------------------------------------------------------------------


def test_ordered_wait_batches_keep_partition_order(spark):
    df = spark.range(0, 2000, numPartitions=2)
    out = aiospark.ordered_wait(df, double_batch, "id LONG, doubled LONG, batch INT", capacity=128,
                                batch_size=32, batch_delay=0.05)
    rows = out.collect()
    assert [r.id for r in rows] == list(range(2000))
    assert all(r.doubled == 2 * r.id for r in rows)
    assert max(r.batch for r in rows) == 32
    assert sum(1 for r in rows if r.batch == 32) >= 1800  # nearly all rows went in full batches
    assert out.aiospark_metrics.total.calls < 200  # ~63 batch calls, not 2000


def test_unordered_wait_split_on_failure_leaves_one_error_row_per_bad_row(spark):
    df = spark.range(0, 1000, numPartitions=2)
    out = aiospark.unordered_wait(df, fails_on_13, "id LONG, doubled LONG, batch INT", capacity=64,
                                  batch_size=64, on_error="row")
    rows = out.collect()
    bad = sorted(r._input.id for r in rows if r._error is not None)
    assert bad == [i for i in range(1000) if i % 100 == 13]
    assert all("refused" in r._error for r in rows if r._error is not None)
    good = sorted(r.id for r in rows if r._error is None)
    assert good == [i for i in range(1000) if i % 100 != 13]


def test_wrong_count_fails_the_task_naming_both_numbers(spark):
    df = spark.range(0, 10, numPartitions=1)
    out = aiospark.unordered_wait(df, too_few, "id LONG, doubled LONG, batch INT", capacity=10, batch_size=5)
    with pytest.raises(Exception) as info:
        out.collect()
    assert "returned 4 results for a batch of 5 inputs" in str(info.value)


def test_async_udf_batches_get_one_list_per_column(spark):
    upper = aiospark.async_udf("string", batch_size=16, capacity=64)(upper_batch)
    df = spark.createDataFrame([(f"n{i}", i) for i in range(300)], "name STRING, id INT").repartition(2)
    rows = df.select("id", upper("name", "id").alias("u")).collect()
    assert sorted((r.id, r.u) for r in rows) == [(i, f"N{i}-{i}") for i in range(300)]

    lengths = aiospark.async_udf("int", batch_size=8, capacity=8)(lengths_batch)
    spark.udf.register("name_length", lengths)
    got = spark.sql("SELECT name_length(name) AS n FROM VALUES ('a'), ('bbb'), ('cc') AS t(name)").collect()
    assert sorted(r.n for r in got) == [1, 2, 3]


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be an int >= 1"),
    ({"batch_size": 500}, "raise capacity to at least 500"),
    ({"batch_size": 8, "batch_delay": -0.1}, "batch_delay must be seconds >= 0"),
])
def test_bad_batch_arguments_fail_at_definition(spark, kwargs, message):
    df = spark.range(3)
    with pytest.raises(ValueError, match=message):
        aiospark.unordered_wait(df, double_batch, "id LONG", capacity=100, **kwargs)
    with pytest.raises(ValueError, match=message):
        aiospark.async_udf("int", capacity=100, **kwargs)


def _changes(n_accounts: int, n_changes: int, seed: int):
    rng = random.Random(seed)
    return [(rng.randrange(n_accounts), seq, rng.randrange(-100, 100)) for seq in range(n_changes)]


def _expected_balances(changes):
    balance, out = {}, {}
    for account, seq, delta in changes:
        balance[account] = balance.get(account, 0) + delta
        out[seq] = balance[account]
    return out


def test_key_ordered_change_stream_reaches_the_right_final_state(spark):
    changes = _changes(25, 3000, seed=3)
    # one partition holding the stream in order (a keyed source would give each key one partition)
    df = spark.createDataFrame([(a, s, d, "batch") for a, s, d in changes],
                               "account INT, seq INT, delta INT, run STRING").coalesce(1)
    out = aiospark.unordered_wait(df, apply_change, "account INT, seq INT, balance LONG", capacity=100,
                                  key="account")
    rows = out.collect()
    assert {r.seq: r.balance for r in rows} == _expected_balances(changes)
    per_key = {}
    for r in rows:  # emitted in input order per key
        per_key.setdefault(r.account, []).append(r.seq)
    assert all(seqs == sorted(seqs) for seqs in per_key.values())


def test_key_that_is_not_a_column_fails_at_definition(spark):
    df = spark.range(3)
    with pytest.raises(ValueError, match=r"'acount' is not a column of the DataFrame \(its columns: id\)"):
        aiospark.unordered_wait(df, apply_change, "id LONG", key="acount")
    with pytest.raises(TypeError, match="column name or a non-empty list"):
        aiospark.unordered_wait(df, apply_change, "id LONG", key=[])
    with pytest.raises(ValueError, match="key= and batch_size= do not go together"):
        aiospark.unordered_wait(df, double_batch, "id LONG", key="id", batch_size=4)


# -- Structured Streaming -------------------------------------------------------------------------


def _run_stream(spark, out, tmp_path: Path, name: str):
    query = (out.writeStream.format("parquet").option("path", str(tmp_path / "sink"))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).queryName(name)
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), f"{name} did not finish"
        assert query.exception() is None, str(query.exception())
    finally:
        if query.isActive:
            query.stop()
    return spark.read.parquet(str(tmp_path / "sink")).collect()


@pytest.mark.timeout(300)
def test_streaming_batches_and_key_order(spark, tmp_path):
    inbox = tmp_path / "in"
    inbox.mkdir()
    changes = _changes(10, 600, seed=11)
    for f in range(3):  # three files = three micro-batches, each one partition in input order
        part = changes[f * 200:(f + 1) * 200]
        (inbox / f"part-{f}.json").write_text("".join(
            json.dumps({"account": a, "seq": s, "delta": d, "run": "stream"}) + "\n" for a, s, d in part))
    stream = spark.readStream.schema("account INT, seq INT, delta INT, run STRING") \
        .option("maxFilesPerTrigger", 1).json(str(inbox))

    keyed = aiospark.unordered_wait(stream, apply_change, "account INT, seq INT, balance LONG", capacity=50,
                                    key="account")
    rows = _run_stream(spark, keyed, tmp_path / "keyed", "aiospark_key_order")
    assert sorted(r.seq for r in rows) == list(range(600))
    # the sink writes each task's rows in the order they left the operator: per key, input order
    files = sorted((tmp_path / "keyed" / "sink").glob("part-*.parquet"))
    assert len(files) >= 3
    for path in files:
        table = pq.read_table(path).to_pylist()
        per_key = {}
        for r in table:
            per_key.setdefault(r["account"], []).append(r["seq"])
        assert all(seqs == sorted(seqs) for seqs in per_key.values()), path.name

    # a cost-weighted rate limit in a streaming query: 600 rows of cost 2 at 2000 units/s (burst 50)
    limit = aiospark.RateLimit(2000, burst=50, cost=lambda row: 2)
    metrics = aiospark.Metrics("streamed")
    limited = aiospark.unordered_wait(stream, apply_change, "account INT, seq INT, balance LONG", capacity=50,
                                      rate_limit=limit, metrics=metrics)
    rows = _run_stream(spark, limited, tmp_path / "limited", "aiospark_cost_limit")
    assert sorted(r.seq for r in rows) == list(range(600))
    assert metrics.total.rate_limited > 0 and metrics.total.calls == 600

    batched = aiospark.ordered_wait(stream.selectExpr("CAST(seq AS LONG) AS id"), double_batch,
                                    "id LONG, doubled LONG, batch INT", capacity=64, batch_size=16)
    rows = _run_stream(spark, batched, tmp_path / "batched", "aiospark_batches")
    assert sorted(r.id for r in rows) == list(range(600))
    assert all(r.doubled == 2 * r.id for r in rows) and max(r.batch for r in rows) == 16

    columnar = aiospark.unordered_wait(stream.selectExpr("CAST(seq AS LONG) AS id"), double_arrow,
                                       "id LONG, doubled LONG, batch INT", capacity=64, batch_size=16,
                                       batch_format="pyarrow")
    rows = _run_stream(spark, columnar, tmp_path / "columnar", "aiospark_columnar")
    assert sorted(r.id for r in rows) == list(range(600))
    assert all(r.doubled == 2 * r.id for r in rows) and max(r.batch for r in rows) == 16
