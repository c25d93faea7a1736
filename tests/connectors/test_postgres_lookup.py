import asyncio
import pickle

import asyncpg
import cloudpickle
import pytest

from aiospark.connectors import ConnectorError, PostgresLookup
from aiospark.lookup import LookupCache, Lookuper

from ._support import TRICKY, dead_port


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def one(source, *keys):
    async with source:
        return [await source.lookup(k) for k in keys]


async def batch(source, keys):
    async with source:
        return await source.lookup_batch(keys)


@pytest.fixture(scope="module")
def seeded(pg_server):
    async def seed():
        con = await asyncpg.connect(pg_server.dsn)
        try:
            await con.execute("TRUNCATE codes")
            await con.executemany("INSERT INTO codes VALUES ($1, $2)",
                                  [(k, f"label {i}") for i, k in enumerate(TRICKY)] + [("42", "answer")])
        finally:
            await con.close()
    run(seed())
    return pg_server


def items(pg, **kw):
    return PostgresLookup("items", "id", "name STRING, price DOUBLE", dsn=pg.dsn, **kw)


def test_single_lookups(seeded):
    r1, r3, miss = run(one(items(seeded), (1,), (3,), (99,)))
    assert r1 == [{"name": "pen", "price": 1.5}]
    assert r3 == [{"name": "pad", "price": None}]
    assert miss == []


def test_key_coercion_and_impossible_keys(seeded):
    # "2" for an INT key is coerced; "abc" cannot be an INT: a miss, not an error
    assert run(one(items(seeded), ("2",), ("abc",), (2.0,))) == [
        [{"name": "ink", "price": 3.25}], [], [{"name": "ink", "price": 3.25}]]
    codes = PostgresLookup("codes", "code", "label STRING", dsn=seeded.dsn)
    assert run(one(codes, (42,))) == [[{"label": "answer"}]]  # int for a TEXT key -> "42"


def test_batch_single_key_column(seeded):
    got = run(batch(items(seeded), [(1,), (2,), (99,), (None,), ("abc",)]))
    assert got == {(1,): [{"name": "pen", "price": 1.5}], (2,): [{"name": "ink", "price": 3.25}],
                   (99,): [], (None,): [], ("abc",): []}


def test_multi_row_results(seeded):
    tags = PostgresLookup("public.tags", ["sku"], "tag STRING, pos INT", dsn=seeded.dsn)
    (a,), = [run(one(tags, ("A",)))]
    assert sorted(r["tag"] for r in a) == ["big", "new", "red"]
    got = run(batch(tags, [("A",), ("B",), ("C",)]))
    assert sorted(r["tag"] for r in got[("A",)]) == ["big", "new", "red"]
    assert got[("B",)] == [{"tag": "old", "pos": 1}] and got[("C",)] == []


def test_composite_key_single_and_batch(seeded):
    stock = PostgresLookup("stock", ["region", "id"], "qty INT", dsn=seeded.dsn)
    assert run(one(stock, ("eu", 1), ("us", 1), ("us", 2))) == [[{"qty": 10}], [{"qty": 20}], []]
    got = run(batch(stock, [("eu", 1), ("us", 1), ("us", 2), ("eu", 2), ("eu", "x")]))
    assert got == {("eu", 1): [{"qty": 10}], ("us", 1): [{"qty": 20}], ("us", 2): [],
                   ("eu", 2): [{"qty": 30}], ("eu", "x"): []}


def test_tricky_keys_are_parameters(seeded):
    codes = PostgresLookup("codes", "code", "label STRING", dsn=seeded.dsn)
    singles = run(one(codes, *[(k,) for k in TRICKY]))
    assert singles == [[{"label": f"label {i}"}] for i in range(len(TRICKY))]
    got = run(batch(codes, [(k,) for k in TRICKY]))
    assert got == {(k,): [{"label": f"label {i}"}] for i, k in enumerate(TRICKY)}
    assert run(one(codes, ("x'; DROP TABLE codes; --",), ("' OR '1'='1",))) == [[], []]
    assert seeded.execute("SELECT count(*) FROM codes").strip() == str(len(TRICKY) + 1)
    assert seeded.execute("SELECT count(*) FROM items").strip() == "3"


def test_through_lookuper_batches(seeded):
    src = items(seeded, max_batch_size=2, max_batch_delay=0.01, pool_size=3)

    async def main():
        async with Lookuper(src, cache=LookupCache()) as lk:
            rows = await asyncio.gather(*(lk.lookup((k,)) for k in [1, 2, 3, 4, 1, 2, None]))
            assert lk.source._pool.get_max_size() == 3
            return rows, lk.stats()
    rows, stats = run(main())
    assert [r[0]["name"] if r else None for r in rows] == ["pen", "ink", "pad", None, "pen", "ink", None]
    assert stats["batches"] == 2 and stats["batched_keys"] == 4 and stats["null_keys"] == 1


