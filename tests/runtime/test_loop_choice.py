"""``AIOSPARK_LOOP``: which event loop a worker runs (default ``auto``: uvloop when installed)."""
import asyncio
import sys

import pytest

from aiospark.runtime.worker_loop import loop_choice, new_event_loop


def loop_kind(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("AIOSPARK_LOOP", raising=False)
    else:
        monkeypatch.setenv("AIOSPARK_LOOP", value)
    loop = new_event_loop()
    try:
        return type(loop).__module__.split(".")[0]
    finally:
        loop.close()


def test_the_default_is_uvloop_which_aiospark_installs(monkeypatch):
    monkeypatch.delenv("AIOSPARK_LOOP", raising=False)
    assert loop_choice() == "auto"
    assert loop_kind(monkeypatch, None) == "uvloop"
    assert loop_kind(monkeypatch, " UVLOOP ") == "uvloop"


def test_asyncio_picks_the_loop_asyncio_run_uses(monkeypatch):
    assert loop_kind(monkeypatch, "asyncio") == "asyncio"
    assert loop_kind(monkeypatch, "asyncio") == type(asyncio.new_event_loop()).__module__.split(".")[0]


def test_without_uvloop_auto_falls_back_and_uvloop_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert loop_kind(monkeypatch, "auto") == "asyncio"
    assert loop_kind(monkeypatch, "") == "asyncio"  # empty: the default
    with pytest.raises(ImportError, match="pip install uvloop"):
        loop_kind(monkeypatch, "uvloop")


def test_a_bad_value_names_the_choices(monkeypatch):
    monkeypatch.setenv("AIOSPARK_LOOP", "tokio")
    with pytest.raises(ValueError, match="asyncio, uvloop, auto.*'tokio'"):
        loop_choice()
