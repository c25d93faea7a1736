"""The README's runnable examples run (those that need no external service)."""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiospark

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples_for_every_entry_point():
    text = README.read_text()
    for name in ("ordered_wait", "unordered_wait", "async_udf", "lookup_join", "lookup_udf", "aiospark demo"):
        assert name in text


def test_self_contained_examples_run(spark, capsys):
    runnable = [b for b in blocks() if "127.0.0.1" not in b and "redis" not in b.lower()]
    assert len(runnable) >= 2
    for code in runnable:
        namespace = {"__name__": "readme_example", "asyncio": asyncio, "aiospark": aiospark, "spark": spark}
        exec(compile(code, str(README), "exec"), namespace)
    shown = capsys.readouterr().out
    assert "|  a|  1.5|" in shown and "|10.0.0.1|     NL|" in shown
