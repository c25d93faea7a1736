"""The table route of ``unordered_wait`` with a directory journal (issue 48, scale): recorded rows are
served by a Spark join on the key columns, results are kept as typed Parquet, the other rows are
called sorted by key. Calls are counted with a call log every Python worker appends to; every
answer is a pure function of its question, so each row is checked against that function.
"""
from __future__ import annotations

import datetime as dt
import decimal
import glob
import os
import time
from collections import Counter

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark import AsyncFunction
from tests.support.call_log import log_call, logged


def table_files(location: str) -> list[str]:
    return glob.glob(os.path.join(location, "*", "table", "**", "*.parquet"), recursive=True)


class Echo:
    """``async def`` answering ``(key, v)`` from the row's key alone; logs each call."""

    def __init__(self, log: str, column: str = "key"):
        self.log = log
        self.column = column

    async def __call__(self, row):
        log_call(self.log, [row[self.column]])
        return {"key": row[self.column], "v": f"v:{row[self.column]}"}


class Many(AsyncFunction):
    """0, 1 or 3 rows per input, by the key (``k % 3``)."""

    def __init__(self, log: str):
        self.log = log

    async def async_invoke(self, row):
        log_call(self.log, [row["k"]])
        return [{"k": row["k"], "i": i} for i in range(row["k"] % 3 if row["k"] % 3 != 2 else 3)]


def multiset(rows) -> Counter:
    return Counter(tuple(r) for r in rows)


