"""PostgresLookup: an error is never a miss (issue 26).

A miss means "no such row". Views whose SELECT fails for some keys (or for every key) must fail
those keys -- in single lookups, in batches (split one by one so the good keys keep their rows)
and through a batching Lookuper -- while the values that can equal no row (a NUL character, an
INT beyond the column's range, no cast) stay misses without a query. Real PostgreSQL 15.
"""

import asyncio
import decimal

import asyncpg
import pytest

from aiospark.connectors import ConnectorError, PostgresLookup
from aiospark.lookup import Lookuper

SETUP = r"""
CREATE TABLE IF NOT EXISTS err_customers (id text PRIMARY KEY, name text);
TRUNCATE err_customers;
INSERT INTO err_customers VALUES ('a', 'A'), ('b', 'B'), ('c', 'C'), ('bad1', 'X1'), ('bad2', 'X2');
-- the view of the bug report: its SELECT divides by zero for every row
CREATE OR REPLACE VIEW err_all AS
    SELECT id, (1 / (length(id) - length(id)))::text AS name FROM err_customers;
-- divides by zero for the keys 'bad%' only (not a constant: 1/0 would fail at plan time)
CREATE OR REPLACE VIEW err_some AS
    SELECT id, CASE WHEN id LIKE 'bad%' THEN (1 / (length(id) - length(id)))::text ELSE name END AS name
    FROM err_customers;
-- a scalar subquery with two rows for 'bad1' (SQLSTATE 21000)
CREATE TABLE IF NOT EXISTS err_tags (id text, tag text);
TRUNCATE err_tags;
INSERT INTO err_tags VALUES ('a', 'ta'), ('bad1', 't1'), ('bad1', 't2');
CREATE OR REPLACE VIEW err_card AS
    SELECT c.id, (SELECT t.tag FROM err_tags t WHERE t.id = c.id) AS name FROM err_customers c;
-- PL/pgSQL RAISE for 'bad%' keys (P0001), and a function failing every row with SQLSTATE 42501
-- (not a per-key class); both count their calls in a sequence (sequences ignore rollbacks)
CREATE SEQUENCE IF NOT EXISTS err_calls;
CREATE OR REPLACE FUNCTION err_pl(k text) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM nextval('err_calls');
    IF k LIKE 'bad%' THEN RAISE EXCEPTION 'refused key %', k; END IF;
    RETURN upper(k);
END $$;
CREATE OR REPLACE FUNCTION err_denied(k text) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM nextval('err_calls');
    RAISE SQLSTATE '42501' USING MESSAGE = 'no access to ' || k;
END $$;
CREATE OR REPLACE VIEW err_pl_view AS SELECT id, err_pl(id) AS name FROM err_customers;
CREATE OR REPLACE VIEW err_denied_view AS SELECT id, err_denied(id) AS name FROM err_customers;
-- a server-side SQLSTATE 22000 (asyncpg.DataError, like its client-side encoding error)
CREATE OR REPLACE FUNCTION err_22000(k text) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF k LIKE 'bad%' THEN RAISE SQLSTATE '22000' USING MESSAGE = 'server data exception for ' || k; END IF;
    RETURN k;
END $$;
CREATE OR REPLACE VIEW err_22000_view AS SELECT id, err_22000(id) AS name FROM err_customers;
-- composite key: 10 / (id - 2) fails for id 2
CREATE TABLE IF NOT EXISTS err_stock (region text, id int, PRIMARY KEY (region, id));
TRUNCATE err_stock;
INSERT INTO err_stock VALUES ('eu', 1), ('eu', 2), ('us', 3);
CREATE OR REPLACE VIEW err_stock_v AS SELECT region, id, 10 / (id - 2) AS qty FROM err_stock;
-- every query of err_boom fails, whatever its key: a lookup that returns [] sent no query
CREATE TABLE IF NOT EXISTS err_typed (t text, i int, n numeric, r real, d date);
TRUNCATE err_typed;
INSERT INTO err_typed VALUES ('a', 1, 1.5, 1.5, '2024-01-01');
CREATE OR REPLACE FUNCTION err_queried() RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN RAISE EXCEPTION 'err_boom was queried'; END $$;
CREATE OR REPLACE VIEW err_boom AS SELECT * FROM err_typed WHERE err_queried();
"""


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def pg(pg_server):
    async def setup():
        con = await asyncpg.connect(pg_server.dsn)
        try:
            await con.execute(SETUP)
        finally:
            await con.close()
    run(setup())
    return pg_server


