"""Adversarial review of the table route of ``unordered_wait`` (recorded rows served by a Spark join
on the journal's key, results kept as typed Parquet). Each test shows a broken promise; calls are
counted with a call log, every answer is a pure function of its question.
"""
from __future__ import annotations

import glob
import os
from collections import Counter

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark.journal import JournalMismatch
from tests.support.call_log import log_call, logged

pytestmark = pytest.mark.version_agnostic


def table_files(location: str) -> list[str]:
    return glob.glob(os.path.join(location, "*", "table", "**", "*.parquet"), recursive=True)


def multiset(rows) -> Counter:
    return Counter(tuple(r) for r in rows)


class Maybe:
    """``(k, v)``: v is NULL for odd keys."""

    def __init__(self, log: str):
        self.log = log

    async def __call__(self, row):
        log_call(self.log, [row["k"]])
        return {"k": row["k"], "v": None if row["k"] % 2 else f"v{row['k']}"}


def test_a_nullability_change_of_the_output_schema_is_not_served_stale(spark, tmp_path):
    """``v STRING`` then ``v STRING NOT NULL``: a different question (a NULL answer no longer fits),
    so the journal must be refused or the odd keys re-asked (and fail as error rows) -- never a
    NULL served into a NOT NULL column as a result."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 20, 1, 2).select((F.col("id") % 10).alias("k"))
    first = aiospark.unordered_wait(df, Maybe(log), "k LONG, v STRING", journal=aiospark.Journal(loc, key="k"))
    assert sorted(r.v is None for r in first.collect()).count(True) == 10
    assert table_files(loc)
    fresh = aiospark.unordered_wait(df, Maybe(str(tmp_path / "other")), "k LONG, v STRING NOT NULL",
                                    on_error="row").collect()  # no journal: the odd keys are error rows
    assert sorted(r.k if r.k is not None else r._input.k for r in fresh if r._error is not None) == sorted(
        [1, 3, 5, 7, 9] * 2)
    try:
        again = aiospark.unordered_wait(df, Maybe(log), "k LONG, v STRING NOT NULL", on_error="row",
                                        journal=aiospark.Journal(loc, key="k"))
        rows = again.collect()
    except JournalMismatch:
        return  # refused: fine
    served_nulls = [tuple(r) for r in rows if r._error is None and r.v is None]
    assert not served_nulls, f"NULL served as a result of a NOT NULL column: {served_nulls[:3]}"


def test_output_names_that_spell_another_schema_are_another_question(spark, tmp_path):
    """One column named ``x:int,y`` (STRING) and two columns ``x INT, y STRING`` are different
    questions; the stored answers of the first must not be served to the second."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 10, 1, 2).select(F.col("id").alias("k"))

    mode = str(tmp_path / "mode")  # what the service answers with: its API changed between runs

    async def both(row):
        log_call(log, [row["k"]])
        with open(mode) as f:
            if f.read() == "one":
                return {"x:int,y": f"s{row['k']}"}
        return {"x": int(row["k"]), "y": f"y{row['k']}"}

    with open(mode, "w") as f:
        f.write("one")

    one = aiospark.unordered_wait(df, both, "`x:int,y` STRING", journal=aiospark.Journal(loc, key="k"))
    assert sorted(r[0] for r in one.collect()) == sorted(f"s{i}" for i in range(10))
    with open(mode, "w") as f:
        f.write("two")
    try:
        two = aiospark.unordered_wait(df, both, "x INT, y STRING", journal=aiospark.Journal(loc, key="k"))
        rows = sorted(tuple(r) for r in two.collect())
    except JournalMismatch:
        return
    assert rows == sorted((i, f"y{i}") for i in range(10))


