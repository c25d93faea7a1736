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
from pyspark.sql.types import LongType, StringType, StructField, StructType

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


def test_an_answer_that_does_not_fit_is_asked_again_and_one_answer_per_key_is_served(spark, tmp_path):
    """Under ``v STRING`` key 1 answered NULL; ``v STRING NOT NULL`` must not be served it (the
    file holding it is asked again: conservative). Then the nullable schema reads both folders,
    which both answer some keys: each row gets one answer."""
    log, loc, flaky = str(tmp_path / "calls"), str(tmp_path / "j"), tmp_path / "flaky"
    df = spark.range(0, 60, 1, 2).select("id", (F.col("id") % 6).alias("key"))
    nullable, strict = "key LONG, v STRING", "key LONG, v STRING NOT NULL"
    journal = aiospark.Journal(loc, key="key")
    flaky.touch()
    first = aiospark.unordered_wait(df, Echo(log, str(flaky)), nullable, journal=journal).collect()
    flaky.unlink()
    time.sleep(OVERLAP_MARGIN + 1)  # runs whose lives do not overlap: only the two folders repeat keys
    assert sum(r.v is None for r in first) == 10 and len(logged(log)) == 6
    again = aiospark.unordered_wait(df, Echo(log, str(flaky)), strict, on_error="row", journal=journal).collect()
    assert not [r for r in again if r._error is None and r.v is None], "a NULL served under NOT NULL"
    assert Counter(r.key for r in again if r._error is None) == Counter({k: 10 for k in range(6)})
    asked = Counter(k for [k] in logged(log)[6:])
    assert asked[1] == 1 and set(asked.values()) == {1}, "key 1 was asked again, once"
    assert len(shape_folders(loc)) == 2
    both = aiospark.unordered_wait(df, Echo(log, str(flaky)), nullable, journal=journal).collect()
    assert Counter(r.key for r in both) == Counter({k: 10 for k in range(6)}), "one answer per key and row"
    assert all(r.v in (None, f"v:{r.key}") for r in both)
    assert len({r.v for r in both if r.key == 1}) == 1, "every row of a key got the same answer"
    assert len(logged(log)) == 6 + sum(asked.values())


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
