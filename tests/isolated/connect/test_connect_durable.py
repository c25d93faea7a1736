"""Durable calls on a Spark Connect session: a journal, a budget and the idempotency key.

Run through tests/spark/test_isolated.py, or directly:
``AIOSPARK_ISOLATED=connect python -m pytest tests/isolated/connect -q -p no:cacheprovider``.
"""
from __future__ import annotations

import warnings
from typing import Any

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark.spark.journal_location import JournalLocationWarning
from tests.chaos import ITEM_SCHEMA, ServiceCall
from tests.support.service import FaultService, ServiceConfig, item_value

ROWS = 600


class KeyEcho(ServiceCall):
    """Calls the service; returns aiospark.idempotency_key() as the name."""

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        out = await super().async_invoke(row)
        out[0]["name"] = aiospark.idempotency_key()
        return out


@pytest.fixture(scope="module")
def spark(connect_spark):
    return connect_spark


@pytest.fixture(scope="module")
def service():
    svc = FaultService(ServiceConfig(latency=0.002)).start()
    yield svc
    svc.stop()


def calls(service) -> int:
    return service.stats()["requests"]


def items(spark):
    return spark.range(0, ROWS, 1, 2).select("id", F.format_string("k%05d", "id").alias("key"))


def test_a_journal_on_connect_makes_a_rerun_free(spark, service, tmp_path):
    assert type(spark).__module__.startswith("pyspark.sql.connect")
    journal = aiospark.Journal(str(tmp_path / "journal"), key="id")
    before = calls(service)
    with warnings.catch_warnings():  # a Connect server on this host with a local master: a local path is fine
        warnings.simplefilter("error", JournalLocationWarning)
        first = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert calls(service) - before == ROWS
    assert all(r.value == item_value(r.key) for r in first)
    before = calls(service)
    again = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert calls(service) - before == 0 and again == first


def test_the_table_route_on_connect_serves_a_rerun_by_a_join(spark, service, tmp_path):
    """unordered_wait's table route (typed Parquet, a Spark join) on a Connect session."""
    loc = tmp_path / "table-journal"
    before = calls(service)
    first = aiospark.unordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA,
                                    journal=aiospark.Journal(str(loc), key="id")).collect()
    assert calls(service) - before == ROWS and all(r.value == item_value(r.key) for r in first)
    assert list(loc.glob("*/table/**/*.parquet")), "results kept as Parquet"
    before = calls(service)
    again = aiospark.unordered_wait(items(spark).repartition(3), ServiceCall(service.url), ITEM_SCHEMA,
                                    journal=aiospark.Journal(str(loc), key="id")).collect()
    assert calls(service) - before == 0 and sorted(again) == sorted(first)


def test_a_budget_on_connect_caps_the_calls(spark, service):
    before = calls(service)
    budget = aiospark.Budget(150)
    out = aiospark.unordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA, budget=budget,
                                  on_error="row").collect()
    made = calls(service) - before
    assert made <= 150 and made >= 100, made  # a hard cap; leases given back unused may stay unspent
    refused = [r for r in out if r._error is not None]
    assert len(out) == ROWS and len(refused) == ROWS - made
    assert all("budget is spent" in r._error for r in refused)


def test_the_idempotency_key_on_connect_is_stable_per_row(spark, service):
    one = {r.id: r.name for r in aiospark.unordered_wait(items(spark), KeyEcho(service.url), ITEM_SCHEMA).collect()}
    two = {r.id: r.name for r in aiospark.unordered_wait(items(spark), KeyEcho(service.url), ITEM_SCHEMA).collect()}
    assert one == two and len(set(one.values())) == ROWS
