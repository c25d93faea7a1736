"""The CLI keeps Spark's log in a temporary file when a run fails (the message names it): each test
gets its own TMPDIR, which its subprocesses inherit and its in-process runs (``cli``) read again,
so those files go away with the test's temporary directories."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_tmpdir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmpdir")))


@pytest.fixture
def cli(spark):
    """``cli("enrich", ...)``: the command run in this process on the session-wide session
    (tests/cli/enrich_support.py ``run_cli``)."""
    from tests.cli.enrich_support import run_cli

    return run_cli
