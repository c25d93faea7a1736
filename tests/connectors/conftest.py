"""Fixtures: real Redis, PostgreSQL and a small aiohttp JSON server, all on 127.0.0.1."""

import pytest

from tests.support.openai_fixtures import openai_fixtures
from tests.support.servers import PostgresServer, RedisServer

from ._openai_support import KEY
from ._support import REDIS_PASSWORD, HttpStub


@pytest.fixture(scope="module")
def http_server():
    stub = HttpStub().start()
    yield stub
    stub.stop()


@pytest.fixture(scope="session")
def redis_server():
    with RedisServer(password=REDIS_PASSWORD) as srv:
        yield srv


@pytest.fixture(scope="session")
def pg_server():
    with PostgresServer(password="pg-Pa55word'x") as srv:
        srv.execute("""
            CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price double precision);
            INSERT INTO items VALUES (1, 'pen', 1.5), (2, 'ink', 3.25), (3, 'pad', NULL);
            CREATE TABLE tags (sku text, tag text, pos int);
            INSERT INTO tags VALUES ('A', 'red', 1), ('A', 'big', 2), ('A', 'new', 3), ('B', 'old', 1);
            CREATE TABLE stock (region text, id int, qty int, PRIMARY KEY (region, id));
            INSERT INTO stock VALUES ('eu', 1, 10), ('us', 1, 20), ('eu', 2, 30);
            CREATE TABLE codes (code text PRIMARY KEY, label text);
            CREATE TABLE "Mixed Case" (id int);
        """)
        yield srv


server, srv = openai_fixtures(KEY)  # the OpenAI test server, one per module, reset per test