def test_a_rerun_is_served_by_spark_and_equal_keys_are_called_once(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 3000, 1, 3).select("id", (F.col("id") % 700).alias("key"))
    first = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    rows = first.collect()
    assert len(logged(log)) == 700 and len({k for [k] in logged(log)}) == 700  # each key once per job
    assert multiset(rows) == Counter((i % 700, f"v:{i % 700}") for i in range(3000))
    assert table_files(loc), "the results are kept as Parquet"
    for n in (1, 4, 7):
        again = aiospark.unordered_wait(df.repartition(n), Echo(log), "key LONG, v STRING",
                                        journal=aiospark.Journal(loc, key="key"))
        assert multiset(again.collect()) == multiset(rows)
        assert len(logged(log)) == 700, f"a rerun over repartition({n}) called again"
    more = spark.range(0, 4000, 1, 2).select("id", (F.col("id") % 900).alias("key"))
    out = aiospark.unordered_wait(more, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    assert multiset(out.collect()) == Counter((i % 900, f"v:{i % 900}") for i in range(4000))
    assert sorted(k for [k] in logged(log)[700:]) == list(range(700, 900))  # only the new keys


def test_null_keys_are_called_each_time_and_the_default_key_serves_nulls(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    data = [(i, None if i % 4 == 0 else f"k{i % 5}") for i in range(40)]
    df = spark.createDataFrame(data, "id LONG, key STRING")
    expected = Counter((k, f"v:{k}") for _, k in data)
    for _ in range(2):  # an explicit key: a NULL is no identity, called every run, never served
        out = aiospark.unordered_wait(df, Echo(log), "key STRING, v STRING", journal=aiospark.Journal(loc, key="key"))
        assert multiset(out.collect()) == expected
    nulls = sum(1 for _, k in data if k is None)
    assert Counter(k for [k] in logged(log))[None] == 2 * nulls
    assert sorted(k for [k] in logged(log) if k is not None) == ["k0", "k1", "k2", "k3", "k4"]  # once, then served

    log2, loc2 = str(tmp_path / "calls2"), str(tmp_path / "j2")
    whole = df.select("key")  # the default key: every column, NULL a value like any other
    for _ in range(2):
        out = aiospark.unordered_wait(whole, Echo(log2), "key STRING, v STRING", journal=aiospark.Journal(loc2))
        assert multiset(out.collect()) == expected
    assert Counter(k for [k] in logged(log2)) == Counter([None, "k0", "k1", "k2", "k3", "k4"])


def test_zero_one_or_many_results_and_none_come_back_as_called(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 60, 1, 2).select((F.col("id") % 30).alias("k"))
    runs = [multiset(aiospark.unordered_wait(df, Many(log), "k LONG, i INT",
                                             journal=aiospark.Journal(loc, key="k")).collect()) for _ in range(2)]
    assert runs[0] == runs[1] and sum(runs[0].values()) == 2 * (10 * 1 + 10 * 3)
    assert len(logged(log)) == 30

    log2, loc2 = str(tmp_path / "calls2"), str(tmp_path / "j2")

    async def some(row):
        log_call(log2, [row["k"]])
        return None if row["k"] % 2 else {"k": row["k"]}

    outs = [sorted(r.k for r in aiospark.unordered_wait(df, some, "k LONG NOT NULL",
                                                        journal=aiospark.Journal(loc2, key="k")).collect())
            for _ in range(2)]
    assert outs[0] == outs[1] == sorted(k for k in (i % 30 for i in range(60)) if k % 2 == 0)
    assert len(logged(log2)) == 30


def test_error_rows_keep_their_own_input_and_kept_errors_are_served(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")

    async def fails_on_odd(row):
        log_call(log, [row["key"]])
        if row["key"] % 2:
            raise ValueError(f"odd {row['key']}")
        return {"key": row["key"], "v": f"v:{row['key']}"}

    df = spark.range(0, 40, 1, 2).select("id", (F.col("id") % 10).alias("key"))
    journal = aiospark.Journal(loc, key="key", keep_errors=True)
    for run in range(2):
        rows = aiospark.unordered_wait(df, fails_on_odd, "key LONG, v STRING", on_error="row",
                                       journal=journal).collect()
        assert len(rows) == 40
        errors = [r for r in rows if r._error is not None]
        assert sorted(r._input.id for r in errors) == [i for i in range(40) if i % 10 % 2]  # each its own input
        assert all(r._error == f"ValueError: odd {r._input.key}" for r in errors)
        assert sorted((r.key, r.v) for r in rows if r._error is None) == sorted(
            (i % 10, f"v:{i % 10}") for i in range(40) if i % 10 % 2 == 0)
        assert len(logged(log)) == 10, f"run {run}: each key is called once, then served (errors kept)"
    plain = aiospark.unordered_wait(df, fails_on_odd, "key LONG, v STRING", on_error="row",
                                    journal=aiospark.Journal(loc, key="key"))
    assert len(plain.collect()) == 40
    assert sorted(k for [k] in logged(log)[10:]) == [1, 3, 5, 7, 9]  # without keep_errors: errors called again


def test_other_entry_points_the_plan_and_the_cli_see_the_table(spark, tmp_path, capsys):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 500, 1, 2).select("id", (F.col("id") % 50).alias("key"))
    aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key")).collect()
    assert len(logged(log)) == 50
    ordered = aiospark.ordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    assert [tuple(r) for r in ordered.collect()] == [(i % 50, f"v:{i % 50}") for i in range(500)]
    assert len(logged(log)) == 50, "ordered_wait found the table's results"
    plan = aiospark.plan(aiospark.unordered_wait, df, Echo(log), "key LONG, v STRING",
                         journal=aiospark.Journal(loc, key="key"))
    assert (plan.rows, plan.distinct_keys, plan.recorded, plan.calls) == (500, 50, 50, 0)
    from aiospark.app.cli import main

    assert main(["journal", loc]) == 0
    text = capsys.readouterr().out
    assert "50 results" in text.replace(",", ""), text


def test_writers_that_overlapped_still_give_one_answer_per_row(spark, tmp_path):
    """Two runs defined before either ran: the second's snapshot of the table missed what the first
    recorded, so both record the same keys; a later run must still give each row one answer."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 200, 1, 2).select("id", (F.col("id") % 20).alias("key"))
    one = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    two = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    expected = Counter((i % 20, f"v:{i % 20}") for i in range(200))
    assert multiset(one.collect()) == expected and multiset(two.collect()) == expected
    assert len(logged(log)) == 40  # the documented cost of a stale snapshot: both runs called every key
    three = aiospark.unordered_wait(df, Echo(log), "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
    assert multiset(three.collect()) == expected and len(logged(log)) == 40


def test_keys_of_every_joinable_type_and_names_spark_would_misread(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    rows = [(i, f"s{i % 3}", decimal.Decimal(f"{i % 3}.10"), dt.date(2020, 1, 1 + i % 3), bytes([i % 3]), i % 2 == 0)
            for i in range(30)]
    df = spark.createDataFrame(rows, "id LONG, `a.b` STRING, d DECIMAL(5,2), day DATE, raw BINARY, flag BOOLEAN")
    keys = ["a.b", "d", "day", "raw", "flag"]

    async def answer(row):
        log_call(log, [repr(row[k]) for k in keys])
        return {"a.b": row["a.b"], "id": -1, "d": row["d"]}

    outs = [multiset(aiospark.unordered_wait(df, answer, "`a.b` STRING, id LONG, d DECIMAL(5,2)",
                                             journal=aiospark.Journal(loc, key=keys)).collect()) for _ in range(2)]
    assert outs[0] == outs[1] == Counter((f"s{i % 3}", -1, decimal.Decimal(f"{i % 3}.10")) for i in range(30))
    distinct = len({(i % 3, i % 2) for i in range(30)})
    assert len(logged(log)) == distinct and table_files(loc)


def test_a_float_key_takes_the_bucket_route(spark, tmp_path):
    """Spark's join folds NaN and -0.0; the row identity does not: such keys are not joined."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.createDataFrame([(0.0,), (-0.0,), (float("nan"),), (1.5,)] * 3, "key DOUBLE")

    async def sign(row):
        log_call(log, [repr(row["key"])])
        return {"key": row["key"], "v": repr(row["key"])}

    for _ in range(2):
        out = aiospark.unordered_wait(df, sign, "key DOUBLE, v STRING", journal=aiospark.Journal(loc, key="key"))
        assert sorted(r.v for r in out.collect()) == sorted(["0.0", "-0.0", "nan", "1.5"] * 3)
    assert sorted(k for [k] in logged(log)) == sorted(["0.0", "-0.0", "nan", "1.5"])
    assert not table_files(loc)


def test_an_answer_that_does_not_fit_the_schema_is_an_error_row_never_a_recorded_result(spark, tmp_path):
    """``v STRING NOT NULL`` and a NULL answer for odd keys: those rows are error rows, their
    answers are not kept (the next run asks them again), the fitting answers of the same flush are."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 40, 1, 2).select((F.col("id") % 10).alias("k"))

    class OddNull:
        def __init__(self, log):
            self.log = log

        async def __call__(self, row):
            log_call(self.log, [row["k"]])
            return {"k": row["k"], "v": None if row["k"] % 2 else f"v{row['k']}"}

    def run():
        out = aiospark.unordered_wait(df, OddNull(log), "k LONG, v STRING NOT NULL", on_error="row",
                                      journal=aiospark.Journal(loc, key="k"))
        rows = out.collect()
        errors = sorted(r._input.k for r in rows if r._error is not None)
        served = Counter((r.k, r.v) for r in rows if r._error is None)
        return errors, served

    errors, served = run()
    assert errors == sorted([1, 3, 5, 7, 9] * 4) and served == Counter({(k, f"v{k}"): 4 for k in range(0, 10, 2)})
    assert len(logged(log)) == 10
    assert run() == (errors, served)
    assert sorted(k for [k] in logged(log)[10:]) == [1, 3, 5, 7, 9], "only the keys without an answer are asked again"


class FailOnce:
    """Answers ``(k, v)``; raises at key ``fail_at`` while the file ``armed`` exists (the first action)."""

    def __init__(self, log: str, armed: str, fail_at):
        self.log, self.armed, self.fail_at = log, armed, fail_at

    async def __call__(self, row):
        if row["k"] == self.fail_at and os.path.exists(self.armed):  # noqa: ASYNC240 (a test flag)
            raise RuntimeError("the executor died")  # on_error="fail": fails the task
        log_call(self.log, [row["k"]])
        return {"k": row["k"], "v": f"v:{row['k']}"}


def file_stage(path: str) -> int:
    """The Spark stage whose task wrote a table file (its name starts ``<stage>.<task attempt>-``)."""
    return int(os.path.basename(path).split(".", 1)[0])


def recorded_keys(location: str, stage: int | None = None) -> list:
    """The keys the table's files hold (only those written by ``stage``'s tasks, if given)."""
    import pyarrow.parquet as pq

    return [k for path in table_files(location) if stage is None or file_stage(path) == stage
            for k in pq.read_table(path).column("_aiospark_k0").to_pylist()]


def settled_keys(location: str, quiet: float = 3.0, limit: float = 120.0) -> list:
    """The keys recorded once the failed job's other tasks stopped writing (Spark cancels them, and
    they write what they had on the way out): the table's files unchanged for ``quiet`` seconds."""
    deadline = time.monotonic() + limit
    files = sorted(table_files(location))
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = sorted(table_files(location))
        if now == files:
            break
        files = now
    return recorded_keys(location)


