"""The built-in connectors' settings that decide answers are a journal's question, their
credentials and servers are not (issue 43, item 2, the review of its closing note).

Each test binds a real directory journal to the manifest an entry point makes of the connector
(``Manifest.of``, as ``unordered_wait``/``lookup_join`` do on the driver), records an outcome,
then binds it again for the changed connector: a changed setting is refused by ``bind`` -- before
any task, so before any call -- naming it; a rotated credential or a moved server is accepted and
the recorded outcome served. No connector connects when it is made, so no server is needed.
(What is tested elsewhere, not repeated here: OpenAIChat's model, system, temperature, headers
and API key, RedisLookup's key pattern and db number, PostgresLookup's database name and host:
``tests/spark/test_journal_identity.py``, ``tests/spark/test_journal_fingerprint_spark.py``.)
"""
from __future__ import annotations

import importlib
import sys
import uuid
from typing import Any

import pytest

from aiospark.connectors import HttpLookup, PostgresLookup, RedisLookup
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings
from aiospark.journal import Journal, JournalMismatch, Manifest

KEY = "sk-fingerprint-S3cret-0001"
BASE = "http://127.0.0.1:8000/v1"


def manifest(entry: str, function: Any) -> Manifest:
    return Manifest.of(entry, function, "id INT, answer STRING", ["id"], ["int"])


def first_run(location: str, entry: str, function: Any) -> None:
    """A first run's journal: one recorded outcome (the manifest is written with it)."""
    view = Journal(location).bind(manifest(entry, function)).open_task(0, None, "first")
    view.record("[1]", [{"id": 1, "answer": "recorded"}], None)
    view.close()


def refused(location: str, entry: str, function: Any, part: str, *hidden: str) -> None:
    with pytest.raises(JournalMismatch, match=rf"the function's {part} changed") as info:
        Journal(location).bind(manifest(entry, function))
    assert "Nothing was called" in str(info.value) and "version=" in str(info.value)
    for secret in hidden:
        assert secret not in str(info.value)


def served(location: str, entry: str, function: Any) -> None:
    """Accepted: the same journal serves the first run's outcome."""
    view = Journal(location).bind(manifest(entry, function)).open_task(0, None, "again")
    view.prefetch(["[1]"])
    recorded = view.recorded("[1]")
    view.close()
    assert recorded is not None and recorded.results == [{"id": 1, "answer": "recorded"}]


def manifest_text(location: str) -> str:
    with open(f"{location}/manifest.json") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------- OpenAI
MODEL = '''
from pydantic import BaseModel, Field


class Verdict(BaseModel):
    label: str
    score: int = Field(ge=0, le={top})
{extra}'''


@pytest.fixture
def verdicts(tmp_path):
    """``write(top, extra)``: the user's module ``Verdict`` lives in, as of the next deploy
    (another process would import the changed file; here it is reloaded)."""
    name = f"f43_models_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    sys.path.insert(0, str(tmp_path))
    module: list[Any] = []

    def write(top: int, extra: str = "") -> Any:
        # each version another size: a same-size rewrite in the same second could reuse the old .pyc
        path.write_text(MODEL.format(top=top, extra=extra))
        importlib.invalidate_caches()
        module[:] = [importlib.reload(module[0]) if module else importlib.import_module(name)]
        return module[0].Verdict

    yield write
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def chat(response_format: Any = None, **kw: Any) -> OpenAIChat:
    return OpenAIChat("chat", base_url=kw.pop("base_url", BASE), api_key=kw.pop("api_key", KEY),
                      response_format=response_format, **kw)


def test_a_response_format_model_changed_by_one_field_is_refused(tmp_path, verdicts):
    loc = str(tmp_path / "j")
    first_run(loc, "ordered_wait/unordered_wait", chat(verdicts(10)))
    refused(loc, "ordered_wait/unordered_wait", chat(verdicts(10, "    reason: str\n")),
            "setting 'response_format'", KEY)
    served(loc, "ordered_wait/unordered_wait", chat(verdicts(10), api_key="sk-rotated-0002"))
    assert KEY not in manifest_text(loc)


def test_a_response_format_models_validation_is_part_of_the_question(tmp_path, verdicts):
    """``Field(le=10)`` edited to ``le=5``: the request's JSON Schema is the same, yet a score of 7
    is now the row's error (the column gets the model's validated values): another question."""
    loc = str(tmp_path / "j")
    first_run(loc, "ordered_wait/unordered_wait", chat(verdicts(10)))
    refused(loc, "ordered_wait/unordered_wait", chat(verdicts(5)), "setting 'response_model'")
    served(loc, "ordered_wait/unordered_wait", chat(verdicts(10)))  # the old model again: the same question


def schema_body(*fields: str) -> dict[str, Any]:
    """A JSON Schema response format given as a request field (``extra_body``), as the API takes it."""
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": {
        "type": "object", "additionalProperties": False, "required": list(fields),
        "properties": {f: {"type": "string"} for f in fields}}}}}


def test_a_json_schema_response_format_changed_by_one_field_is_refused(tmp_path):
    loc = str(tmp_path / "j")
    first_run(loc, "ordered_wait/unordered_wait", chat(extra_body=schema_body("label", "score")))
    refused(loc, "ordered_wait/unordered_wait", chat(extra_body=schema_body("label", "score", "reason")),
            "setting 'extra_body'")
    served(loc, "ordered_wait/unordered_wait", chat(extra_body=schema_body("label", "score")))


