"""Key runs on the table route (aiospark.spark.table_runs): a task whose rows can have no outcome of
its own sends the operator one row per run of equal keys, and every row of the run takes that
call's outputs. The unit tests drive :class:`KeyRuns` over Arrow batches; the Spark tests check,
through ``unordered_wait``, that runs cut by Arrow batches, NULL keys, several output rows, a
timeout's fallback and ``idempotency_key()`` behave as they do row by row.
"""
from __future__ import annotations

import asyncio
import os
import types
from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark import AsyncFunction
from aiospark.spark.table_runs import KeyRuns
from tests.support.call_log import log_call, logged


def view():
    return types.SimpleNamespace(followers={}, unkeyed=set())


def batch(keys, nulls=False, second=None):
    columns = {"k": pa.array(keys, pa.int64()), "id": pa.array(range(len(keys)), pa.int64())}
    if second is not None:
        columns["k2"] = pa.array(second, pa.string())
    return pa.record_batch(columns)


def runs_of(batches, keys=("k",), nulls=False):
    """(first rows' ids in the order they were released, followers by id, unkeyed ids)."""
    v = view()
    runs = KeyRuns(v, list(keys), ["id", *keys], nulls)
    out, offset = [], 0
    for b in batches:
        shifted = b.set_column(b.schema.get_field_index("id"), "id", pa.array(range(offset, offset + b.num_rows)))
        offset += b.num_rows
        out += runs.take(shifted)
    out += runs.end()
    followers = {row["id"]: v.followers[id(row)] for row in out if id(row) in v.followers}
    unkeyed = [row["id"] for row in out if id(row) in v.unkeyed]
    return [row["id"] for row in out], followers, unkeyed


def test_runs_cut_by_batches_are_one_run_each():
    firsts, followers, unkeyed = runs_of([batch([1, 1, 2]), batch([2, 2, 3]), batch([3]), batch([3, 4])])
    assert firsts == [0, 2, 5, 8]
    assert followers == {0: 1, 2: 2, 5: 2}
    assert unkeyed == []


def test_a_batch_inside_one_run_releases_nothing_until_the_key_changes():
    v = view()
    runs = KeyRuns(v, ["k"], ["id", "k"], False)
    assert [r["id"] for r in runs.take(batch([7, 7]))] == []
    assert runs.take(batch([7, 7, 7])) == []
    released = runs.take(batch([8]))
    assert [r["k"] for r in released] == [7] and v.followers[id(released[0])] == 4
    last = runs.end()
    assert [r["k"] for r in last] == [8] and id(last[0]) not in v.followers
    assert runs.end() == []


def test_distinct_keys_register_no_followers():
    firsts, followers, _ = runs_of([batch(list(range(10))), batch(list(range(10, 20)))])
    assert firsts == list(range(20)) and followers == {}


def test_null_keys_without_an_identity_are_runs_of_their_own_and_never_recorded():
    firsts, followers, unkeyed = runs_of([batch([None, None, 1, 1]), batch([None, 2, 2])])
    assert firsts == [0, 1, 2, 4, 5]
    assert followers == {2: 1, 5: 1}
    assert unkeyed == [0, 1, 4]


def test_a_null_key_held_back_at_a_batch_end_stays_unkeyed():
    firsts, followers, unkeyed = runs_of([batch([1, None]), batch([None])])
    assert firsts == [0, 1, 2] and followers == {} and unkeyed == [1, 2]


def test_where_nulls_are_values_the_join_columns_decide_and_a_key_of_two_columns_differs_in_either():
    b1 = batch([1, 1, 1, 2], second=["a", "b", "b", "b"])
    b2 = batch([2, 2], second=["b", "c"])
    firsts, followers, unkeyed = runs_of([b1, b2], keys=("k", "k2"), nulls=True)
    assert firsts == [0, 1, 3, 5]
    assert followers == {1: 1, 3: 1}
    assert unkeyed == []


# --- through unordered_wait --------------------------------------------------------------------------------


class Echo:
    def __init__(self, log):
        self.log = log

    async def __call__(self, row):
        log_call(self.log, [row["key"]])
        return None if row["key"] is not None and row["key"] % 5 == 4 else {"key": row["key"], "v": f"v:{row['key']}"}


class Many(AsyncFunction):
    """0, 1 or 3 rows per input, by the key."""

    def __init__(self, log):
        self.log = log

    async def async_invoke(self, row):
        log_call(self.log, [row["key"]])
        return [{"key": row["key"], "i": i} for i in range({0: 0, 1: 1}.get(row["key"] % 3, 3))]


def expected_echo(keys):
    return Counter((k, f"v:{k}") for k in keys if k is None or k % 5 != 4)


@pytest.fixture
def small_batches(spark):
    before = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    yield
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", before)


def hot_keys(spark, parts=3):
    """Keys 0..39, key k held by k % 23 + 1 rows: runs of 1 to 23 rows, cut by batches of 7."""
    keys = [k for k in range(40) for _ in range(k % 23 + 1)]
    rows = [(i, k) for i, k in enumerate(keys)]
    return spark.createDataFrame(rows, "id LONG, key LONG").repartition(parts), keys