@pytest.mark.parametrize("keyed", [True, False], ids=["key=k", "default key"])
def test_a_task_run_again_pays_only_what_its_first_attempt_did_not_record(spark, tmp_path, keyed):
    """The same DataFrame run again after its tasks failed (what a retried task does: one run,
    its folder holds what the failed attempt wrote): only the keys not recorded are called. The
    earlier attempt's files are read a window at a time in key order, so the order of keys with
    NULLs and non-ASCII strings must be Spark's."""
    log, loc, armed = str(tmp_path / "calls"), str(tmp_path / "j"), str(tmp_path / "armed")
    words = ["", "a", "B", "é", "z", "ß", "中", "\U0001F600", "a\x00b", None]
    df = spark.range(0, 24_000, 1, 2).select(
        F.when(F.col("id") % 997 == 0, F.lit(None)).otherwise(
            F.concat(F.element_at(F.array(*[F.lit(w) for w in words[:-1]]), (F.col("id") % 9 + 1).cast("int")),
                     (F.col("id") % 6000).cast("string"))).alias("k"))
    expected = Counter((r.k, f"v:{r.k}") for r in df.collect())
    fail_at = "ß3005"
    open(armed, "w").close()
    journal = aiospark.Journal(loc, key="k") if keyed else aiospark.Journal(loc)
    # without AQE: an adaptive plan that failed replays its failure on the next action, unrun
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        out = aiospark.unordered_wait(df, FailOnce(log, armed, fail_at), "k STRING, v STRING", capacity=8,
                                      journal=journal)
        with pytest.raises(Exception, match="the executor died"):
            out.collect()
        kept = settled_keys(loc)
        first = len(logged(log))
        assert kept and len(kept) == len(set(kept)), "each key recorded once"
        assert set(kept) <= {k for [k] in logged(log)}
        os.remove(armed)
        rows = out.collect()  # the same run: its tasks find the failed attempts' files in their folders
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
    assert multiset(rows) == expected
    # what the failed job recorded, its last files included (its cancelled tasks may write while
    # the check above reads): the files of its stage, the first one that wrote
    kept = recorded_keys(loc, min(file_stage(p) for p in table_files(loc)))
    second = Counter(k for [k] in logged(log)[first:])
    nulls = sum(1 for r in df.collect() if r.k is None)
    distinct = {k for k, _ in expected if k is not None}
    # every key not recorded is called once (NULL keys: with key=k each NULL row, by default once)
    assert set(second) - {None} == distinct - set(kept)
    assert second[None] == (0 if None in kept else (nulls if keyed else 1))
    assert all(n == 1 for k, n in second.items() if k is not None)


