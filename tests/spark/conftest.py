"""Fixtures of the Spark-level tests: a counting FaultService on 127.0.0.1 per module."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.service import FaultService, ServiceConfig


@pytest.fixture(scope="module")
def service() -> Iterator[FaultService]:
    """A real HTTP service answering ``GET /item/{key}`` in about 2 ms; ``calls(service)``
    (tests/support/journal.py) counts its requests."""
    svc = FaultService(ServiceConfig(latency=0.002)).start()
    yield svc
    svc.stop()
