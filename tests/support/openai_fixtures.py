"""The two pytest fixtures every OpenAI test module uses, for that module's API key.

Example (at module level; pytest collects fixtures by name)::

    server, srv = openai_fixtures("sk-test-S3cret")
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.openai_server import OpenAIServer


def openai_fixtures(api_key: str) -> tuple[Any, Any]:
    """``server``: one OpenAI-compatible test server per module, answering only ``api_key``;
    ``srv``: that server with its counters and scripted answers reset before each test."""

    @pytest.fixture(scope="module")
    def server() -> Iterator[OpenAIServer]:
        with OpenAIServer(api_key=api_key) as running:
            yield running

    @pytest.fixture
    def srv(server: OpenAIServer) -> OpenAIServer:
        server.reset()
        return server

    return server, srv
