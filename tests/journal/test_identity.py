"""Row identities: canonical, stable across processes and Python versions, injective on hostile values."""
from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
from decimal import Decimal

import aiospark
from aiospark.core import AsyncWaitOperator
from aiospark.journal import RowIdentity, identity

HOSTILE = [
    None, 0, 1, -1, 2**80, 1.0, -0.0, 0.0, float("nan"), float("inf"), float("-inf"), True, False,
    "", "1", "null", "true", '"', "\\", "\n", "\x00", "é", "e\u0301", "😀", "{\"$dec\":\"1\"}", "sha256:x",
    b"", b"\x00\xff", bytearray(b"ab"), Decimal("1.10"), Decimal("1.1"), Decimal("-0"),
    dt.date(2020, 1, 2), dt.datetime(2020, 1, 2, 3, 4, 5), dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
    [1, 2], [[1], [2]], [None], {"a": 1}, {"a": None}, {"b": [1.5, None]}, {1: "x"}, "x" * 500,
]


def test_identities_are_distinct_for_distinct_values():
    texts = [identity([v]) for v in HOSTILE]
    assert len(set(texts)) == len(texts), [t for t in texts if texts.count(t) > 1]
    assert all(t.isascii() for t in texts)
    assert identity(["x" * 500]).startswith("sha256:") and len(identity(["x" * 500])) == 71


def test_identity_is_canonical_and_distinguishes_types():
    assert identity([7, "a"]) == '[7,"a"]'
    assert identity([1]) != identity([1.0]) != identity([True])
    assert identity([None, 1]) != identity([1, None])
    assert identity([Decimal("1.10")]) == '[{"$dec":"1.10"}]'
    assert identity([float("nan")]) == identity([float("nan")])


SCRIPT = ("import datetime as dt; from decimal import Decimal; from aiospark.journal import identity; "
          "print(identity([1, 2.5, 'é😀', b'\\x00', Decimal('3.14'), dt.date(2020,1,2), None, [1, {'a': 'b'}], "
          "float('nan'), 'x' * 300]))")


def test_identity_is_stable_across_processes_and_python_versions():
    outs = set()
    for python in [sys.executable] + [p for p in ("/root/.pyenv/versions/3.10.13/bin/python",
                                                  "/root/.pyenv/versions/3.13.0/bin/python")
                                      if __import__("os").path.exists(p)]:
        src = str(__import__("pathlib").Path(aiospark.__file__).parents[1])
        env = {"PYTHONPATH": src, "PYTHONHASHSEED": "random"}
        # only the identity module (stdlib only) is loaded in the other Pythons
        code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('ident', "
                f"{src!r} + '/aiospark/journal/identity.py'); m = importlib.util.module_from_spec(spec); "
                "spec.loader.exec_module(m); identity = m.identity; " + SCRIPT.split("; ", 3)[3].replace(
                    "from aiospark.journal import identity; ", ""))
        code = "import datetime as dt; from decimal import Decimal; " + code
        outs.add(subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert len(outs) == 1, outs


def test_row_identity_of_key_columns():
    of = RowIdentity(["b", "a"])
    assert of({"a": 1, "b": "x", "c": 9}) == identity(["x", 1])
    assert RowIdentity(["a"])({"a": None}) == "[null]"


def test_without_a_journal_the_identity_is_computed_only_when_a_call_asks_for_it():
    calls = []

    def of(value):
        calls.append(value)
        return identity([value])

    seen = {}

    async def fn(x):
        if x % 2:
            seen[x] = aiospark.idempotency_key()
        return x

    async def main():
        out = []
        op = AsyncWaitOperator(fn, out.append, identify=of, capacity=4)
        await op.open()
        for i in range(6):
            await op.process_element(i)
        await op.finish()
        await op.close()
        return out

    asyncio.run(main())
    assert seen == {1: "[1]", 3: "[3]", 5: "[5]"}
    assert sorted(calls) == [1, 3, 5]  # never encoded for the rows whose call did not ask
