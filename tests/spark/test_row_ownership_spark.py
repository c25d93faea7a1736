"""Review of issue 44 through the Spark entry points: rows are the caller's own (a function that
changes its row dicts, then fails, gets the rows as Spark gave them on retry, and error rows name
the input as it came -- a popped key crashed the JVM), scattered bad rows with one message are
isolated (the README example with 4 refused ids gave 64 error rows), and batch_delay >= timeout
is refused where the job is defined."""
from __future__ import annotations

import asyncio
import os

import pytest

import aiospark

# -- functions run on the workers (pickled by reference to this module) -----------------------------

_ATTEMPTS: dict = {}


async def normalize_then_hiccup(row):
    """Normalizes in place; the first attempt of each row fails (per worker process and run)."""
    row["s"] = row["s"] + "!"
    key = (os.getpid(), row["run"], row["id"])
    _ATTEMPTS[key] = _ATTEMPTS.get(key, 0) + 1
    if _ATTEMPTS[key] == 1:
        raise ConnectionError("hiccup")
    return {"id": row["id"], "s": row["s"]}


async def normalize_many_then_hiccup(rows):
    for row in rows:
        row["s"] = row["s"] + "!"
    key = (os.getpid(), rows[0]["run"], min(r["id"] for r in rows))
    _ATTEMPTS[key] = _ATTEMPTS.get(key, 0) + 1
    if _ATTEMPTS[key] == 1:
        raise ConnectionError("hiccup")
    return [{"id": r["id"], "s": r["s"]} for r in rows]


async def change_then_fail(row):
    row["id"] = -1
    row.pop("s")
    raise ValueError("refused")


async def change_many_then_fail(rows):
    for row in rows:
        row["id"] = -1
        row.pop("s")
    raise ValueError("refused")


async def change_then_misfit(row):
    row["id"] = -1
    row.pop("s")
    return {"id": "not a number", "s": "x"}


async def change_many_then_misfit(rows):
    for row in rows:
        row["id"] = -1
        row.pop("s")
    return [{"id": "not a number", "s": "x"} for _ in rows]


async def score_many(rows):
    """The README's batch function, refusing 4 ids with one generic message."""
    await asyncio.sleep(0.001)
    if any(r["id"] in (0, 16, 32, 48) for r in rows):
        raise ValueError("the service refuses an id")
    return [{"id": r["id"], "score": r["id"] / 10} for r in rows]


def _frame(spark, run):
    return spark.range(0, 8, numPartitions=1).selectExpr("id", "concat('s', id) AS s", f"{run} AS run")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("batched", [False, True], ids=["one-per-call", "batch"])
def test_a_retry_gets_the_row_as_spark_gave_it(spark, batched):
    """Review: a function normalizing ``s`` in place then failing once answered ``s0!!``."""
    function, kwargs = (normalize_many_then_hiccup, {"batch_size": 4}) if batched else (normalize_then_hiccup, {})
    out = aiospark.unordered_wait(_frame(spark, 1 + batched), function, "id LONG, s STRING", capacity=8,
                                  retry=aiospark.RetryStrategy.fixed_delay(2, 0.01), **kwargs)
    assert sorted((r.id, r.s) for r in out.collect()) == [(i, f"s{i}!") for i in range(8)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("batched", [False, True], ids=["one-per-call", "batch"])
def test_error_rows_name_the_input_as_it_came_after_the_function_changed_it(spark, batched):
    """Review: error rows showed ``id = -1``, and a popped key failed the task with a JVM
    NullPointerException."""
    function, kwargs = (change_many_then_fail, {"batch_size": 4}) if batched else (change_then_fail, {})
    out = aiospark.ordered_wait(_frame(spark, 3), function, "id LONG, s STRING", capacity=8,
                                on_error="row", **kwargs)
    rows = out.collect()
    assert [(r._input.id, r._input.s, r._input.run) for r in rows] == [(i, f"s{i}", 3) for i in range(8)]
    assert all(r._error.startswith("ValueError: refused") for r in rows)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("batched", [False, True], ids=["one-per-call", "batch"])
def test_an_output_that_does_not_fit_names_the_input_as_it_came(spark, batched):
    """The error row of an output that does not fit the schema carries the input too: the row as
    Spark gave it, not the one the function changed."""
    function, kwargs = (change_many_then_misfit, {"batch_size": 4}) if batched else (change_then_misfit, {})
    rows = aiospark.ordered_wait(_frame(spark, 4), function, "id LONG, s STRING", capacity=8,
                                 on_error="row", **kwargs).collect()
    assert [(r._input.id, r._input.s) for r in rows] == [(i, f"s{i}") for i in range(8)]
    assert all(r._error.startswith("OutputSchemaError") for r in rows)


@pytest.mark.timeout(240)
def test_the_readme_example_with_four_refused_ids_and_one_message_isolates_them(spark):
    """Review: 64 rows, ids 0, 16, 32, 48 refused with one message: 64 error rows."""
    out = aiospark.ordered_wait(spark.range(0, 64, numPartitions=1), score_many, "id LONG, score DOUBLE",
                                batch_size=64, batch_delay=0.01, capacity=256, on_error="row").collect()
    assert [r._input.id for r in out if r._error is not None] == [0, 16, 32, 48]
    assert [(r.id, r.score) for r in out if r._error is None] == \
        [(i, i / 10) for i in range(64) if i not in (0, 16, 32, 48)]


@pytest.mark.parametrize("entry", ["ordered_wait", "unordered_wait", "async_udf"])
def test_batch_delay_not_shorter_than_timeout_is_refused_at_definition(spark, entry):
    """Review: batch_delay=5 with timeout=1 was accepted, then rows timed out without a call."""
    with pytest.raises(ValueError, match=r"batch_delay \(5.0 s\) must be shorter than timeout \(1.0 s\)"):
        if entry == "async_udf":
            aiospark.async_udf("long", batch_size=4, batch_delay=5.0, timeout=1.0)(score_many)
        else:
            getattr(aiospark, entry)(spark.range(4), score_many, "id LONG", batch_size=4, batch_delay=5.0,
                                     timeout=1.0)
