"""Structured answers (issue 45, part 4): every conversion error is an answer error quoting the
answer, numbers are parsed at a bounded cost, a pydantic model's validated values are what Spark
gets, and allowed values (``Literal``, ``Enum``, a comment ``enum: ...``) are sent as JSON Schema
``enum`` and checked -- through the real request path of the test server (``json:`` prompts are
answered verbatim), both transports.
"""
from __future__ import annotations

import enum
import time
from decimal import Decimal
from typing import Literal

import pydantic
import pytest
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from aiospark.connectors import ConnectorError
from aiospark.connectors.openai import OpenAIChat
from tests.support.openai_structured import strict_problem

from ._openai_support import CLIENTS, KEY, invoke_all, run


def chat(srv, fmt, **kwargs):
    return OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, response_format=fmt, **kwargs)


def one(name, data_type, nullable=True, metadata=None):
    return StructType([StructField(name, data_type, nullable, metadata)])


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("struct, text, words", [
    (one("x", DoubleType()), '{"x": ' + "9" * 400 + "}", "out of the range of double"),
    (one("x", DecimalType(10, 2)), '{"x": 1e200}', "too large for decimal(10,2)"),
    (one("x", DecimalType(10, 2)), '{"x": 1e-1000000}', "more than 2 digits after the point"),
    (one("x", IntegerType()), '{"x": 1e1000000}', "out of the range of int"),
    (one("x", LongType()), '{"x": ' + "9" * 400 + "}", "out of the range of bigint"),
    (one("x", StringType()), '{"x": ' + "9" * 400 + "}", "not a string"),
    (one("x", LongType()), '{"x": ' + "9" * 5000 + "}", "not JSON of numbers Python can read"),
])
def test_numbers_beyond_a_type_are_answer_errors_quoting_the_answer_at_a_bounded_cost(srv, client, struct, text,
                                                                                      words):
    fn = chat(srv, struct, client=client)
    start = time.monotonic()
    (result,) = run(invoke_all(fn, ["json:" + text]))
    took = time.monotonic() - start
    assert isinstance(result, ConnectorError) and result.retryable, result  # never a raw OverflowError
    assert words in str(result) and "the answer: " + repr(text[:200] + ("..." if len(text) > 200 else "")) \
        in str(result)
    assert len(str(result)) < 1000  # the number is shown short, not in its thousands of digits
    assert took < 5, took  # generous: the old code blocked the loop ~8 s on 1e1000000


class Sentiment(pydantic.BaseModel):
    label: str

    @pydantic.field_validator("label")
    @classmethod
    def normalise(cls, value: str) -> str:
        return value.strip().lower()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_pydantic_models_validated_values_are_what_spark_gets(srv, client):
    fn = chat(srv, Sentiment, client=client)
    assert run(invoke_all(fn, ['json:{"label": "  POSITIVE "}'])) == [[{"label": "positive"}]]


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Review(pydantic.BaseModel):
    label: Literal["pos", "neg", "neutral"]
    stars: Literal[1, 2, 3] | None
    colour: Colour
    tags: list[Literal["food", "price"]]


@pytest.mark.parametrize("client", CLIENTS)
def test_literal_and_enum_fields_are_sent_as_enum_and_checked(srv, client):
    fn = chat(srv, Review, client=client)
    assert fn.response_type.simpleString() == "struct<label:string,stars:bigint,colour:string,tags:array<string>>"
    schema = fn._response_format["json_schema"]["schema"]
    assert strict_problem(schema) is None
    props = schema["properties"]
    assert props["label"] == {"type": "string", "enum": ["pos", "neg", "neutral"]}
    assert props["stars"]["enum"] == [1, 2, 3, None] and props["stars"]["type"] == ["integer", "null"]
    assert props["colour"] == {"type": "string", "enum": ["red", "green"]}
    assert props["tags"] == {"type": "array", "items": {"type": "string", "enum": ["food", "price"]}}
    good, bad_label, bad_tag = run(invoke_all(fn, [
        'json:{"label": "pos", "stars": null, "colour": "red", "tags": ["food"]}',
        'json:{"label": "positive", "stars": 2, "colour": "red", "tags": []}',
        'json:{"label": "neg", "stars": 2, "colour": "green", "tags": ["food", "service"]}']))
    assert good == [{"label": "pos", "stars": None, "colour": "red", "tags": ["food"]}]  # the Enum's value
    assert isinstance(bad_label, ConnectorError) and bad_label.retryable
    assert "label is the string 'positive', not one of the allowed values ['pos', 'neg', 'neutral']" in str(bad_label)
    assert "tags[1] is the string 'service', not one of the allowed values" in str(bad_tag)
    # the server answers the schema's own sample: the first allowed value of each
    (sampled,) = run(invoke_all(fn, ["anything"]))
    assert sampled == [{"label": "pos", "stars": 1, "colour": "red", "tags": ["food", "food"]}]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_comment_enum_gives_allowed_values_without_pydantic(srv, client):
    struct = StructType([StructField("label", StringType(), False, {"comment": "enum: pos, neg"}),
                         StructField("level", IntegerType(), True, {"comment": "enum: [1, 2]"}),
                         StructField("why", StringType(), True, {"comment": "a short reason"})])
    fn = chat(srv, struct, client=client)
    props = fn._response_format["json_schema"]["schema"]["properties"]
    assert props["label"] == {"type": "string", "enum": ["pos", "neg"]}
    assert props["level"]["enum"] == [1, 2, None]
    assert props["why"] == {"type": ["string", "null"], "description": "a short reason"}
    ok, bad = run(invoke_all(fn, ['json:{"label": "neg", "level": 2, "why": null}',
                                  'json:{"label": "neg", "level": 3, "why": null}']))
    assert ok == [{"label": "neg", "level": 2, "why": None}]
    assert isinstance(bad, ConnectorError) and "level is the number 3, not one of the allowed values [1, 2]" in str(bad)


