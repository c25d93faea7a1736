"""Answers kept under one output schema serve another that differs in nullability alone
(``journal/table_shapes.py``): the manifest's schema text has no NOT NULL, so it is one question,
and a schema copied from the input takes the nullability Spark infers from how the DataFrame was
made. An answer that does not fit (a NULL under a NOT NULL) is never served: it is asked again.
"""
from __future__ import annotations

import glob
import os
import time
from collections import Counter

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

import aiospark
from aiospark.journal.table import OVERLAP_MARGIN
from tests.support.call_log import log_call, logged

pytestmark = pytest.mark.version_agnostic


class Echo:
    """``(key, v)`` from the row's key, logging each call; while the file ``flaky`` exists, v is
    NULL for key 1 (the function's state is the same either way: one question)."""

    def __init__(self, log: str, flaky: str = ""):
        self.log, self.flaky = log, flaky

    async def __call__(self, row):
        log_call(self.log, [row["key"]])
        null = row["key"] == 1 and self.flaky and os.path.exists(self.flaky)  # noqa: ASYNC240 (a test flag)
        return {"key": row["key"], "v": None if null else f"v:{row['key']}"}


def shape_folders(location: str) -> set[str]:
    return {p.split(os.sep)[-4] for p in glob.glob(os.path.join(location, "*", "table", "*", "*", "*", "*.parquet"))}


def test_a_not_null_change_serves_the_answers_that_fit_on_every_reader(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 60, 1, 2).select("id", (F.col("id") % 6).alias("key"))
    nullable, strict = "key LONG, v STRING", "key LONG, v STRING NOT NULL"
    aiospark.unordered_wait(df, Echo(log), nullable, journal=aiospark.Journal(loc, key="key")).collect()
    assert len(logged(log)) == 6
    plan = aiospark.plan(aiospark.unordered_wait, df, Echo(log), strict, journal=aiospark.Journal(loc, key="key"))
    assert (plan.recorded, plan.calls) == (6, 0)
    out = aiospark.unordered_wait(df, Echo(log), strict, journal=aiospark.Journal(loc, key="key"))
    assert sorted(tuple(r) for r in out.collect()) == sorted((i % 6, f"v:{i % 6}") for i in range(60))
    ordered = aiospark.ordered_wait(df.coalesce(1), Echo(log), strict, journal=aiospark.Journal(loc, key="key"))
    assert [tuple(r) for r in ordered.collect()] == [(i % 6, f"v:{i % 6}") for i in range(60)]
    assert len(logged(log)) == 6, "every reader served the answers of the nullable schema"


def test_a_schema_copied_from_the_input_is_served_whichever_way_the_input_was_made(spark, tmp_path):
    """The input's columns and one more: ``spark.range`` makes ``id`` NOT NULL, the same rows read back from
    Parquet make it nullable; either order, the second run calls nothing."""
    parquet = str(tmp_path / "in")
    spark.range(0, 40, 1, 2).write.parquet(parquet)
    made, read = spark.range(0, 40, 1, 2), spark.read.parquet(parquet)
    assert made.schema["id"].nullable is False and read.schema["id"].nullable is True

    class Twice:
        def __init__(self, log):
            self.log = log

        async def __call__(self, row):
            log_call(self.log, [row["id"]])
            return {"id": row["id"], "twice": 2 * row["id"]}

    for first, second in ((made, read), (read, made)):
        log, loc = str(tmp_path / f"calls{id(first)}"), str(tmp_path / f"j{id(first)}")
        for df in (first, second):
            schema = StructType([*df.schema.fields, StructField("twice", LongType())])  # add() changes df's own
            out = aiospark.unordered_wait(df, Twice(log), schema,
                                          journal=aiospark.Journal(loc, key="id"))
            assert sorted(tuple(r) for r in out.collect()) == [(i, 2 * i) for i in range(40)]
        assert len(logged(log)) == 40, "the second input's run was served"
        assert len(shape_folders(loc)) == 1


