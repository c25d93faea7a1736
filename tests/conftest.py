"""Shared fixtures: one real local Spark session for the whole run.

Spark's Python workers must import the test modules that define the functions they run (those are
pickled by reference), so the repository root goes on PYTHONPATH before the JVM starts, and the
workers run this very interpreter.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

# Connect and cluster tests need a process of their own (a JVM per kind of session): they live in
# tests/isolated and run through tests/spark/test_isolated.py, which starts a child pytest for each.
_ISOLATED = os.environ.get("AIOSPARK_ISOLATED")
collect_ignore = [] if _ISOLATED else ["isolated"]


@pytest.fixture(scope="session")
def spark():
    """A classic local[2] session shared by every test of the run."""
    import aiospark

    session = aiospark.local_session("local[2]", conf={"spark.sql.execution.arrow.maxRecordsPerBatch": 1000})
    yield session
    session.stop()
