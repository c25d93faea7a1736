"""Exceptions raised by the async-wait engine."""
from __future__ import annotations

from typing import Any

_INPUT_REPR_LIMIT = 200


class AsyncTimeoutError(TimeoutError):
    """An async call did not finish within the operator's ``timeout`` (retries included)."""


class AsyncFunctionError(RuntimeError):
    """The operator failed: an async call (after its retries) or its timeout handler raised.

    The message names the input (its repr, truncated to about 200 characters) and ``__cause__`` is
    the original exception.
    """


def describe_input(value: Any, limit: int = _INPUT_REPR_LIMIT) -> str:
    """``repr(value)``, truncated to ``limit`` characters so huge inputs keep messages readable."""
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not hide the real failure
        text = f"<unrepresentable {type(value).__name__}: {exc!r}>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def function_error(value: Any, cause: BaseException, what: str = "async call") -> AsyncFunctionError:
    """Build the operator failure for ``value``; the caller raises it ``from cause``."""
    error = AsyncFunctionError(f"{what} failed for input {describe_input(value)}: {cause!r}")
    error.__cause__ = cause
    return error