def test_a_call_that_does_not_fit_is_asked_again_alone_and_one_answer_per_key_is_served(spark, tmp_path):
    """Under ``v STRING`` key 1 answered NULL; ``v STRING NOT NULL`` is not served that call, and
    only that one (its file's other calls fit). Then both schemas read both folders, which both
    answer key 1: each row gets one answer, and ``ordered_wait`` serves what ``unordered_wait``
    does (the table's answer stands over the bucket segments')."""
    log, loc, flaky = str(tmp_path / "calls"), str(tmp_path / "j"), tmp_path / "flaky"
    df = spark.range(0, 60, 1, 2).select("id", (F.col("id") % 6).alias("key"))
    nullable, strict = "key LONG, v STRING", "key LONG, v STRING NOT NULL"
    journal = aiospark.Journal(loc, key="key")
    flaky.touch()
    first = aiospark.unordered_wait(df, Echo(log, str(flaky)), nullable, journal=journal).collect()
    flaky.unlink()
    assert sum(r.v is None for r in first) == 10 and len(logged(log)) == 6
    time.sleep(OVERLAP_MARGIN + 1)  # runs whose lives do not overlap: only the two folders repeat keys
    plan = aiospark.plan(aiospark.unordered_wait, df, Echo(log, str(flaky)), strict, journal=journal)
    assert (plan.recorded, plan.calls) == (5, 1)
    again = aiospark.unordered_wait(df, Echo(log, str(flaky)), strict, on_error="row", journal=journal).collect()
    assert sorted(tuple(r)[:2] for r in again) == sorted((i % 6, f"v:{i % 6}") for i in range(60))
    assert [k for [k] in logged(log)[6:]] == [1], "only the call that does not fit was asked again"
    assert len(shape_folders(loc)) == 2
    for schema in (nullable, strict):
        unordered = aiospark.unordered_wait(df, Echo(log, str(flaky)), schema, journal=journal).collect()
        ordered = aiospark.ordered_wait(df.coalesce(1), Echo(log, str(flaky)), schema, journal=journal).collect()
        assert Counter(r.key for r in unordered) == Counter({k: 10 for k in range(6)}), "one answer per key and row"
        answers = {r.key: r.v for r in unordered}
        assert len({(r.key, r.v) for r in unordered}) == 6, "every row of a key got the same answer"
        assert {r.key: r.v for r in ordered} == answers and len(ordered) == 60
        assert answers[1] in ((None, "v:1") if schema == nullable else ("v:1",))
    assert len(logged(log)) == 7


def test_the_tables_answer_stands_over_the_bucket_segments_for_every_reader(spark, tmp_path):
    """``ordered_wait`` records in the bucket segments: under NOT NULL it asks key 1 again, so key 1
    has an answer in the table and one in the segments; both entry points serve the table's."""
    log, loc, flaky = str(tmp_path / "calls"), str(tmp_path / "j"), tmp_path / "flaky"
    df = spark.range(0, 24, 1, 2).select("id", (F.col("id") % 4).alias("key"))
    nullable, strict = "key LONG, v STRING", "key LONG, v STRING NOT NULL"
    journal = aiospark.Journal(loc, key="key")
    flaky.touch()
    aiospark.unordered_wait(df, Echo(log, str(flaky)), nullable, journal=journal).collect()
    flaky.unlink()
    aiospark.ordered_wait(df.coalesce(1), Echo(log, str(flaky)), strict, journal=journal).collect()
    assert [k for [k] in logged(log)[4:]] == [1]
    unordered = {(r.key, r.v) for r in aiospark.unordered_wait(df, Echo(log, str(flaky)), nullable, journal=journal).collect()}
    ordered = {(r.key, r.v) for r in aiospark.ordered_wait(df.coalesce(1), Echo(log, str(flaky)), nullable,
                                                            journal=journal).collect()}
    assert ordered == unordered == {(0, "v:0"), (1, None), (2, "v:2"), (3, "v:3")}
    assert len(logged(log)) == 5


def test_calls_that_gave_no_row_or_several_fit_any_nullability(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 40, 1, 2).select((F.col("id") % 8).alias("k"))

    class Some(aiospark.AsyncFunction):
        async def async_invoke(self, row):
            log_call(log, [row["k"]])
            return [{"k": row["k"], "v": f"{row['k']}.{i}"} for i in range(row["k"] % 3)]

    rows = {}
    for schema in ("k LONG, v STRING", "k LONG NOT NULL, v STRING NOT NULL"):
        out = aiospark.unordered_wait(df, Some(), schema, journal=aiospark.Journal(loc, key="k")).collect()
        rows[schema] = sorted(tuple(r) for r in out)
    assert rows["k LONG, v STRING"] == rows["k LONG NOT NULL, v STRING NOT NULL"]
    assert len(logged(log)) == 8, "no call was paid twice"


