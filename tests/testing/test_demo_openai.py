"""The demo OpenAI-compatible endpoint (``python -m aiospark.app.demo_service --openai``), driven by the real
openai SDK: structured answers that fit nested / array / nullable schemas, determinism, the
embeddings' shape, the header-advertised rate limit (429 + headers) and OpenAI-shaped errors.

Each endpoint runs in a child process exactly as a user starts it (:class:`DemoOpenAI`); the rate
limits used are far from anything a loaded machine's pauses could refill (one request per 20 s).
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from aiospark.app.demo_openai import DemoOpenAI, chat_answer, count_tokens, embedding, format_reset, schema_instance
from aiospark.app.demo_openai_schema import SchemaError


class Address(BaseModel):
    city: str
    zip: int | None = Field(ge=1000, le=9999)


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, le=120)
    score: float = Field(gt=0, lt=1)
    active: bool
    kind: Literal["customer", "supplier"]
    tags: list[str] = Field(min_length=1, max_length=3)
    address: Address
    previous: list[Address]
    nickname: str | None
    manager: Person | None  # recursive through $defs: must end


@pytest.fixture(scope="module")
def endpoint():
    with DemoOpenAI() as running:
        yield running


@pytest.fixture(scope="module")
def client(endpoint):
    sdk = openai.OpenAI(api_key="demo", base_url=endpoint.base_url, max_retries=0, timeout=60)
    yield sdk
    sdk.close()


def ask(client, prompt: str, **kwargs):
    return client.chat.completions.create(model="demo", messages=[{"role": "user", "content": prompt}], **kwargs)


def test_structured_answers_fit_nested_array_and_nullable_pydantic_models(client):
    people = []
    for i in range(40):
        reply = client.chat.completions.parse(model="demo", messages=[{"role": "user", "content": f"person {i}"}],
                                              response_format=Person)  # the SDK's strict schema, parsed back
        person = reply.choices[0].message.parsed
        assert isinstance(person, Person), reply.choices[0].message.content
        people.append(person)
    # nullable fields are sometimes null, sometimes not; lists have lengths within bounds
    assert 0 < sum(p.nickname is None for p in people) < 40
    assert 0 < sum(p.address.zip is None for p in people) < 40
    assert 0 < sum(p.manager is None for p in people) < 40
    assert {len(p.tags) for p in people} <= {1, 2, 3} and len({len(p.previous) for p in people}) > 1
    assert {p.kind for p in people} == {"customer", "supplier"}


def test_type_lists_maps_enums_formats_and_bounds(client):
    schema = {"type": "object", "additionalProperties": False,
              "required": ["n", "pair", "grid", "counts", "when", "mood", "ratio"],
              "properties": {
                  "n": {"type": ["integer", "null"], "minimum": 5, "maximum": 6},
                  "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}],
                           "items": False},
                  "grid": {"type": "array", "minItems": 2, "maxItems": 2,
                           "items": {"type": "array", "items": {"type": "number"}}},
                  "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
                  "when": {"type": "string", "format": "date-time"},
                  "mood": {"enum": ["up", "down"]},
                  "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}
    nulls = 0
    for i in range(30):
        value = json.loads(ask(client, f"row {i}", response_format=fmt).choices[0].message.content)
        assert set(value) == set(schema["properties"])
        nulls += value["n"] is None
        assert value["n"] is None or value["n"] in (5, 6)
        assert isinstance(value["pair"][0], str) and isinstance(value["pair"][1], bool) and len(value["pair"]) == 2
        assert len(value["grid"]) == 2 and all(isinstance(x, float) for row in value["grid"] for x in row)
        assert value["counts"] and all(isinstance(v, int) for v in value["counts"].values())
        assert re.fullmatch(r"2024-\d\d-\d\dT\d\d:\d\d:00Z", value["when"])
        assert value["mood"] in ("up", "down") and 0 < value["ratio"] < 1
    assert 0 < nulls < 30


def test_answers_are_deterministic_functions_of_the_request(client, endpoint):
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": Person.model_json_schema()}}
    first = ask(client, "same prompt", response_format=fmt)
    again = ask(client, "same prompt", response_format=fmt)
    assert first.choices[0].message.content == again.choices[0].message.content
    assert first.choices[0].message.content == schema_instance(Person.model_json_schema(), "same prompt")
    assert ask(client, "other prompt", response_format=fmt).choices[0].message.content != \
        first.choices[0].message.content
    plain = ask(client, "how are you?")
    assert plain.choices[0].message.content == chat_answer("how are you?")
    assert plain.usage.prompt_tokens == count_tokens("how are you?")
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + count_tokens(chat_answer("how are you?"))
    cut = ask(client, "how are you?", max_tokens=3)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens <= 3
    # the last user message decides, not the system message or earlier turns
    convo = client.chat.completions.create(model="demo", messages=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"}, {"role": "user", "content": "how are you?"}])
    assert convo.choices[0].message.content == plain.choices[0].message.content


def test_embeddings_shape_and_usage(client):
    texts = ["alpha", "beta gamma", "alpha"]
    reply = client.embeddings.create(model="demo", input=texts, dimensions=16)
    assert [d.index for d in reply.data] == [0, 1, 2]
    assert all(len(d.embedding) == 16 for d in reply.data)
    assert all(math.isclose(sum(x * x for x in d.embedding), 1.0, rel_tol=1e-9) for d in reply.data)
    assert reply.data[0].embedding == reply.data[2].embedding != reply.data[1].embedding
    assert reply.data[1].embedding == pytest.approx(embedding("beta gamma", 16))
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == sum(count_tokens(t) for t in texts)
    assert len(client.embeddings.create(model="demo", input="one").data[0].embedding) == 256  # the default


def test_the_request_limit_is_advertised_and_enforced_with_429():
    with DemoOpenAI(rpm=3) as limited:  # a bucket of 3, one more every 20 s
        sdk = openai.OpenAI(api_key="demo", base_url=limited.base_url, max_retries=0, timeout=60)
        remaining = []
        for i in range(3):
            raw = sdk.chat.completions.with_raw_response.create(
                model="demo", messages=[{"role": "user", "content": f"q{i}"}])
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert re.fullmatch(r"\d+ms|\d+(\.\d+)?s|\d+m\d+s", raw.headers["x-ratelimit-reset-requests"])
            remaining.append(int(raw.headers["x-ratelimit-remaining-requests"]))
        assert remaining == [2, 1, 0]
        with pytest.raises(openai.RateLimitError) as refused:
            sdk.embeddings.create(model="demo", input="one more")
        headers = refused.value.response.headers
        assert int(headers["Retry-After"]) >= 1 and 0 < int(headers["retry-after-ms"]) <= 20_000
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert refused.value.body["code"] == "rate_limit_exceeded"
        assert limited.stats() == {"answered": 3, "rate_limited": 1, "errors": 0, "batch_submitted": {},
                                   "batch_submitted_twice": 0}
        sdk.close()


def test_the_token_limit_counts_prompt_and_answer():
    with DemoOpenAI(tpm=40) as limited:
        sdk = openai.OpenAI(api_key="demo", base_url=limited.base_url, max_retries=0, timeout=60)
        text = "x" * 100  # 25 tokens
        raw = sdk.embeddings.with_raw_response.create(model="demo", input=text)
        assert raw.headers["x-ratelimit-limit-tokens"] == "40"
        assert raw.headers["x-ratelimit-remaining-tokens"] == "15"
        with pytest.raises(openai.RateLimitError) as refused:
            sdk.embeddings.create(model="demo", input=text)
        assert refused.value.body["type"] == "tokens"
        with pytest.raises(openai.BadRequestError, match="more than the endpoint's limit of 40"):
            sdk.embeddings.create(model="demo", input="x" * 400)  # never fits: 400, not a 429 forever
        sdk.close()


def test_errors_are_openai_shaped(client, endpoint):
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model="demo", input=["a"], dimensions=0)
    assert bad.value.body["param"] == "dimensions" and "dimensions" in bad.value.body["message"]
    with pytest.raises(openai.BadRequestError, match=r"\$ref"):
        ask(client, "x", response_format={"type": "json_schema", "json_schema": {
            "name": "r", "schema": {"$ref": "https://example.com/schema"}}})
    with pytest.raises(openai.BadRequestError, match="stream"):
        ask(client, "x", stream=True)

    def post(path: str, data: bytes) -> tuple[int, dict]:
        request = urllib.request.Request(endpoint.base_url + path, data=data, method="POST")
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    for path, data, status in (("/chat/completions", b"not json", 400), ("/nowhere", b"{}", 404),
                               ("/embeddings", b"[" + b"1," * 3_000_000 + b"1]", 413)):
        got, body = post(path, data)
        assert got == status and set(body["error"]) == {"message", "type", "param", "code"}, body


def test_schema_errors_say_what_to_change():
    with pytest.raises(SchemaError, match="deeper than"):
        schema_instance({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}},
                                         "required": ["next"]}}, "$ref": "#/$defs/N"}, "p")
    with pytest.raises(SchemaError, match="minItems > maxItems"):
        schema_instance({"type": "array", "minItems": 3, "maxItems": 1}, "p")
    with pytest.raises(SchemaError, match="unknown type"):
        schema_instance({"type": "decimal"}, "p")
    with pytest.raises(SchemaError, match="more than 20000 values"):  # a schema cannot ask for a huge answer
        schema_instance({"type": "array", "minItems": 30_000, "maxItems": 30_000, "items": {"type": "integer"}}, "p")


def test_reset_durations_are_written_like_openai():
    assert [format_reset(s) for s in (0.0, 0.0201, 0.999, 1.0, 1.5, 59.9, 60.0, 360.0, 3723.0)] == \
        ["0ms", "21ms", "999ms", "1s", "1.5s", "59.9s", "1m0s", "6m0s", "1h2m3s"]


def test_the_command_line_binds_loopback_and_refuses_bad_settings(endpoint):
    assert endpoint.base_url.startswith("http://127.0.0.1:") and endpoint.base_url.endswith("/v1")
    done = subprocess.run([sys.executable, "-m", "aiospark.app.demo_service", "--openai", "--rpm", "5", "--rps", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--rpm or --rps, not both" in done.stderr
    with pytest.raises(ValueError, match="tpm must be > 0"):
        DemoOpenAI(tpm=0)
