"""The connectors' old module paths still work (and say where things moved), and pickles made
before the move into packages still load (tests/connectors/data/pickles_before_split.json was made
with the flat layout, at the commit it names)."""

from __future__ import annotations

import base64
import importlib
import json
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import aiospark.connectors as connectors
from aiospark.connectors import (
    ConnectorError,
    ConnectorTimeout,
    HttpClient,
    HttpLookup,
    HttpStatusError,
    PostgresLookup,
    RedisLookup,
    Secret,
)
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings
from aiospark.connectors.redis import RedisRateLimit

#: old module -> (where it lives now, a name the old module exported)
MOVED = {
    "_common": ("aiospark.connectors.errors", "ConnectorError"),
    "shared": ("aiospark.connectors.clients", "SHARED"),
    "http_client": ("aiospark.connectors.http.client", "http_client"),
    "http_request": ("aiospark.connectors.http.request", "url_key"),
    "http_response": ("aiospark.connectors.http.response", "HttpStatusError"),
    "http_pyreqwest": ("aiospark.connectors.http._pyreqwest", "PyreqwestTransport"),
    "redis_url": ("aiospark.connectors.redis.url", "parse_url"),
    "redis_ratelimit": ("aiospark.connectors.redis.ratelimit", "RedisRateLimit"),
    "redis_ratelimit_local": ("aiospark.connectors.redis.ratelimit_local", "LocalCallers"),
    "redis_ratelimit_script": ("aiospark.connectors.redis.ratelimit_script", "GCRA_SCRIPT"),
    "openai_base": ("aiospark.connectors.openai.function", "default_retry"),
    "openai_chat": ("aiospark.connectors.openai.chat", "OpenAIChat"),
    "openai_embeddings": ("aiospark.connectors.openai.embeddings", "OpenAIEmbeddings"),
    "openai_pacing": ("aiospark.connectors.openai.pacing", "Pacer"),
    "openai_schema": ("aiospark.connectors.openai.schema", "json_schema"),
    "postgres_keys": ("aiospark.connectors.postgres.key_convert", "key_converter"),
}


def _fresh_import(name: str):
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)
    return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_naming_the_new_one_and_gives_the_same_objects(old):
    if old == "http_pyreqwest":
        pytest.importorskip("pyreqwest")
    new, name = MOVED[old]
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = _fresh_import(f"aiospark.connectors.{old}")
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asking for names warns no more: the warning is the import's
        namespace: dict = {}
        exec(f"from aiospark.connectors.{old} import {name}", namespace)
    assert namespace[name] is getattr(module, name)
    assert name in dir(module)
    with pytest.raises(AttributeError, match="moved to"):
        module.no_such_name  # noqa: B018


def test_the_old_common_module_still_has_every_name_it_had():
    module = _fresh_import_quiet("aiospark.connectors._common")
    for name in ("ConnectorError", "ConnectorTimeout", "Secret", "KeyTemplate", "is_retryable",
                 "resolve_secret", "redact", "short", "check_key", "has_null", "check_positive", "_rebuild"):
        assert getattr(module, name) is not None, name


def _fresh_import_quiet(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _fresh_import(name)


def test_the_package_exports_what_it_exported():
    assert sorted(connectors.__all__) == ["ConnectorError", "ConnectorTimeout", "HttpClient", "HttpLookup",
                                          "HttpStatusError", "PostgresLookup", "RedisLookup", "Secret",
                                          "is_retryable"]
    for name in connectors.__all__:
        assert getattr(connectors, name) is not None
    from aiospark.connectors.http import HttpLookup as h
    from aiospark.connectors.http import HttpStatusError as e
    assert (h, e) == (HttpLookup, HttpStatusError)


PICKLES = json.loads((Path(__file__).parent / "data" / "pickles_before_split.json").read_text())["pickles"]
CLASSES = {"ConnectorError": ConnectorError, "ConnectorTimeout": ConnectorTimeout,
           "HttpStatusError": HttpStatusError, "Secret": Secret, "HttpLookup": HttpLookup,
           "RedisLookup": RedisLookup, "PostgresLookup": PostgresLookup, "RedisRateLimit": RedisRateLimit,
           "OpenAIChat": OpenAIChat, "OpenAIEmbeddings": OpenAIEmbeddings, "HttpClient": HttpClient}


@pytest.mark.parametrize("name", sorted(PICKLES))
def test_a_pickle_made_before_the_move_loads_as_the_same_class(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # old pickles name the old modules
        obj = pickle.loads(base64.b64decode(PICKLES[name]))
    assert type(obj) is CLASSES[name]
    again = pickle.loads(pickle.dumps(obj))  # and pickles made now load too
    assert type(again) is CLASSES[name]
    if isinstance(obj, ConnectorError):
        assert (obj.source, again.source) == ("X(h:1)", "X(h:1)") or obj.source.startswith("HttpLookup(")
        assert str(again) == str(obj)
    if isinstance(obj, HttpStatusError):
        assert (obj.status, obj.retry_after, obj.retryable) == (503, 2.0, True)
    if name == "Secret":
        assert obj.reveal() == "hunter2" and repr(obj) == "'***'"


@pytest.mark.parametrize("cls", sorted(CLASSES.values(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_each_class_names_a_public_home_that_gives_it_back(cls):
    assert cls.__module__.count(".") <= 2  # aiospark.connectors[.<system>], never an inner module
    assert getattr(importlib.import_module(cls.__module__), cls.__qualname__) is cls


def test_the_openai_subpackage_never_shadows_the_openai_sdk():
    # absolute imports everywhere: 'import openai' after (and inside) aiospark.connectors.openai is the SDK
    code = ("import aiospark.connectors.openai.endpoint, aiospark.connectors.openai as mine, openai\n"
            "assert openai is not mine and openai.__name__ == 'openai', openai\n"
            "import os, aiospark\n"
            "home = os.path.dirname(os.path.abspath(aiospark.__file__))\n"
            "assert not os.path.abspath(openai.__file__).startswith(home + os.sep), openai.__file__\n"
            "assert hasattr(openai, 'AsyncOpenAI'), openai.__file__\n"
            "print('SDK', openai.__file__)\n")
    pytest.importorskip("openai")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SDK" in out.stdout, out.stdout + out.stderr
