"""OpenAIChat(response_format=...) -- structured output -- against the real test server on 127.0.0.1.

The server checks every request's schema the way OpenAI's strict mode does (400 otherwise) and
answers either :func:`sample` of the schema or, for ``json:``/``flaky-json:`` prompts, exactly the
text the test wrote, so each bad-answer case goes through the real request path. Spark-side use
(DDL strings, the three entry points, SQL) is in tests/spark/test_openai_structured_spark.py.
"""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import cloudpickle
import pydantic
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiospark import AsyncFunctionError, RetryStrategy
from aiospark.connectors import ConnectorError, is_retryable
from aiospark.connectors.openai import OpenAIChat, default_retry
from aiospark.connectors.openai.schema import json_schema, read_answer
from tests.support.openai_structured import sample, strict_problem, structured_answer

from ._openai_support import CLIENTS, KEY, invoke_all, run, through_operator

TAGS = StructType([StructField("key", StringType(), False), StructField("n", IntegerType(), True)])
NESTED = StructType([
    StructField("label", StringType(), False),
    StructField("score", IntegerType(), True),
    StructField("ok", BooleanType(), False),
    StructField("ratio", DoubleType(), False),
    StructField("price", DecimalType(10, 2), True),
    StructField("day", DateType(), True),
    StructField("at", TimestampType(), True),
    StructField("words", ArrayType(StringType(), False), False),
    StructField("meta", StructType([StructField("tags", ArrayType(TAGS, True), True),
                                    StructField("counts", MapType(StringType(), LongType(), False), True)]), True),
])


def chat(srv, fmt, **kwargs):
    return OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, response_format=fmt, **kwargs)


# --- the schema sent ------------------------------------------------------------------------

def test_the_schema_follows_strict_mode_rules_for_nested_arrays_maps_and_nullables():
    schema = json_schema(NESTED)
    assert strict_problem(schema) is None  # every object: additionalProperties false, all required
    props = schema["properties"]
    assert schema["required"] == [f.name for f in NESTED.fields] and schema["additionalProperties"] is False
    assert props["label"] == {"type": "string"}
    assert props["score"] == {"type": ["integer", "null"], "minimum": -2**31, "maximum": 2**31 - 1}
    assert props["ok"] == {"type": "boolean"} and props["ratio"] == {"type": "number"}
    assert props["price"]["type"] == ["number", "null"]
    assert props["day"] == {"type": ["string", "null"], "format": "date"}
    assert props["at"] == {"type": ["string", "null"], "format": "date-time"}
    assert props["words"] == {"type": "array", "items": {"type": "string"}}
    meta = props["meta"]
    assert meta["type"] == ["object", "null"] and meta["additionalProperties"] is False
    tag = meta["properties"]["tags"]["items"]
    assert tag["type"] == ["object", "null"] and tag["required"] == ["key", "n"]
    assert tag["properties"]["key"] == {"type": "string"}
    counts = meta["properties"]["counts"]
    assert counts["type"] == ["array", "null"]
    assert counts["items"]["required"] == ["key", "value"] and counts["items"]["additionalProperties"] is False
    assert counts["items"]["properties"]["value"]["type"] == "integer"


def test_a_field_comment_becomes_the_description():
    struct = StructType([StructField("label", StringType(), False, {"comment": "one of pos, neg"})])
    assert json_schema(struct)["properties"]["label"] == {"type": "string", "description": "one of pos, neg"}


def test_the_test_server_refuses_what_strict_mode_refuses():
    good = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
            "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": good, "strict": True}}
    assert structured_answer(fmt, "hi", 0) == (200, '{"a": "hi"}')
    loose = {**good, "additionalProperties": True}
    partial = {**good, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    for bad in (loose, partial, {**good, "properties": {"a": {"type": "string", "maxLength": 3}}}):
        status, why = structured_answer({**fmt, "json_schema": {**fmt["json_schema"], "schema": bad}}, "hi", 0)
        assert status == 400, why


# --- answers through the real request path ---------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_nested_struct_answer_becomes_python_values_spark_takes(srv, client):
    fn = chat(srv, NESTED, client=client)
    (result,) = run(invoke_all(fn, [{"id": 7, "prompt": "rate this"}]))
    (row,) = result
    assert row["id"] == 7
    value = row["answer"]
    expect = sample(json_schema(NESTED), "rate this")
    assert value["label"] == "rate this" and value["score"] == len("rate this") and value["ok"] is False
    assert value["ratio"] == len("rate this") / 4 and value["price"] == Decimal("2.25")
    assert value["day"] == dt.date(2024, 5, 1)
    assert value["at"] == dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc)
    assert value["words"] == ["rate this #0", "rate this #1"]
    assert value["meta"]["tags"] == [{"key": t["key"], "n": t["n"]} for t in expect["meta"]["tags"]]
    assert value["meta"]["counts"] == {"rate this #0": 12, "rate this #1": 12}


