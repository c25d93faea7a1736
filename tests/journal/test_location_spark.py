"""A journal's location through the public API on a real local Spark: its credentials never show
(errors with their causes, logs, the plan Spark's UI shows, ``aiospark journal``), and a relative
path is the driver's.

The object store is moto's S3-compatible server on 127.0.0.1 (tests/support/s3.py); its
credentials are in the location's userinfo, as a user passes them to pyarrow.
"""
from __future__ import annotations

import logging
import os
import traceback
import urllib.parse
import uuid

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark.app.cli import main
from aiospark.journal.summary import summarize
from tests.support.s3 import SECRET_KEY, S3Server
from tests.support.servers import free_port

FORMS = {SECRET_KEY, urllib.parse.quote(SECRET_KEY, safe=""), urllib.parse.quote_plus(SECRET_KEY)}


async def double(row):
    return {"id": row["id"], "twice": row["id"] * 2}


async def triple(row):
    return {"id": row["id"], "twice": row["id"] * 3}


def frame(spark, rows=20):
    return spark.range(0, rows, 1, 2).select("id")


def everything(exc: BaseException) -> str:
    """An error's whole text as a log or a notebook shows it: the traceback with every cause."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def assert_no_secret(text: str, where: str) -> None:
    shown = [f for f in FORMS if f in text]
    assert not shown, f"the secret key shows in {where}: ...{text[max(0, text.find(shown[0]) - 200):][:400]}..."


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


def test_unreachable_store_at_definition_shows_no_secret(spark, capfd, logs):
    location = S3Server().uri(endpoint=f"127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(OSError, match=r"cannot write to s3://\*\*\*:\*\*\*@journals/") as info:
        aiospark.unordered_wait(frame(spark), double, "id LONG, twice LONG", journal=aiospark.Journal(location))
    assert_no_secret(everything(info.value), "the error")
    out, err = capfd.readouterr()
    assert_no_secret(out + err + logs.text, "the logs")


def test_store_that_goes_away_under_the_tasks_shows_no_secret(spark, capfd, logs):
    server = S3Server().start()
    try:
        journal = aiospark.Journal(server.uri(), key="id")
        out = aiospark.unordered_wait(frame(spark), double, "id LONG, twice LONG", journal=journal)
        out.explain(mode="extended")  # the plan Spark's UI shows
    finally:
        server.stop()
    with pytest.raises(Exception, match="journal|S3|s3|connect") as info:
        out.collect()
    assert_no_secret(everything(info.value), "the task's error")
    printed, err = capfd.readouterr()
    assert_no_secret(printed + err + logs.text, "the plan and the logs (the executors' included)")


def test_another_function_is_refused_without_the_secret_and_the_cli_shows_none(spark, s3, capsys):
    location = s3.uri()
    df = frame(spark)
    rows = aiospark.unordered_wait(df, double, "id LONG, twice LONG", journal=aiospark.Journal(location, key="id"))
    assert sorted(r.twice for r in rows.collect()) == [2 * i for i in range(20)]
    with pytest.raises(ValueError, match="outcomes of another question") as info:
        aiospark.unordered_wait(df, triple, "id LONG, twice LONG", journal=aiospark.Journal(location, key="id"))
    assert_no_secret(everything(info.value), "the mismatch error")
    assert main(["journal", location]) == 0
    out, err = capsys.readouterr()
    assert "outcomes    20: 20 results, 0 errors" in out and out.startswith("journal s3://***:***@journals/")
    assert_no_secret(out + err, "aiospark journal's output")


def test_query_string_secrets_are_masked_in_reprs_and_errors():
    journal = aiospark.Journal(f"redis://127.0.0.1:{free_port()}/0?prefix=x&password={SECRET_KEY}")
    assert_no_secret(repr(journal), "the repr")
    assert "prefix=x" in repr(journal) and "password=***" in repr(journal)
    abfs = aiospark.Journal(f"abfs://c@acct.dfs.core.windows.net/j?account_key={SECRET_KEY}")
    assert_no_secret(repr(abfs), "the repr")


def test_a_relative_path_is_the_drivers_not_each_workers(spark, tmp_path, monkeypatch):
    """Before: the driver checked ``<its cwd>/<path>`` and every worker wrote ``<its own cwd>/<path>``
    (on a standalone cluster a new ``work/app-...`` directory per application: every rerun paid again)."""
    name = f"rel-journal-{uuid.uuid4().hex[:8]}"
    worker_cwd = spark.range(1).rdd.map(lambda _: os.getcwd()).collect()[0]
    monkeypatch.chdir(tmp_path)
    assert os.getcwd() != worker_cwd  # the workers' working directory is another one
    try:
        journal = aiospark.Journal(name, key="id")
        out = aiospark.unordered_wait(frame(spark), double, "id LONG, twice LONG", journal=journal)
        assert len(out.collect()) == 20
        assert summarize(str(tmp_path / name)).results == 20  # where the driver said
        assert not os.path.exists(os.path.join(worker_cwd, name))
    finally:
        stray = os.path.join(worker_cwd, name)
        if os.path.isdir(stray):
            import shutil

            shutil.rmtree(stray)


def test_a_local_path_on_a_local_master_is_not_warned_about(spark, tmp_path, recwarn):
    from aiospark.spark.journal_location import JournalLocationWarning

    aiospark.unordered_wait(frame(spark), double, "id LONG, twice LONG",
                            journal=aiospark.Journal(str(tmp_path / "j"), key="id"))
    assert not [w for w in recwarn if issubclass(w.category, JournalLocationWarning)]


def test_rows_keyed_on_a_column_are_recorded_on_s3(spark, s3):
    location = s3.uri()
    df = spark.range(0, 200, 1, 2).select("id", F.col("id").cast("string").alias("s"))
    first = aiospark.unordered_wait(df, double, "id LONG, twice LONG", journal=aiospark.Journal(location, key="id"))
    assert len(first.collect()) == 200
    assert summarize(location).results == 200
