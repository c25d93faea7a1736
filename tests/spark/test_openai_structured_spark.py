"""OpenAIChat(response_format=...) through Spark: a DDL string, the STRUCT answer column from
ordered_wait / unordered_wait / async_udf and SQL, retries of malformed answers, error rows.

The test server runs in this process on 127.0.0.1; Spark's Python workers reach it over TCP. Its
``json:`` prompts make it answer exactly the text after the prefix, ``flaky-json:`` ones answer
non-JSON the first time (tests/support/openai_structured.py).
"""
from __future__ import annotations

import datetime as dt

import pydantic
import pytest

import aiospark
from aiospark.connectors.openai import OpenAIChat, default_retry
from aiospark.spark.udf import ARROW_ITER
from tests.support.openai_fixtures import openai_fixtures

KEY = "sk-structured-spark-S3cret"
DDL = ("label STRING NOT NULL, score INT, day DATE, "
       "meta STRUCT<tags: ARRAY<STRING>, counts: MAP<STRING, BIGINT>>")


server, srv = openai_fixtures(KEY)


def chat(srv, fmt=DDL, **kwargs):
    return OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, response_format=fmt, **kwargs)


def test_ordered_wait_gives_a_struct_column_from_a_ddl_string(spark, srv):
    df = spark.createDataFrame([(i, f"text {i}") for i in range(40)], "id INT, prompt STRING").repartition(2)
    fn = chat(srv)
    schema = fn.output_schema(df)
    assert schema.simpleString() == ("struct<id:int,prompt:string,answer:struct<label:string,score:int,day:date,"
                                     "meta:struct<tags:array<string>,counts:map<string,bigint>>>>")
    assert schema["answer"].dataType["label"].nullable is False
    out = aiospark.ordered_wait(df, fn, schema, capacity=16, retry=default_retry())
    rows = out.collect()
    assert sorted(r.id for r in rows) == list(range(40))
    for r in rows:
        p = r.prompt
        assert r.answer.label == p and r.answer.score == len(p) and r.answer.day == dt.date(2024, 5, 1)
        assert r.answer.meta.tags == [f"{p} #0", f"{p} #1"]
        assert r.answer.meta.counts == {f"{p} #0": len(p) + 3, f"{p} #1": len(p) + 3}
    assert out.select("answer.label").count() == 40


def test_unordered_wait_retries_malformed_answers_then_succeeds(spark, srv):
    prompts = [f'flaky-json:{{"label": "L{i}", "score": {i}, "day": null, "meta": null}}' if i % 5 == 0
               else f"plain {i}" for i in range(30)]
    df = spark.createDataFrame(list(enumerate(prompts)), "id INT, prompt STRING").repartition(2)
    fn = chat(srv, client="openai")
    out = aiospark.unordered_wait(df, fn, fn.output_schema(df), capacity=16, retry=default_retry())
    rows = {r.id: r.answer for r in out.collect()}
    assert len(rows) == 30
    for i in range(0, 30, 5):
        assert rows[i].label == f"L{i}" and rows[i].score == i and rows[i].meta is None
    assert rows[1].label == "plain 1"
    assert out.aiospark_metrics.total.retries == 6
    assert srv.requests["/v1/chat/completions"] == 36


def test_an_answer_of_the_wrong_shape_becomes_an_error_row_showing_it(spark, srv):
    df = spark.createDataFrame([(1, "fine"), (2, 'json:{"label": null, "score": 1, "day": null, "meta": null}'),
                                (3, 'json:{"label": "x", "score": 99999999999, "day": null, "meta": null}'),
                                (4, "json:Sure! Here is the JSON you asked for")], "id INT, prompt STRING")
    fn = chat(srv)
    out = aiospark.ordered_wait(df.coalesce(1), fn, fn.output_schema(df), on_error="row")
    rows = {r._input.id if r._input else r.id: r for r in out.collect()}
    assert rows[1].answer.label == "fine" and rows[1]._error is None
    assert "label is null, but it is NOT NULL" in rows[2]._error and '"label": null' in rows[2]._error
    assert "out of the range of int" in rows[3]._error
    assert "not JSON" in rows[4]._error and "Sure! Here is the JSON you asked for" in rows[4]._error
    assert all(KEY not in (r._error or "") for r in rows.values())