@pytest.mark.parametrize("make", [
    lambda **kw: chat(**kw),
    lambda **kw: OpenAIEmbeddings("embed", base_url=kw.pop("base_url", BASE), api_key=kw.pop("api_key", KEY), **kw),
], ids=["chat", "embeddings"])
def test_another_base_url_is_refused_and_another_key_is_not(tmp_path, make):
    loc = str(tmp_path / "j")
    first_run(loc, "ordered_wait/unordered_wait", make())
    for other in ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8000/v2", f"{BASE}?api-version=2024-06-01"):
        refused(loc, "ordered_wait/unordered_wait", make(base_url=other), "setting 'base_url'", KEY)
    served(loc, "ordered_wait/unordered_wait", make(base_url=f"{BASE}/", api_key="sk-rotated-0002"))
    assert KEY not in manifest_text(loc) and "rotated" not in manifest_text(loc)


def test_a_base_urls_query_is_part_of_the_question_and_its_credentials_are_not(tmp_path):
    """Azure's ``?api-version=`` picks the API's version; a key some gateways take in the query
    (``?key=``) is a credential."""
    loc = str(tmp_path / "j")
    first_run(loc, "ordered_wait/unordered_wait", chat(base_url=f"{BASE}?api-version=2024-02-01&key=k-one"))
    refused(loc, "ordered_wait/unordered_wait", chat(base_url=f"{BASE}?api-version=2024-06-01&key=k-one"),
            "setting 'base_url'", "k-one")
    served(loc, "ordered_wait/unordered_wait", chat(base_url=f"{BASE}?api-version=2024-02-01&key=k-two"))
    assert "k-one" not in manifest_text(loc)


# ---------------------------------------------------------------------------------------------- lookups
def test_an_http_lookups_url_template_is_the_question_and_its_credentials_are_not(tmp_path):
    loc = str(tmp_path / "j")

    def http(template: str) -> HttpLookup:
        return HttpLookup(template, "name STRING")

    first_run(loc, "lookup_join", http("http://alice:pw-one@127.0.0.1:9000/customers/{id}?api_key=q-one"))
    for other in ("http://alice:pw-one@127.0.0.1:9000/suppliers/{id}?api_key=q-one",
                  "http://alice:pw-one@127.0.0.1:9000/customers/{id}?api_key=q-one&lang=fr",
                  "http://alice:pw-one@127.0.0.1:9001/customers/{id}?api_key=q-one"):
        refused(loc, "lookup_join", http(other), "setting 'url_template'", "pw-one", "q-one")
    served(loc, "lookup_join", http("http://alice:pw-two@127.0.0.1:9000/customers/{id}?api_key=q-two"))
    assert "pw-one" not in manifest_text(loc) and "q-one" not in manifest_text(loc)


def postgres(table: str = "customers", key: str | list[str] = "id", schema: str = "name STRING", **kw: Any) -> Any:
    settings = {"host": "127.0.0.1", "port": 5432, "user": "app", "password": "pg-one", "database": "shop", **kw}
    return PostgresLookup(table, key, schema, **settings)


def test_a_postgres_lookups_table_and_columns_are_the_question(tmp_path):
    loc = str(tmp_path / "j")
    first_run(loc, "lookup_join", postgres())
    refused(loc, "lookup_join", postgres(table="suppliers"), "setting 'table'", "pg-one")
    refused(loc, "lookup_join", postgres(key="customer_id"), "setting 'key_columns'", "pg-one")
    refused(loc, "lookup_join", postgres(schema="name STRING, email STRING"), "setting 'schema'", "pg-one")
    refused(loc, "lookup_join", postgres(schema="email STRING"), "setting 'schema'", "pg-one")


def test_a_postgres_lookup_on_another_server_with_other_credentials_is_the_same_question(tmp_path):
    loc = str(tmp_path / "j")
    first_run(loc, "lookup_join", postgres())
    served(loc, "lookup_join", postgres(host="db.internal", port=6432, user="reader", password="pg-two"))
    served(loc, "lookup_join", PostgresLookup("customers", "id", "name STRING",
                                              dsn="postgresql://other:pg-three@10.0.0.5:5433/shop"))
    assert "pg-one" not in manifest_text(loc) and "5432" not in manifest_text(loc)


def test_a_redis_lookup_on_another_server_with_other_credentials_is_the_same_question(tmp_path):
    loc = str(tmp_path / "j")

    def redis(url: str, **kw: Any) -> RedisLookup:
        return RedisLookup("customer:{id}", "name STRING", url=url, **kw)

    first_run(loc, "lookup_join", redis("redis://:rd-one@127.0.0.1:6379/2"))
    served(loc, "lookup_join", redis("redis://:rd-two@10.0.0.7:6380/2"))
    served(loc, "lookup_join", redis("redis://10.0.0.8:6379?db=2", password="rd-three", username="app"))
    text = manifest_text(loc)
    assert "rd-one" not in text and "6379" not in text and "127.0.0.1" not in text
    # the control: what it reads did change (the db; the key pattern; the fields read)
    refused(loc, "lookup_join", redis("redis://:rd-one@127.0.0.1:6379/3"), "setting 'db'", "rd-one")
    refused(loc, "lookup_join", RedisLookup("customer:{id}", "name STRING, tier STRING",
                                            url="redis://127.0.0.1:6379/2"), "setting 'schema'")