def source(pg, table, key="id", schema="name STRING"):
    return PostgresLookup(table, key, schema, dsn=pg.dsn)


async def singles(src, keys):
    """Each key looked up alone (``lookup``): its rows or the exception it raised."""
    async with src:
        return await asyncio.gather(*(src.lookup(k if isinstance(k, tuple) else (k,)) for k in keys),
                                    return_exceptions=True)


async def batch(src, keys):
    async with src:
        return await src.lookup_batch([k if isinstance(k, tuple) else (k,) for k in keys])


async def through_lookuper(src, keys):
    """All keys in one batch of a batching Lookuper: each key's rows or exception, and the stats."""
    async with Lookuper(src, max_batch_size=100, max_batch_delay=0.05) as lk:
        got = await asyncio.gather(*(lk.lookup((k,)) for k in keys), return_exceptions=True)
        return got, lk.stats()


def calls(pg):
    return int(pg.execute("SELECT last_value FROM err_calls").strip())


def is_error(outcome, match):
    return isinstance(outcome, ConnectorError) and match in str(outcome)


# --- a view failing for every key --------------------------------------------------------------

def test_view_failing_for_every_key_single_lookups_are_errors(pg):
    a, b, missing = run(singles(source(pg, "err_all"), ["a", "b", "zzz"]))
    assert is_error(a, "division by zero") and is_error(b, "division by zero")
    assert "PostgresLookup(err_all" in str(a)
    assert missing == []  # no row: nothing was computed, a true miss


def test_view_failing_for_every_key_batch_every_key_gets_the_error(pg):
    got = run(batch(source(pg, "err_all"), ["a", "b", "zzz", "c"]))
    assert all(is_error(got[(k,)], "division by zero") for k in ("a", "b", "c")), got
    assert got[("zzz",)] == []


def test_view_failing_for_every_key_one_key_batch_is_an_error(pg):
    got = run(batch(source(pg, "err_all"), ["a", "nul\x00", "\udc80"]))
    assert is_error(got[("a",)], "division by zero")
    assert got[("nul\x00",)] == [] and got[("\udc80",)] == []  # misses by value, no query


# --- a view failing for some keys ---------------------------------------------------------------

KEYS = ["a", "bad1", "b", "bad2", "zzz", "c"]


def _check_some(got):
    assert got[0] == [{"name": "A"}] and got[2] == [{"name": "B"}] and got[5] == [{"name": "C"}]
    assert is_error(got[1], "division by zero") and is_error(got[3], "division by zero")
    assert got[4] == []


def test_view_failing_for_some_keys_single_lookups(pg):
    _check_some(run(singles(source(pg, "err_some"), KEYS)))


def test_view_failing_for_some_keys_batch_is_split_per_key(pg):
    got = run(batch(source(pg, "err_some"), KEYS))
    _check_some([got[(k,)] for k in KEYS])


def test_view_failing_for_some_keys_through_a_batching_lookuper(pg):
    got, stats = run(through_lookuper(source(pg, "err_some"), KEYS))
    _check_some(got)
    assert stats["batches"] == 1 and stats["errors"] == 2


def test_composite_key_view_failing_for_some_keys(pg):
    src = source(pg, "err_stock_v", ["region", "id"], "qty INT")
    keys = [("eu", 1), ("eu", 2), ("us", 3), ("us", 2)]
    got = run(batch(src, keys))
    assert got[("eu", 1)] == [{"qty": -10}] and got[("us", 3)] == [{"qty": 10}]
    assert is_error(got[("eu", 2)], "division by zero") and got[("us", 2)] == []
    single = run(singles(src, keys))
    assert single[0] == [{"qty": -10}] and is_error(single[1], "division by zero")