def test_null_input_gives_null_without_a_request_and_a_column_value_gives_the_struct(srv):
    fn = chat(srv, StructType([StructField("label", StringType(), False)]))
    assert run(invoke_all(fn, [None, "hey"])) == [[None], [{"label": "hey"}]]
    assert srv.requests["/v1/chat/completions"] == 1


def test_nullable_fields_take_null_and_integral_json_numbers(srv):
    struct = StructType([StructField("a", StringType(), True), StructField("b", ArrayType(LongType(), True), True),
                         StructField("c", IntegerType(), False), StructField("d", DecimalType(5, 2), False)])
    fn = chat(srv, struct)
    (result,) = run(invoke_all(fn, ['json:{"a": null, "b": [1, null], "c": 3.0, "d": 1.50}']))
    assert result == [{"a": None, "b": [1, None], "c": 3, "d": Decimal("1.50")}]


BAD = [  # (answer, what the error says)
    ('not json at all', "not JSON"),
    ('{"label": "x"', "not JSON"),
    ('["x", 1]', "the answer is an array, not an object"),
    ('{"label": "x"}', "lacks the fields ['score']"),
    ('{"label": "x", "score": 1, "extra": 2}', "fields ['extra'] that are not in the schema"),
    ('{"label": 5, "score": 1}', "label is the number 5, not a string"),
    ('{"label": null, "score": 1}', "label is null, but it is NOT NULL"),
    ('{"label": "x", "score": "7"}', "score is the string '7', not an integer"),
    ('{"label": "x", "score": 2147483648}', "out of the range of int"),
    ('{"label": "x", "score": 1.5}', "not an integer"),
    ('{"label": "x", "score": NaN}', "NaN is not a JSON number"),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("text,why", BAD)
def test_an_answer_not_of_the_shape_is_a_retryable_error_showing_it(srv, client, text, why):
    fn = chat(srv, StructType([StructField("label", StringType(), False), StructField("score", IntegerType(), True)]),
              client=client)
    (result,) = run(invoke_all(fn, ["json:" + text]))
    assert isinstance(result, ConnectorError) and is_retryable(result), result
    assert why in str(result)
    assert f"the answer: {text!r}" in str(result)
    assert KEY not in str(result)


@pytest.mark.parametrize("struct,text,why", [
    (StructType([StructField("d", DateType())]), '{"d": "2024-5-1"}', "not a date written YYYY-MM-DD"),
    (StructType([StructField("d", DateType())]), '{"d": "2024-02-30"}', "not a date"),
    (StructType([StructField("t", TimestampType())]), '{"t": "2024-05-01T12:30:00"}', "with Z or an offset"),
    (StructType([StructField("t", TimestampType())]), '{"t": "2024-05-01T12:30:00.1234567Z"}', "not a timestamp"),
    (StructType([StructField("x", DecimalType(5, 2))]), '{"x": 1.234}', "more than 2 digits after the point"),
    (StructType([StructField("x", DecimalType(5, 2))]), '{"x": 1234}', "too large for decimal(5,2)"),
    (StructType([StructField("x", ByteType())]), '{"x": 128}', "out of the range of tinyint"),
    (StructType([StructField("x", FloatType())]), '{"x": 1e39}', "out of the range of float"),
    (StructType([StructField("x", BooleanType())]), '{"x": 1}', "not a boolean"),
    (StructType([StructField("m", MapType(StringType(), LongType()))]),
     '{"m": [{"key": "a", "value": 1}, {"key": "a", "value": 2}]}', "repeats an earlier key"),
    (StructType([StructField("s", ArrayType(StringType(), False))]), '{"s": ["a", null]}', "s[1] is null"),
])
def test_values_are_parsed_back_strictly(struct, text, why):
    with pytest.raises(ValueError, match=None) as info:
        read_answer(struct, text)
    assert why in str(info.value)


def test_timestamps_with_offsets_become_utc_instants():
    struct = StructType([StructField("t", TimestampType(), False)])
    value = read_answer(struct, '{"t": "2024-05-01T14:30:00.25+02:00"}')
    assert value == {"t": dt.datetime(2024, 5, 1, 12, 30, 0, 250000, tzinfo=dt.timezone.utc)}


def test_a_long_bad_answer_shows_only_its_first_200_characters(srv):
    fn = chat(srv, StructType([StructField("label", StringType(), False)]))
    text = "{" + "x" * 500
    (result,) = run(invoke_all(fn, ["json:" + text]))
    assert isinstance(result, ConnectorError) and result.retryable
    assert repr(text[:200] + "...") in str(result) and "x" * 201 not in str(result)


@pytest.mark.parametrize("client", CLIENTS)
def test_default_retry_asks_again_after_a_malformed_answer(srv, client):
    fn = chat(srv, StructType([StructField("label", StringType(), False)]), client=client)
    out, op = run(through_operator(fn, ['flaky-json:{"label": "second time"}'], retry=default_retry()))
    assert out == [{"label": "second time"}]
    assert op.metrics.retries == 1 and srv.requests["/v1/chat/completions"] == 2

    with pytest.raises(AsyncFunctionError) as info:  # no retry: the malformed answer fails the call
        run(through_operator(fn, ['flaky-json:{"label": "other"}']))
    assert isinstance(info.value.__cause__, ConnectorError) and "the answer: '{\"cut\": '" in str(info.value.__cause__)


def test_a_pickled_structured_chat_still_works(srv):
    fn = cloudpickle.loads(cloudpickle.dumps(chat(srv, NESTED)))
    (result,) = run(invoke_all(fn, ["again"]))
    assert result[0]["label"] == "again"


# --- pydantic -----------------------------------------------------------------------------------

class Tag(pydantic.BaseModel):
    name: str
    weight: float | None = None


class Review(pydantic.BaseModel):
    label: str = pydantic.Field(description="pos or neg")
    stars: int = pydantic.Field(ge=0, le=5)
    tags: list[Tag]
    seen: dt.date | None
    at: dt.datetime
    notes: list[str | None] | None = None
    extra: dict[str, int]


def test_a_pydantic_model_maps_to_a_struct_with_required_and_optional_fields(srv):
    fn = chat(srv, Review)
    t = fn.response_type
    assert t.simpleString() == ("struct<label:string,stars:bigint,tags:array<struct<name:string,weight:double>>,"
                                "seen:date,at:timestamp,notes:array<string>,extra:map<string,bigint>>")
    nullable = {f.name: f.nullable for f in t.fields}
    assert nullable == {"label": False, "stars": False, "tags": False, "seen": True, "at": False, "notes": True,
                        "extra": False}
    assert t["tags"].dataType.containsNull is False and t["notes"].dataType.containsNull is True
    assert t["label"].metadata == {"comment": "pos or neg"}
    assert fn._response_format["json_schema"]["name"] == "Review"
    good = {"label": "pos", "stars": 4, "tags": [{"name": "a", "weight": None}], "seen": None,
            "at": "2024-05-01T12:00:00Z", "notes": None, "extra": [{"key": "k", "value": 1}]}
    (result,) = run(invoke_all(fn, ["json:" + json.dumps(good)]))
    assert result == [{"label": "pos", "stars": 4, "tags": [{"name": "a", "weight": None}], "seen": None,
                       "at": dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc), "notes": None,
                       "extra": {"k": 1}}]
    (result,) = run(invoke_all(fn, ["four"]))  # the server's own answer to the schema sent: stars = len
    assert result[0]["stars"] == 4 and result[0]["extra"] == {"four #0": 7, "four #1": 7}
    assert result[0]["tags"] == [{"name": "four #0", "weight": 1.75}, {"name": "four #1", "weight": 1.75}]


