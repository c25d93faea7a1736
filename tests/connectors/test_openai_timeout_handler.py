"""An OpenAI function keeps AsyncFunction's timeout handler: its request timeout is stored apart.

The operator calls ``function.timeout(value)`` when a call's deadline passes; an attribute named
``timeout`` holding the request's seconds made that a ``'float' object is not callable`` error
instead of the AsyncTimeoutError the retry predicates and error rows expect.
"""
import pytest

from aiospark import AsyncTimeoutError
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings


@pytest.mark.parametrize("make", [
    lambda: OpenAIChat("m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5),
    lambda: OpenAIEmbeddings("m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5),
])
def test_the_timeout_handler_is_asyncfunctions(make):
    function = make()
    with pytest.raises(AsyncTimeoutError):
        function.timeout({"text": "x"})
