"""A function's fingerprint: what decides its answers, never a secret, never something per run."""
from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import subprocess
import sys
import threading

import aiospark
from aiospark.connectors import Secret
from aiospark.journal.fingerprint import fingerprint
from aiospark.journal.manifest import Manifest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = "be brief"


class Client(aiospark.AsyncFunction):
    def __init__(self, style: str, key: str = "sk-one", nested: dict | None = None):
        self.style = style
        self.api_key = key
        self.password = Secret(key)
        self.options = nested or {"temperature": 0.5, "stop": ["\n"]}
        self.lock = threading.Lock()      # runtime objects: their type only
        self.loop = asyncio.new_event_loop()
        self.sock = socket.socket()

    async def async_invoke(self, row):
        return [row]


def close(client: Client) -> None:
    client.loop.close()
    client.sock.close()


def test_attributes_count_secrets_and_runtime_objects_do_not():
    a, b, c, d = Client("short"), Client("short", key="sk-two"), Client("long"), \
        Client("short", nested={"temperature": 0.7, "stop": ["\n"]})
    try:
        name, parts = fingerprint(a)
        assert name.endswith("test_fingerprint.Client")
        assert fingerprint(b) == (name, parts)  # another key, lock, loop and socket: the same question
        assert not any("key" in p or "password" in p for p in parts)
        assert Manifest.of("e", c, "x INT", [], []).differences(Manifest.of("e", a, "x INT", [], [])) == \
            ["the function's attribute 'style' changed"]
        assert Manifest.of("e", d, "x INT", [], []).differences(Manifest.of("e", a, "x INT", [], [])) == \
            ["the function's attribute 'options' changed"]
    finally:
        for client in (a, b, c, d):
            close(client)


async def uses_global(row):
    return f"{PROMPT}: {row}"


def partial_target(row, style):
    return style


def test_globals_partials_and_wrapped_functions():
    _, parts = fingerprint(uses_global)
    assert "global 'PROMPT'" in parts
    one = fingerprint(functools.partial(partial_target, style="a"))[1]
    two = fingerprint(functools.partial(partial_target, style="b"))[1]
    assert one["partial arguments"] != two["partial arguments"] and one["code"] == two["code"]


def test_the_fingerprint_is_the_same_in_another_process():
    client = Client("short")
    here = fingerprint(client)
    close(client)
    code = ("import json\nfrom aiospark.journal.fingerprint import fingerprint\n"
            "from tests.journal.test_fingerprint import Client, close, uses_global\n"
            "c = Client('short')\nprint(json.dumps([fingerprint(c), fingerprint(uses_global)]))\nclose(c)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "random"})
    there = json.loads(out.stdout)
    assert [tuple(there[0]), tuple(there[1])] == [here, fingerprint(uses_global)]


def test_secret_names_are_credentials_only():
    """Only credential names are left out; settings merely named like one count (issue 43 review)."""
    from aiospark.journal.fingerprint import is_secret_name

    for name in ("password", "api_key", "apikey", "token", "_token", "Authorization", "X-Api-Key", "api-key",
                 "Cookie", "db_password", "client_secret", "github_token", "credentials", "secret_access_key"):
        assert is_secret_name(name), name
    for name in ("auth", "secret_sauce", "api_key_style", "password_policy", "credentials_scope",
                 "max_tokens", "token_limit", "tokens", "key", "style", 7):
        assert not is_secret_name(name), name


def test_user_modules_and_libraries():
    import json

    from aiospark.journal.fingerprint import is_user_module

    assert json and not is_user_module("json") and not is_user_module("aiospark.journal")
    assert not is_user_module("pyspark.sql") and is_user_module(__name__)


def test_an_http_lookups_plain_header_values_are_the_question_and_its_credentials_are_not():
    from aiospark.connectors.http import HttpLookup

    def lookup(region: str, token: str, other: str) -> HttpLookup:
        return HttpLookup("http://127.0.0.1:1/x/{id}", "v STRING",
                          headers={"X-Region": region, "Authorization": f"Bearer {token}", "X-Other": Secret(other)})

    same = fingerprint(lookup("eu", "k1", "s1"))
    assert fingerprint(lookup("eu", "k2", "s2")) == same  # rotated credentials: the same question
    assert fingerprint(lookup("us", "k1", "s1")) != same  # another region: another question
    assert "k1" not in json.dumps(same[1]) and "s1" not in json.dumps(same[1])