class Plain(pydantic.BaseModel):
    label: str
    stars: int = pydantic.Field(ge=0, le=5)
    when: dt.datetime | None = None


def test_a_pydantic_models_own_constraints_make_bad_answers(srv):
    fn = chat(srv, Plain)
    ok, bad = run(invoke_all(fn, ['json:{"label": "pos", "stars": 4, "when": null}',
                                  'json:{"label": "pos", "stars": 9, "when": null}']))
    assert ok == [{"label": "pos", "stars": 4, "when": None}]
    assert isinstance(bad, ConnectorError) and bad.retryable and "stars: Input should be less than or equal to 5" \
        in str(bad)


# --- refused at definition time -------------------------------------------------------------------

def _struct(*fields):
    return StructType([StructField(n, t, True) for n, t in fields])


@pytest.mark.parametrize("fmt,match", [
    (_struct(("meta", _struct(("tags", MapType(IntegerType(), StringType()))))),
     r"'meta.tags.key' is int: JSON object keys are strings; use MAP<STRING"),
    (_struct(("blob", BinaryType())), r"'blob' is BINARY.*use STRING"),
    (_struct(("xs", ArrayType(DayTimeIntervalType()))), r"'xs\[\]' is interval day to second.*use STRING"),
    (_struct(("n", NullType())), r"'n' is void"),
    (StructType([]), "STRUCT without fields"),
    (_struct(("a", StringType()), ("a", LongType())), "duplicate field names"),
    (StringType(), "must be a StructType.*'value string'"),
])
def test_unmappable_types_are_refused_naming_the_field(fmt, match):
    with pytest.raises(ValueError, match=match):
        OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", response_format=fmt)