@pytest.mark.parametrize("view, match", [
    ("err_card", "more than one row returned by a subquery"),  # SQLSTATE 21000
    ("err_pl_view", "refused key bad1"),                       # P0001
    ("err_22000_view", "server data exception for bad1"),      # 22000 from the server
])
def test_other_per_key_errors_are_split(pg, view, match):
    got = run(batch(source(pg, view), ["a", "bad1", "b"]))
    assert is_error(got[("bad1",)], match), got
    assert not any(isinstance(got[(k,)], BaseException) for k in ("a", "b")), got
    assert "no conversion" not in str(got[("bad1",)])  # a server error, not asyncpg's encoding


def test_an_error_of_every_key_alike_fails_the_batch_without_a_split(pg):
    before = calls(pg)
    with pytest.raises(ConnectorError, match="no access to") as info:
        run(batch(source(pg, "err_denied_view"), ["a", "b", "c", "bad1", "zzz"]))
    assert info.value.retryable is False
    assert calls(pg) - before < 5  # the batch was not retried key by key
    before = calls(pg)
    got = run(batch(source(pg, "err_pl_view"), ["a", "b", "c", "bad1", "zzz"]))
    assert calls(pg) - before >= 4  # P0001 may be one key's: each key looked up alone
    assert got[("c",)] == [{"name": "C"}] and is_error(got[("bad1",)], "refused key bad1")


# --- misses decided before any query ------------------------------------------------------------

@pytest.mark.parametrize("column, keys", [
    ("t", ["nul\x00byte", "lone \udc80 surrogate", b"\xff\xfe"]),
    ("i", [2**40, -(2**31) - 1, "abc", "1.5", 1.5, float("nan"), "１"]),
    ("n", ["9e999999", decimal.Decimal("1e131072"), decimal.Decimal("1e-16384"), "abc", float("nan")]),
    ("r", [1e39, -1e39, "abc"]),
])
def test_keys_that_can_equal_no_row_are_misses_without_a_query(pg, column, keys):
    src = source(pg, "err_boom", column, "t STRING")
    assert run(singles(src, keys)) == [[] for _ in keys]
    got = run(batch(src, keys))
    assert all(got[(k,)] == [] for k in keys), got


def test_numeric_keys_in_range_are_queried(pg):
    # the range check is exact: 1.5 with 20000 trailing zeros is 1.5; zero with any exponent is 0
    src = source(pg, "err_typed", "n", "t STRING")
    keys = [decimal.Decimal("1.5" + "0" * 20000), decimal.Decimal("0E-20000"), "1.50"]
    assert run(singles(src, keys)) == [[{"t": "a"}], [], [{"t": "a"}]]
    boom = source(pg, "err_boom", "n", "t STRING")
    for outcome in run(singles(boom, [decimal.Decimal("1e131071"), decimal.Decimal("1e-16383")])):
        assert is_error(outcome, "err_boom was queried")


def test_a_key_asyncpg_cannot_encode_is_an_error_not_a_miss(pg):
    # a STRING key for a DATE column: no conversion here, asyncpg refuses it before sending; the
    # date exists, so a miss would be a wrong answer
    src = source(pg, "err_typed", "d", "t STRING")
    (single,) = run(singles(src, ["2024-01-01"]))
    assert is_error(single, "no conversion to the key column type (date)"), single
    got = run(batch(src, ["2024-01-01", "2024-01-02"]))
    assert all(is_error(got[(k,)], "cast the key column") for k in ("2024-01-01", "2024-01-02"))


def test_a_key_conversion_error_that_is_no_mismatch_is_not_a_miss(pg):
    # Spark's try_cast reads '000...01' (5001 digits) as 1; Python's int() refuses it (its
    # 4300-digit limit): not a KeyMismatch, so not a miss -- the row or an error, never []
    src = source(pg, "err_typed", "i", "t STRING")
    key = "0" * 5000 + "1"
    (single,) = run(singles(src, [key]))
    got = run(batch(src, [key, "1"]))
    for outcome in (single, got[(key,)]):
        assert outcome == [{"t": "a"}] or isinstance(outcome, Exception), outcome
    assert got[("1",)] == [{"t": "a"}]