def test_a_type_change_is_another_question_and_is_never_served(spark, tmp_path):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 20, 1, 2).select((F.col("id") % 4).alias("key"))

    class Number:
        async def __call__(self, row):
            log_call(log, [row["key"]])
            return {"key": row["key"], "v": row["key"]}

    aiospark.unordered_wait(df, Number(), "key LONG, v LONG", journal=aiospark.Journal(loc, key="key")).collect()
    schema = StructType([StructField("key", LongType(), False), StructField("v", StringType(), False)])
    try:
        rows = aiospark.unordered_wait(df, Number(), schema, on_error="row",
                                       journal=aiospark.Journal(loc, key="key")).collect()
    except aiospark.journal.JournalMismatch:
        return  # refused: the manifest's schema text differs
    assert not [r for r in rows if r._error is None and not isinstance(r.v, str)]


def test_nested_not_nulls_are_checked_a_call_at_a_time_by_the_join(spark, tmp_path):
    """A NULL deep in one call's answer (an array element, a map value, a struct field) keeps only
    that call from a reader that declares it NOT NULL; the other calls of its file are served."""
    log, loc, flaky = str(tmp_path / "calls"), str(tmp_path / "j"), tmp_path / "flaky"
    df = spark.range(0, 32, 1, 2).select((F.col("id") % 8).alias("k"))

    class Deep:
        def __init__(self, log, flaky):
            self.log, self.flaky = log, flaky

        async def __call__(self, row):
            k = row["k"]
            log_call(self.log, [k])
            hole = os.path.exists(self.flaky)  # noqa: ASYNC240 (a test flag)
            return {"k": k, "a": [k, None if hole and k == 1 else k], "m": {"x": None if hole and k == 2 else k},
                    "s": {"x": None if hole and k == 3 else k}}

    lax = "k LONG, a ARRAY<LONG>, m MAP<STRING, LONG>, s STRUCT<x: LONG>"
    strict = StructType([
        StructField("k", LongType()), StructField("a", ArrayType(LongType(), False)),
        StructField("m", MapType(StringType(), LongType(), False)),
        StructField("s", StructType([StructField("x", LongType(), False)]))])
    flaky.touch()
    aiospark.unordered_wait(df, Deep(log, str(flaky)), lax, journal=aiospark.Journal(loc, key="k")).collect()
    flaky.unlink()
    assert len(logged(log)) == 8
    plan = aiospark.plan(aiospark.unordered_wait, df, Deep(log, str(flaky)), strict, journal=aiospark.Journal(loc, key="k"))
    assert (plan.recorded, plan.calls) == (5, 3)
    out = aiospark.unordered_wait(df, Deep(log, str(flaky)), strict, journal=aiospark.Journal(loc, key="k")).collect()
    assert sorted((r.k, tuple(r.a), r.m["x"], r.s.x) for r in out) == sorted((i % 8, (i % 8,) * 2, i % 8, i % 8)
                                                                             for i in range(32))
    assert sorted(k for [k] in logged(log)[8:]) == [1, 2, 3]


def test_in_the_bucket_segments_an_answer_that_does_not_fit_is_the_rows_error(spark, tmp_path):
    """``ordered_wait`` records in the bucket segments; under a NOT NULL added since, key 1's NULL
    answer is that row's schema error, as a fresh NULL would be, and nothing is called."""
    log, loc, flaky = str(tmp_path / "calls"), str(tmp_path / "j"), tmp_path / "flaky"
    df = spark.range(0, 8, 1, 1).select((F.col("id") % 4).alias("key"))
    journal = aiospark.Journal(loc, key="key")
    flaky.touch()
    aiospark.ordered_wait(df, Echo(log, str(flaky)), "key LONG, v STRING", journal=journal).collect()
    flaky.unlink()
    strict = "key LONG, v STRING NOT NULL"
    plan = aiospark.plan(aiospark.ordered_wait, df, Echo(log, str(flaky)), strict, journal=journal)
    assert (plan.recorded, plan.calls) == (4, 0)
    rows = aiospark.ordered_wait(df, Echo(log, str(flaky)), strict, on_error="row", journal=journal).collect()
    assert [r._input.key for r in rows if r._error is not None] == [1, 1]
    assert all("None" in r._error for r in rows if r._error is not None)
    assert sorted(r.v for r in rows if r._error is None) == ["v:0", "v:0", "v:2", "v:2", "v:3", "v:3"]
    assert len(logged(log)) == 4