class Money(pydantic.BaseModel):
    amount: Decimal


class Either(pydantic.BaseModel):
    value: int | str


class Node(pydantic.BaseModel):
    child: Node | None = None


class Aliased(pydantic.BaseModel):
    name: str = pydantic.Field(alias="Name")


class IntKeys(pydantic.BaseModel):
    by_id: dict[int, str]


@pytest.mark.parametrize("model,match", [
    (Money, r"'amount' has the type 'Decimal'.*pass a StructType, e.g. for DECIMAL"),
    (Either, r"'value' is a union"),
    (Node, r"contains itself"),
    (Aliased, r"alias 'Name'"),
    (IntKeys, r"'by_id.key': JSON object keys are strings"),
])
def test_pydantic_models_without_an_exact_spark_type_are_refused(model, match):
    with pytest.raises(ValueError, match=match):
        OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", response_format=model)


def test_other_bad_arguments_say_what_to_pass():
    with pytest.raises(TypeError, match="DDL string.*StructType.*pydantic"):
        OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", response_format={"type": "json_object"})
    with pytest.raises(ValueError, match="not also in extra_body"):
        OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", response_format=_struct(("a", StringType())),
                   extra_body={"response_format": {"type": "json_object"}})
    with pytest.raises(ValueError, match="response_format is empty"):
        OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", response_format="  ")


def test_without_response_format_the_answer_stays_a_string(srv):
    fn = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY)
    assert fn.response_type is None
    assert run(invoke_all(fn, ['json:{"a": 1}'])) == [["echo: json:{\"a\": 1}"]]


def test_retry_strategy_with_is_retryable_covers_bad_answers(srv):
    fn = chat(srv, _struct(("a", StringType())))
    out, op = run(through_operator(fn, ['flaky-json:{"a": "x"}'],
                                   retry=RetryStrategy.fixed_delay(2, 0.01, exception_predicate=is_retryable)))
    assert out == [{"a": "x"}] and op.metrics.retries == 1


def test_chat_takes_pace_by_headers_like_embeddings():
    from aiospark.connectors.openai import OpenAIChat

    assert OpenAIChat("m", base_url="http://127.0.0.1:9/v1").pace_by_headers is True
    assert OpenAIChat("m", base_url="http://127.0.0.1:9/v1", pace_by_headers=False).pace_by_headers is False
    with pytest.raises(TypeError, match="pace_by_headers must be True"):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", pace_by_headers="no")