@pytest.mark.parametrize("fmt, match", [
    (one("x", DoubleType(), metadata={"enum": [1.5]}), "apply to a STRING or integer field"),
    (one("x", StringType(), metadata={"enum": []}), "non-empty list"),
    (one("x", StringType(), metadata={"enum": ["a", "a"]}), "repeat"),
    (one("x", IntegerType(), metadata={"comment": "enum: one, two"}), "must be integers"),
    (one("x", ArrayType(IntegerType()), metadata={"enum": ["a"]}), "must be integers"),
])
def test_bad_allowed_values_are_refused_at_definition(fmt, match):
    with pytest.raises(ValueError, match=match):
        OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", response_format=fmt)


class Mixed(pydantic.BaseModel):
    x: Literal["a", 1]


class Deep(pydantic.BaseModel):
    x: list[list[Literal["a"]]]


@pytest.mark.parametrize("model, match", [(Mixed, "all strings or all integers"), (Deep, "not deeper")])
def test_allowed_values_a_spark_column_cannot_hold_are_refused(model, match):
    with pytest.raises(ValueError, match=match):
        OpenAIChat("chat", base_url="http://127.0.0.1:9/v1", response_format=model)


def test_decimal_answers_still_read_exactly(srv):
    fn = chat(srv, one("x", DecimalType(10, 2), nullable=False))
    assert run(invoke_all(fn, ['json:{"x": 12345678.90}'])) == [[{"x": Decimal("12345678.90")}]]


class KeyErrorModel(pydantic.BaseModel):
    n: int

    @pydantic.model_validator(mode="before")
    @classmethod
    def rename(cls, data):
        return {"n": data["missing"]}  # KeyError on every answer


class DivisionModel(pydantic.BaseModel):
    n: int

    @pydantic.field_validator("n")
    @classmethod
    def divide(cls, value):
        return 1 // (value - value)  # ZeroDivisionError


class WrongTypeModel(pydantic.BaseModel):
    name: str

    @pydantic.field_validator("name")
    @classmethod
    def number(cls, value):
        return 12345 if value == "num" else value


class WrongLiteralModel(pydantic.BaseModel):
    label: Literal["a", "b"]

    @pydantic.model_validator(mode="after")
    def overwrite(self):
        object.__setattr__(self, "label", "zzz")  # pydantic does not check an after-validator's result
        return self


class TooBigModel(pydantic.BaseModel):
    n: int

    @pydantic.field_validator("n")
    @classmethod
    def big(cls, value):
        return 10 ** 30


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("model, text, words", [
    (KeyErrorModel, '{"n": 1}', "'missing'"),
    (DivisionModel, '{"n": 1}', "integer division or modulo by zero"),
    (WrongTypeModel, '{"name": "num"}', "name is the number 12345 after the model's validators, not a string"),
    (WrongLiteralModel, '{"label": "a"}', "label is the string 'zzz' after the model's validators, not one of the "
                                          "allowed values ['a', 'b']"),
    (TooBigModel, '{"n": 1}', "out of the range of bigint"),
])
def test_whatever_a_validator_raises_or_returns_is_an_answer_error_quoting_the_answer(srv, client, model, text,
                                                                                      words):
    # before: a KeyError / ZeroDivisionError reached the user raw (not retryable, no answer quoted),
    # and a value outside the field's type or allowed values went on to Spark
    fn = chat(srv, model, client=client)
    (result,) = run(invoke_all(fn, ["json:" + text]))
    assert isinstance(result, ConnectorError) and result.retryable, repr(result)
    assert words in str(result) and "the answer: " + repr(text) in str(result), str(result)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_key_repeated_in_a_structured_answer_is_an_answer_error(srv, client):
    # before: json.loads kept the last of the two, silently
    fn = chat(srv, one("label", StringType()), client=client)
    text = '{"label": "pos", "label": "neg"}'
    (result,) = run(invoke_all(fn, ["json:" + text]))
    assert isinstance(result, ConnectorError) and result.retryable, repr(result)
    assert "the key 'label' is repeated" in str(result) and "the answer: " + repr(text) in str(result)
