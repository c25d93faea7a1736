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


class BlockedLoopWarning(RuntimeWarning):
    """A user function blocked the event loop (``time.sleep``, ``requests``, a synchronous driver
    inside ``async def``): every other call in flight waited, so calls ran one at a time."""


BLOCKING_ADVICE = ("A blocking call inside 'async def' (time.sleep, requests, a synchronous database driver) "
                   "stops every other call in flight, so calls run one at a time: use an asyncio client, or "
                   "'await asyncio.to_thread(...)' for code that must block.")


#: A function's blocking is reported at most this often per process.
REPORT_BLOCKING_EVERY_SECONDS = 30.0
_blocking_reported: dict[str, float] = {}


def warn_blocking(function_name: str, detail: str) -> bool:
    """Warn (:class:`BlockedLoopWarning`) that ``function_name`` blocked the loop, at most once per
    ``REPORT_BLOCKING_EVERY_SECONDS`` per function and process; returns whether it warned."""
    import time
    import warnings

    now = time.monotonic()
    last = _blocking_reported.get(function_name)
    if last is not None and now - last < REPORT_BLOCKING_EVERY_SECONDS:
        return False
    _blocking_reported[function_name] = now
    warnings.warn(f"aiospark: {detail} " + BLOCKING_ADVICE, BlockedLoopWarning, stacklevel=3)
    return True


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