def test_runs_across_batches_call_each_key_once_and_every_row_gets_its_outputs(spark, tmp_path, small_batches):
    log, loc = str(tmp_path / "log"), str(tmp_path / "j")
    df, keys = hot_keys(spark)
    out = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    assert Counter(tuple(r) for r in out.collect()) == expected_echo(keys)
    assert Counter(k for [k] in logged(log)) == Counter(range(40))  # each key once, no row too many
    again = aiospark.unordered_wait(df.repartition(5), Echo(log), "key LONG, v STRING",
                                    journal=aiospark.Journal(loc, key="key")).collect()
    assert Counter(tuple(r) for r in again) == expected_echo(keys)
    assert len(logged(log)) == 40  # the rerun is served, the keys that gave no row included


def test_several_rows_or_none_per_call_are_given_to_every_row_of_the_run(spark, tmp_path, small_batches):
    log, loc = str(tmp_path / "log"), str(tmp_path / "j")
    df, keys = hot_keys(spark, parts=2)
    want = Counter((k, i) for k in keys for i in range({0: 0, 1: 1}.get(k % 3, 3)))
    for _ in range(2):
        out = aiospark.unordered_wait(df, Many(log), "key LONG, i INT", journal=aiospark.Journal(loc, key="key"))
        assert Counter(tuple(r) for r in out.collect()) == want
    assert sorted(k for [k] in logged(log)) == list(range(40))


def test_rows_whose_key_is_null_are_each_called_and_never_recorded(spark, tmp_path, small_batches):
    log, loc = str(tmp_path / "log"), str(tmp_path / "j")
    keys = [None, 1, None, 1, 2, None, 2, 2, None] * 3
    df = spark.createDataFrame(list(enumerate(keys)), "id LONG, key LONG").repartition(2)
    for run in range(2):
        out = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
        assert Counter(tuple(r) for r in out.collect()) == expected_echo(keys)
        calls = Counter(k for [k] in logged(log))
        assert calls == Counter({None: 12 * (run + 1), 1: 1, 2: 1}), calls


def test_null_keys_are_one_key_where_nulls_are_values(spark, tmp_path, small_batches):
    log, loc = str(tmp_path / "log"), str(tmp_path / "j")
    keys = [None, 1, None, 1, 2, None] * 4
    df = spark.createDataFrame([(k,) for k in keys], "key LONG").repartition(2)
    for _ in range(2):  # the default key (every column): NULL is a value, called once, recorded
        out = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc))
        assert Counter(tuple(r) for r in out.collect()) == expected_echo(keys)
    assert Counter(k for [k] in logged(log)) == Counter({None: 1, 1: 1, 2: 1})


class SlowFirst(AsyncFunction):
    """Key 3 takes 5 s (past the 1 s timeout) while the file ``flag`` exists; ``timeout()`` falls back."""

    def __init__(self, log, flag):
        self.log, self.flag = log, flag

    async def async_invoke(self, row):
        log_call(self.log, [row["key"]])
        if row["key"] == 3 and await asyncio.to_thread(os.path.exists, self.flag):
            await asyncio.sleep(5)
        return [{"key": row["key"], "v": f"v:{row['key']}"}]

    def timeout(self, value):
        return [{"key": value["key"], "v": "FALLBACK"}]


def test_a_timeouts_fallback_goes_to_the_whole_run_and_is_not_recorded(spark, tmp_path, small_batches):
    log, loc, flag = str(tmp_path / "log"), str(tmp_path / "j"), tmp_path / "slow"
    flag.write_text("")
    keys = [k for k in range(6) for _ in range(k + 2)]
    df = spark.createDataFrame([(k,) for k in keys], "key LONG").repartition(2)
    out = aiospark.unordered_wait(df, SlowFirst(log, str(flag)), "key LONG, v STRING", timeout=1.0,
                                  journal=aiospark.Journal(loc, key="key")).collect()
    assert Counter(tuple(r) for r in out) == Counter((k, "FALLBACK" if k == 3 else f"v:{k}") for k in keys)
    flag.unlink()
    n = len(logged(log))
    out = aiospark.unordered_wait(df, SlowFirst(log, str(flag)), "key LONG, v STRING", timeout=1.0,
                                  journal=aiospark.Journal(loc, key="key")).collect()
    assert [k for [k] in logged(log)[n:]] == [3]  # only the fallback's key is asked again
    assert Counter(tuple(r) for r in out) == Counter((k, f"v:{k}") for k in keys)


async def idem(row):
    return {"key": row["key"], "k": aiospark.idempotency_key()}


def test_idempotency_keys_are_those_of_the_rows_called_one_by_one(spark, tmp_path, small_batches):
    keys = [k for k in range(12) for _ in range(k % 4 + 1)]
    df = spark.createDataFrame([(k,) for k in keys], "key LONG").repartition(2)
    runs = aiospark.unordered_wait(df, idem, "key LONG, k STRING", journal=aiospark.Journal(str(tmp_path / "a"),
                                                                                           key="key")).collect()
    one_by_one = aiospark.ordered_wait(df, idem, "key LONG, k STRING", journal=aiospark.Journal(str(tmp_path / "b"),
                                                                                               key="key")).collect()
    by_key = {r.key: r.k for r in one_by_one}
    assert len(set(by_key.values())) == 12
    assert Counter(tuple(r) for r in runs) == Counter((k, by_key[k]) for k in keys)


def test_many_rows_of_one_key_in_one_task(spark, tmp_path):
    log, loc = str(tmp_path / "log"), str(tmp_path / "j")
    df = spark.range(0, 30000, 1, 3).select((F.col("id") % 2).alias("key"))
    out = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    assert Counter(tuple(r) for r in out.collect()) == Counter({(0, "v:0"): 15000, (1, "v:1"): 15000})
    assert sorted(k for [k] in logged(log)) == [0, 1]
