"""lookup_join on a PostgreSQL view whose SELECT fails: the job fails or the row carries the
error -- the rows are never dropped (inner) or NULL-padded (left) as if the key had no row
(issue 26). Real Spark (local[2]) and a real PostgreSQL 15.
"""
from __future__ import annotations

import pytest

import aiospark
from aiospark.connectors import PostgresLookup
from tests.support.servers import PostgresServer

# what this file tests does not depend on the PySpark release: the main CI leg runs it, the
# PySpark-version legs do not (.ci/run)
pytestmark = pytest.mark.version_agnostic

KEYS = ["a", "bad1", "b", "bad2", "missing", "c"]
NAMES = {"a": "A", "b": "B", "c": "C"}


@pytest.fixture(scope="module")
def pg_server():
    with PostgresServer() as server:
        server.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT)")
        server.execute("INSERT INTO customers VALUES ('a', 'A'), ('b', 'B'), ('c', 'C'), "
                       "('bad1', 'X1'), ('bad2', 'X2')")
        # the view of the report: a direct SELECT ... WHERE id = ANY($1) raises "division by zero"
        server.execute("CREATE VIEW failing AS "
                       "SELECT id, (1 / (length(id) - length(id)))::text AS name FROM customers")
        server.execute("CREATE VIEW failing_some AS SELECT id, CASE WHEN id LIKE 'bad%' "
                       "THEN (1 / (length(id) - length(id)))::text ELSE name END AS name FROM customers")
        yield server


def frame(spark, keys):
    return spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "n INT, id STRING").coalesce(1)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_view_failing_for_every_key_fails_the_job_naming_the_cause(spark, pg_server, how):
    source = PostgresLookup("failing", "id", "name STRING", dsn=pg_server.dsn)
    with pytest.raises(Exception, match="division by zero"):
        aiospark.lookup_join(frame(spark, ["a", "b", "c"]), source, on="id", how=how).collect()


@pytest.mark.parametrize("batch", [True, False])
def test_view_failing_for_every_key_gives_error_rows(spark, pg_server, batch):
    source = PostgresLookup("failing", "id", "name STRING", dsn=pg_server.dsn)
    rows = aiospark.lookup_join(frame(spark, ["a", "b", "missing"]), source, on="id",
                                on_error="row", batch=batch).collect()
    by_n = {(r.n if r.n is not None else r._input.n): r for r in rows}
    assert len(rows) == 3
    for n in (0, 1):
        assert by_n[n]._error is not None and "division by zero" in by_n[n]._error
        assert by_n[n].name is None
    # 'missing' has no row: a true miss, joined with NULLs (how="left" is the default)
    assert by_n[2]._error is None and by_n[2].id == "missing" and by_n[2].name is None


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("batch", [True, False])
def test_view_failing_for_some_keys_only_those_rows_carry_the_error(spark, pg_server, how, batch):
    source = PostgresLookup("failing_some", "id", "name STRING", dsn=pg_server.dsn)
    rows = aiospark.lookup_join(frame(spark, KEYS), source, on="id", how=how, on_error="row",
                                batch=batch).collect()
    errors = {r._input.id: r._error for r in rows if r._error is not None}
    assert set(errors) == {"bad1", "bad2"} and all("division by zero" in e for e in errors.values())
    joined = {r.id: r.name for r in rows if r._error is None}
    expected = dict(NAMES, **({"missing": None} if how == "left" else {}))
    assert joined == expected


def test_view_failing_for_some_keys_fails_the_job_with_on_error_fail(spark, pg_server):
    source = PostgresLookup("failing_some", "id", "name STRING", dsn=pg_server.dsn)
    with pytest.raises(Exception, match="division by zero"):
        aiospark.lookup_join(frame(spark, KEYS), source, on="id", how="left").collect()