def test_password_from_env(seeded, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", seeded.password)
    src = PostgresLookup("items", "id", "name STRING", host="127.0.0.1", port=seeded.port,
                         user=seeded.user, database=seeded.database)
    assert seeded.password not in repr(src)
    copy = pickle.loads(cloudpickle.dumps(src))
    assert run(one(copy, (1,))) == [[{"name": "pen"}]]


def test_unknown_table_and_column(seeded):
    with pytest.raises(ConnectorError, match="table 'nope' does not exist") as info:
        run(one(PostgresLookup("nope", "id", "name STRING", dsn=seeded.dsn), (1,)))
    assert info.value.retryable is False
    with pytest.raises(ConnectorError, match="column"):
        run(one(PostgresLookup("items", "id", "colour STRING", dsn=seeded.dsn), (1,)))


def test_wrong_password(seeded, monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    src = PostgresLookup("items", "id", "name STRING", host="127.0.0.1", port=seeded.port,
                         user=seeded.user, password="Wr0ng-pg-pass", database=seeded.database)
    with pytest.raises(ConnectorError, match="authentication failed") as info:
        run(one(src, (1,)))
    assert "Wr0ng-pg-pass" not in str(info.value) and info.value.retryable is False


def test_server_down():
    port = dead_port()
    src = PostgresLookup("items", "id", "name STRING",
                         dsn=f"postgresql://app:Down-pw-1@127.0.0.1:{port}/shop", timeout=3)
    with pytest.raises(ConnectorError) as info:
        run(one(src, (1,)))
    msg = str(info.value)
    assert f"127.0.0.1:{port}" in msg and "PostgresLookup(items" in msg
    assert info.value.retryable and "Down-pw-1" not in msg


@pytest.mark.parametrize("args, kwargs, match", [
    (("items; DROP TABLE items", "id", "a STRING"), {}, "not a plain SQL identifier"),
    (('it"ems', "id", "a STRING"), {}, "not a plain SQL identifier"),
    (("a.b.c", "id", "a STRING"), {}, "'schema.name'"),
    (("1items", "id", "a STRING"), {}, "not a plain SQL identifier"),
    (("Mixed Case", "id", "a STRING"), {}, "not a plain SQL identifier"),
    (("items", "id)--", "a STRING"), {}, "key column"),
    (("items", [], "a STRING"), {}, "at least one column"),
    (("items", ["id", "id"], "a STRING"), {}, "duplicates"),
    (("items", "id", "`a b` STRING"), {}, "schema column"),
    (("items", "id", ""), {}, "non-empty"),
    (("items", "id", "a STRING"), {"dsn": "mysql://h/db"}, "postgresql://"),
    (("items", "id", "a STRING"), {"pool_size": 0}, "pool_size"),
    (("items", "id", "a STRING"), {"port": 70000}, "port"),
])
def test_constructor_validation(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        PostgresLookup(*args, **kwargs)


def test_batch_rows_reach_their_keys_on_case_insensitive_columns(seeded):
    # citext and a nondeterministic collation find 'abc' for the key 'ABC': the batch must hand
    # that row to 'ABC' as the single lookup does (rows are matched back by key position)
    seeded.execute("""
        CREATE EXTENSION IF NOT EXISTS citext;
        CREATE TABLE IF NOT EXISTS ci_codes (code citext PRIMARY KEY, label text);
        DO $$ BEGIN
            CREATE COLLATION ci_nd (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
        EXCEPTION WHEN duplicate_object THEN NULL; END $$;
        CREATE TABLE IF NOT EXISTS nd_codes (code text COLLATE ci_nd PRIMARY KEY, label text);
        TRUNCATE ci_codes, nd_codes;
        INSERT INTO ci_codes VALUES ('abc', 'L'), ('Q', 'q');
        INSERT INTO nd_codes VALUES ('abc', 'L'), ('Q', 'q');
    """)
    for table in ("ci_codes", "nd_codes"):
        src = PostgresLookup(table, "code", "label STRING", dsn=seeded.dsn)
        assert run(one(src, ("ABC",), ("q",))) == [[{"label": "L"}], [{"label": "q"}]]
        got = run(batch(src, [("ABC",), ("abc",), ("q",), ("x",)]))
        assert got == {("ABC",): [{"label": "L"}], ("abc",): [{"label": "L"}],
                       ("q",): [{"label": "q"}], ("x",): []}, table
