"""Fixtures of the journal tests: an S3-compatible server (moto's server mode) on 127.0.0.1."""
from __future__ import annotations

import pytest

from tests.support.s3 import S3Server


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server