def test_async_udf_with_the_response_type_and_from_sql(spark, srv):
    fn = chat(srv, "label STRING NOT NULL, score INT")
    judge = aiospark.async_udf(fn.response_type, capacity=32)(fn)
    df = spark.createDataFrame([(i, f"review {i}") for i in range(25)], "id INT, text STRING")
    rows = df.select("id", "text", judge("text").alias("v")).collect()
    assert {r.id: (r.v.label, r.v.score) for r in rows} == {i: (f"review {i}", len(f"review {i}")) for i in range(25)}

    spark.udf.register("judge", judge)
    df.createOrReplaceTempView("reviews")
    got = spark.sql("SELECT id, judge(text).label AS label, judge(text).score AS score FROM reviews "
                    "WHERE id < 5").collect()
    assert {r.id: (r.label, r.score) for r in got} == {i: (f"review {i}", len(f"review {i}")) for i in range(5)}


class Verdict(pydantic.BaseModel):
    label: str
    stars: int = pydantic.Field(ge=0, le=20)
    seen: dt.datetime | None = None
    tags: list[str]


def test_a_pydantic_model_through_async_udf(spark, srv):
    fn = chat(srv, Verdict)
    ask = aiospark.async_udf(fn.response_type, capacity=16, on_error="null")(fn)
    df = spark.createDataFrame([("brief",), ("a prompt far too long for twenty stars",)], "text STRING")
    if ARROW_ITER is None:  # PySpark < 4.1: a pandas UDF cannot return a NULL struct
        with pytest.raises(ValueError, match="on_error='null' with a STRUCT return type needs PySpark >= 4.1"):
            df.select(ask("text"))
        return
    rows = {r.text: r.v for r in df.select("text", ask("text").alias("v")).collect()}
    v = rows["brief"]
    assert (v.label, v.stars, v.tags) == ("brief", 5, ["brief #0", "brief #1"])
    assert v.seen is not None
    assert rows["a prompt far too long for twenty stars"] is None  # stars > 20: the model's constraint


def test_ddl_response_formats_are_checked_when_the_function_is_made(spark):
    url = "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError, match=r"'payload' is BINARY"):
        OpenAIChat("chat", base_url=url, response_format="label STRING, payload BINARY")
    with pytest.raises(ValueError, match=r"'meta.tags.key' is int"):
        OpenAIChat("chat", base_url=url, response_format="meta STRUCT<tags: MAP<INT, STRING>>")
    with pytest.raises(ValueError, match="single type.*'value STRING'"):
        OpenAIChat("chat", base_url=url, response_format="STRING")
    with pytest.raises(ValueError, match="does not parse as a Spark DDL string"):
        OpenAIChat("chat", base_url=url, response_format="label STRNG,")


def test_a_ddl_comment_enum_classifies_and_an_answer_outside_it_is_an_error_row(spark, srv):
    # the DDL way to say "one of": a column comment 'enum: ...' (issue 45); sent as JSON Schema enum
    ddl = "label STRING NOT NULL COMMENT 'enum: pos, neg, neutral', why STRING"
    fn = chat(srv, ddl)
    assert fn._response_format["json_schema"]["schema"]["properties"]["label"] == {
        "type": "string", "enum": ["pos", "neg", "neutral"]}
    prompts = ['json:{"label": "neg", "why": null}', 'json:{"label": "negative", "why": null}', "anything"]
    df = spark.createDataFrame(list(enumerate(prompts)), "id INT, prompt STRING")
    out = aiospark.ordered_wait(df, fn, fn.output_schema(df), on_error="row")
    rows = {r._input.id if r._input else r.id: r for r in out.collect()}
    assert rows[0].answer.label == "neg" and rows[0]._error is None
    assert rows[1].answer is None and "not one of the allowed values ['pos', 'neg', 'neutral']" in rows[1]._error
    assert rows[2].answer.label == "pos"  # the server's sample: the first allowed value
