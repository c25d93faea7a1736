"""Budgets, metrics and progress on Spark Connect: a server on another machine cannot reach this
client, so a driver-held budget is refused and metrics/progress are announced when the operator is
defined (before anything is asked of the server), naming the fixes; a server on this machine (the
local Connect server) keeps working, budget, metrics and all.

Run through tests/spark/test_isolated.py, or directly:
``AIOSPARK_ISOLATED=connect python -m pytest tests/isolated/connect -q -p no:cacheprovider``.
"""
from __future__ import annotations

import uuid
import warnings

import pytest

import aiospark
from aiospark.spark.reach import UnreachableDriverWarning, remote_connect_host
from tests.chaos import ITEM_SCHEMA, ServiceCall
from tests.support.service import FaultService, ServiceConfig


async def echo(row):
    return {"id": row["id"]}


def remote_session():
    """A Connect session on a server elsewhere (a name that resolves nowhere: nothing is sent to it,
    the checks run before the first request)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    host = f"spark-{uuid.uuid4().hex[:8]}.example.invalid"
    return ConnectSession(f"sc://{host}:15002"), host


def test_a_driver_budget_on_a_remote_connect_server_is_refused_naming_the_fixes(monkeypatch):
    monkeypatch.delenv("AIOSPARK_METRICS_HOST", raising=False)
    session, host = remote_session()
    assert remote_connect_host(session) == host
    with pytest.raises(ValueError) as info:
        aiospark.unordered_wait(session.range(10), echo, "id LONG", budget=aiospark.Budget(10))
    text = str(info.value)
    assert host in text and "BudgetUnavailable" in text
    assert "aiospark.Budget(10, redis='redis://host:6379/0', name='...')" in text and "AIOSPARK_METRICS_HOST" in text


def test_metrics_and_progress_on_a_remote_connect_server_are_announced(monkeypatch):
    monkeypatch.delenv("AIOSPARK_METRICS_HOST", raising=False)
    session, host = remote_session()
    redis_budget = aiospark.Budget(10, redis="redis://127.0.0.1:6379/0", name=f"n-{uuid.uuid4().hex}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreachableDriverWarning)  # stop at the warning: the host is not real
        with pytest.raises(UnreachableDriverWarning) as info:
            aiospark.unordered_wait(session.range(10), echo, "id LONG", budget=redis_budget, progress=True)
    text = str(info.value)
    assert host in text and "metrics and progress will read 0" in text and "AIOSPARK_METRICS_HOST" in text


def test_a_configured_address_lifts_the_checks(monkeypatch):
    from aiospark.spark.reach import check_reach

    monkeypatch.setenv("AIOSPARK_METRICS_HOST", "10.1.2.3")  # this client's address on the cluster's network
    session, _host = remote_session()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreachableDriverWarning)
        check_reach(session, budget=aiospark.Budget(10), progress=True, what="unordered_wait")


def test_a_connect_server_on_this_machine_keeps_budget_and_metrics_working(connect_spark, monkeypatch):
    monkeypatch.delenv("AIOSPARK_METRICS_HOST", raising=False)
    assert type(connect_spark).__module__.startswith("pyspark.sql.connect")
    assert remote_connect_host(connect_spark) is None                 # sc://localhost
    budget, metrics = aiospark.Budget(150), aiospark.Metrics("reach")
    with FaultService(ServiceConfig(latency=0.002)) as service, warnings.catch_warnings():
        warnings.simplefilter("error", UnreachableDriverWarning)
        df = connect_spark.range(0, 300, 1, 2).selectExpr("id", "format_string('k%05d', id) AS key")
        out = aiospark.unordered_wait(df, ServiceCall(service.url), ITEM_SCHEMA, budget=budget, metrics=metrics,
                                      on_error="row").collect()
        made = service.stats()["requests"]
    assert 100 <= made <= 150 and sum(r._error is None for r in out) == made
    assert budget.started == made and budget.spent == made
    assert metrics.tasks == 2 and metrics.total.calls == made, metrics


@aiospark.async_udf("long", budget=aiospark.Budget(10))
async def doubled(x):
    return 2 * x


def test_an_async_udf_with_a_driver_budget_is_refused_when_applied_on_a_remote_session(monkeypatch):
    import threading

    from pyspark.sql.connect import functions as CF
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    monkeypatch.delenv("AIOSPARK_METRICS_HOST", raising=False)
    session, host = remote_session()
    caught = []
    column = CF.col("id")  # here: pyspark's column functions read a setting of the thread's active session

    def in_a_thread_of_its_own():  # the active session is per thread: this one leaves the others alone
        ConnectSession._active_session.session = session
        try:
            doubled(column)
        except Exception as exc:  # (anything else fails the assertion below, shown)
            caught.append(exc)

    thread = threading.Thread(target=in_a_thread_of_its_own, daemon=True)
    thread.start()
    thread.join(60)
    assert caught and isinstance(caught[0], ValueError) and host in str(caught[0]) and "async_udf 'doubled'(budget=...)" in str(caught[0]), caught