@pytest.mark.parametrize("keyed", [True, False])
def test_a_task_writes_in_the_folder_of_its_keys_hash_partition(spark, tmp_path, keyed):
    """The folder a task writes in (``<run>/<partition>/``, where its retries look) is the partition
    ``repartition(buckets, key)`` sent its rows to: Spark's ``pmod(hash(join columns), buckets)``
    of every key in it, computed by Spark here, by Python in the task."""
    buckets = 7
    df = spark.createDataFrame(
        [(i, None if i % 11 == 0 else f"k{i % 40}é", None if i % 13 == 0 else decimal.Decimal(f"{i % 5}.5"),
          dt.date(2020, 1, 1 + i % 3)) for i in range(300)], "id LONG, s STRING, d DECIMAL(30,1), day DATE")
    key = ["s", "d", "day"] if keyed else None
    out = aiospark.unordered_wait(df, Echo(str(tmp_path / "calls"), "s"), "key STRING, v STRING",
                                  journal=aiospark.Journal(str(tmp_path / "j"), key=key, buckets=buckets))
    assert out.count() == 300
    files = table_files(str(tmp_path / "j"))
    assert files
    stored = spark.read.parquet(*files).withColumn("path", F.col("_metadata.file_path"))
    columns = [F.col(f"_aiospark_k{i}") for i in range(3 if keyed else 4)]
    if not keyed:  # every column; NULLs are values: the route joins (and hashes) coalesce(key, filler), isnull(key)
        fillers = [F.lit(0).cast("long"), F.lit(""), F.lit(0).cast("decimal(30,1)"), F.lit(dt.date(1970, 1, 1))]
        columns = [c for col, fill in zip(columns, fillers) for c in (F.coalesce(col, fill), col.isNull())]
    rows = stored.select("path", F.pmod(F.hash(*columns), F.lit(buckets)).alias("p")).distinct().collect()
    folders = {(int(os.path.basename(os.path.dirname(r.path))), r.p) for r in rows}
    assert all(folder == p for folder, p in folders) and len({p for _, p in folders}) > 1, folders
