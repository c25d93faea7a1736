"""Secrets never leave a connector: servers that echo them, reject them, or report them.

The HTTP server answers 500 with the request's headers as a JSON body (so the basic-auth pair comes
back base64-encoded, a token and header values JSON-escaped); Redis reports the failed AUTH;
PostgreSQL rejects the password. Every text that reaches the user -- the exception, its repr, its
traceback, a pickled copy, a Spark job's error and an error row -- is checked for every spelling
of every secret.
"""

import asyncio
import base64
import json
import pickle
import traceback
from urllib.parse import quote

import pytest

import aiospark
from aiospark.connectors import ConnectorError, HttpLookup, PostgresLookup, RedisLookup, Secret
from aiospark.connectors.redaction import Redactor
from aiospark.lookup import Lookuper

USER = "reader"
PW = 'pa"ss\\wörd-9f3K'  # JSON and repr escape it: those spellings must go too
TOKEN = "tok-7Qz/+=xyz"
HEADER = "hdr-secret-55"


def spellings(*secrets):
    out = set()
    for s in secrets:
        out |= {s, quote(s, safe=""), json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1], repr(s)[1:-1]}
    pair = f"{USER}:{PW}"
    out |= {pair, base64.b64encode(pair.encode()).decode()}
    return out


SECRETS = spellings(PW, TOKEN, HEADER)


def assert_clean(text):
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"secret spellings {leaked} in {text[:500]!r}"


def texts(err):
    return [str(err), repr(err), "".join(traceback.format_exception(err)), repr(pickle.loads(pickle.dumps(err)))]


def failure(source, key=("1",), batch=False):
    async def main():
        async with Lookuper(source, batch=batch) as lk:
            return await lk.lookup(key)
    with pytest.raises(ConnectorError) as info:
        asyncio.run(asyncio.wait_for(main(), 30))
    return info.value


def echo_sources(http_server):
    port = http_server.port
    return [
        HttpLookup(f"http://{USER}:{quote(PW, safe='')}@127.0.0.1:{port}/echo/{{id}}", "id STRING"),
        HttpLookup(http_server.base + "/echo/{id}", "id STRING", auth_token=TOKEN),
        HttpLookup(http_server.base + "/echo/{id}", "id STRING", headers={"X-Api-Key": HEADER}),
        HttpLookup(http_server.base + "/echo/{id}", "id STRING", headers={"X-Custom": Secret(HEADER)}),
        HttpLookup(http_server.base + "/echo/{id}", "id STRING", auth_token=TOKEN,
                   batch_url=http_server.base + "/echo"),
    ]


def test_http_500_bodies_that_echo_the_request_headers_are_scrubbed(http_server):
    for source in echo_sources(http_server):
        assert_clean(repr(source))
        err = failure(source, batch=source.supports_batch)
        assert getattr(err, "status", None) == 500 and "request_headers" in str(err)  # the body is shown...
        for text in texts(err):
            assert_clean(text)  # ...without a secret in it


def test_redis_reports_the_failed_auth_without_the_password(redis_server):
    source = RedisLookup("user:{id}", "name STRING", url=redis_server.url, password=PW)
    err = failure(source)
    assert "authentication failed" in str(err) and "password=" in str(err)
    for text in texts(err):
        assert_clean(text)
    url_source = RedisLookup("user:{id}", "name STRING",
                             url=f"redis://default:{quote(PW, safe='')}@127.0.0.1:{redis_server.port}/0")
    for text in texts(failure(url_source)):
        assert_clean(text)


def test_postgres_rejecting_the_password_is_reported_without_it(pg_server):
    for source in (PostgresLookup("items", "id", "name STRING", host="127.0.0.1", port=pg_server.port,
                                  user=pg_server.user, database=pg_server.database, password=PW),
                   PostgresLookup("items", "id", "name STRING", dsn=f"postgresql://{pg_server.user}:"
                                  f"{quote(PW, safe='')}@127.0.0.1:{pg_server.port}/{pg_server.database}")):
        err = failure(source, key=(1,))
        assert "authentication failed" in str(err) and pg_server.user in str(err)
        for text in texts(err):
            assert_clean(text)


def test_spark_job_errors_and_error_rows_carry_no_secret(spark, http_server, redis_server, pg_server):
    df = spark.createDataFrame([("1",), ("2",)], "id STRING")
    port = http_server.port
    bad = [HttpLookup(f"http://{USER}:{quote(PW, safe='')}@127.0.0.1:{port}/echo/{{id}}", "v STRING"),
           RedisLookup("user:{id}", "v STRING", url=redis_server.url, password=PW),
           PostgresLookup("items", "name", "price DOUBLE", host="127.0.0.1", port=pg_server.port,
                          user=pg_server.user, database=pg_server.database, password=PW)]
    for source in bad:
        # PostgreSQL's items table is keyed by a text column, name
        frame, on = (df.withColumnRenamed("id", "name"), "name") if isinstance(source, PostgresLookup) else (df, "id")
        with pytest.raises(Exception) as info:
            aiospark.lookup_join(frame, source, on=on, timeout=20).collect()
        assert type(source).__name__ in str(info.value)  # the job's error names the source...
        assert_clean(str(info.value))  # ...and no secret
    rows = aiospark.lookup_join(df, bad[0], on="id", on_error="row").collect()
    assert len(rows) == 2 and all("HTTP 500" in r._error for r in rows)
    for r in rows:
        assert_clean(r._error)


def test_redactor_scrubs_before_cutting_and_keeps_connector_error_attributes():
    r = Redactor(Secret(TOKEN), basic=(Secret(USER), Secret(PW)))
    body = "x" * 195 + TOKEN  # a cut at 200 characters would keep half the token
    assert TOKEN[:5] not in r.scrub(body, limit=200)
    from aiospark.connectors.http import HttpStatusError

    err = HttpStatusError(f"HTTP 500: {TOKEN}", source="HttpLookup(h:1)", status=500, retryable=True, retry_after=3.0)
    clean = r.exception(err, "HttpLookup(h:1)")
    assert isinstance(clean, HttpStatusError) and clean.status == 500 and clean.retry_after == 3.0
    assert TOKEN not in str(clean) and "***" in str(clean)
    plain = ValueError("no secret here")
    assert r.exception(plain, "x") is plain  # a caller's mistake keeps its type
    assert_clean(repr(r))
    assert pickle.loads(pickle.dumps(r)).scrub(PW) == "***"


def test_a_short_secret_is_masked_as_a_whole_token_and_never_spelled_out_by_its_masks():
    r = Redactor(Secret("e"), Secret("Redis"))
    text = r.scrub("the journal's store at redis://:e@127.0.0.1:1/0 failed: Connection refused")
    assert text == "the journal's store at redis://:***@127.0.0.1:1/0 failed: Connection refused"
    assert r.scrub("redis refused the password Redis") == "redis refused the password ***"


def test_a_secret_echoed_with_json_unicode_escapes_is_scrubbed():
    r = Redactor(Secret("sk-SECRET-123"))
    body = '{"error": {"message": "bad key sk\\u002dSECRET\\u002d123 (sk\\u002DSECRET\\u002D123)"}}'
    assert "SECRET" not in r.scrub(body)
    assert r._leaks(ConnectorError(body))


def test_the_journal_command_masks_a_one_letter_password_without_spelling_it(capsys):
    from aiospark.app.cli import main

    code = main(["journal", "redis://:e@127.0.0.1:1/0"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2 and "***" in text, text
    assert "th*** " not in text and "r***dis" not in text and ":e@" not in text, text