def test_output_names_differing_only_by_case(spark, tmp_path):
    """``v`` and ``V`` are two columns for mapInArrow (no journal and ordered_wait's journal take
    them); the table route must too, on the first run and on the rerun that reads the table."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 20, 1, 2).select((F.col("id") % 5).alias("k"))

    async def answer(row):
        log_call(log, [row["k"]])
        return {"v": f"low{row['k']}", "V": f"up{row['k']}"}

    expected = Counter((f"low{i % 5}", f"up{i % 5}") for i in range(20))
    assert multiset(aiospark.unordered_wait(df, answer, "v STRING, V STRING").collect()) == expected
    runs = []
    for _ in range(2):
        out = aiospark.unordered_wait(df, answer, "v STRING, V STRING", journal=aiospark.Journal(loc, key="k"))
        runs.append(multiset(out.collect()))
    assert runs[0] == runs[1] == expected
    assert len(logged(log)) == 20 + 5


@pytest.mark.parametrize("name", ["_aiospark_p", "_aiospark_l0"])
def test_input_columns_named_like_the_routes_own_columns(spark, tmp_path, name):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 40, 1, 2).select((F.col("id") % 8).alias("key"), (F.col("id") % 3).alias(name))

    async def echo(row):
        log_call(log, [row["key"]])
        return {"key": row["key"], "v": f"v:{row['key']}"}

    expected = Counter((i % 8, f"v:{i % 8}") for i in range(40))
    assert multiset(aiospark.unordered_wait(df, echo, "key LONG, v STRING").collect()) == expected
    for _ in range(2):
        out = aiospark.unordered_wait(df, echo, "key LONG, v STRING", journal=aiospark.Journal(loc, key="key"))
        assert multiset(out.collect()) == expected
    assert len(logged(log)) == 40 + 8


class NoneAmongRows(aiospark.AsyncFunction):
    """An AsyncFunction whose answer for key 3 holds a None among its rows (not a row)."""

    def __init__(self, log: str):
        self.log = log

    async def async_invoke(self, row):
        log_call(self.log, [row["k"]])
        rows = [{"k": row["k"], "v": row["k"] * 10}]
        return [None, *rows] if row["k"] == 3 else rows


@pytest.mark.parametrize("entry", ["unordered_wait", "ordered_wait"])  # the table route and the bucket route
@pytest.mark.parametrize("on_error", ["row", "fail"])
def test_a_none_among_an_async_functions_rows_is_an_error_never_recorded(spark, tmp_path, on_error, entry):
    """Error-row mode emits key 3's error row; the journal must not record the rows beside the
    None, or the rerun would serve them where the first run showed an error. Without error rows
    the job fails saying what to return (it never leaves the None out silently), and the call is
    not recorded: the next run asks again."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 8, 1, 2).select(F.col("id").alias("k"))
    options = {"on_error": "row"} if on_error == "row" else {}

    def run(frame):
        out = getattr(aiospark, entry)(frame, NoneAmongRows(log), "k LONG, v LONG",
                                       journal=aiospark.Journal(loc, key="k"), **options)
        rows = out.collect()
        if on_error == "row":  # (the input's key, v, whether it is an error row)
            return sorted((r["_input"]["k"], r["v"], True) if r["_error"] else (r["k"], r["v"], False) for r in rows)
        return sorted((r["k"], r["v"]) for r in rows)

    if on_error == "fail":
        for frame in (df, df.repartition(3)):
            with pytest.raises(Exception, match=r"returned None among an input's rows.*return \[\] for an input"):
                run(frame)
        assert logged(log).count([3]) >= 2, "the failed call was recorded: the second run did not ask again"
        with pytest.raises(Exception, match="returned None among an input's rows"):  # without a journal too
            aiospark.unordered_wait(df, NoneAmongRows(log), "k LONG, v LONG").collect()
        return
    first = run(df)
    assert first == [(k, None, True) if k == 3 else (k, 10 * k, False) for k in range(8)]
    (error,) = [r["_error"] for r in getattr(aiospark, entry)(df, NoneAmongRows(str(tmp_path / "other")), "k LONG, v LONG",
                                                            on_error="row").collect() if r["_error"]]
    assert "returned None among an input's rows" in error and "return [] for an input" in error, error
    assert run(df.repartition(3)) == first
    assert Counter(k for keys in logged(log) for k in keys) == Counter({**{k: 1 for k in range(8)}, 3: 2})


@pytest.mark.parametrize("inner", ["STRUCT<a: STRING, A: STRING>", "ARRAY<STRUCT<x: STRUCT<b: INT, B: INT>>>"])
def test_struct_fields_that_differ_only_in_case_are_served_on_a_rerun(spark, tmp_path, inner):
    """Spark reads Parquet struct fields by name, folding case: such a schema takes the bucket
    route, whose rerun serves every key (the table route's join failed with COLUMN_ALREADY_EXISTS)."""
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    df = spark.range(0, 12, 1, 2).select((F.col("id") % 4).alias("k"))
    struct = inner.startswith("STRUCT")

    async def nested(row):
        log_call(log, [row["k"]])
        value = {"a": "lower", "A": "upper"} if struct else [{"x": {"b": row["k"], "B": -row["k"]}}]
        return {"k": row["k"], "s": value}

    outs = [sorted(map(str, aiospark.unordered_wait(df, nested, f"k LONG, s {inner}",
                                                     journal=aiospark.Journal(loc, key="k")).collect()))
            for _ in range(2)]
    assert outs[0] == outs[1] and len(outs[0]) == 12
    assert len(logged(log)) == 4
