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


class BadInput(Exception):
    """Raise it (``from`` the service's error) to say a call failed because of its input, not the
    service: it is never retried, and a batch that fails with it is split in halves until each bad
    input fails alone while its neighbours get their results.

    Example::

        async def embed_many(texts):
            response = await client.post(url, json={"input": texts})
            if response.status_code == 400:  # the service refuses some text of the batch
                raise aiospark.BadInput(response.text)
            return response.json()["embeddings"]
    """


class BlockedLoopWarning(RuntimeWarning):
    """A user function blocked the event loop (``time.sleep``, ``requests``, a synchronous driver
    inside ``async def``): every other call in flight waited, so calls ran one at a time."""


class CancellationIgnoredWarning(RuntimeWarning):
    """A call went on after its timeout cancelled it (it caught ``CancelledError`` and did not
    re-raise it): its row got its timeout outcome and the call was left running."""


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


def _shown(text: Any, obj: Any, what: str) -> str:
    """``text(obj)`` (``repr`` or ``str``); a broken one must not hide the failure being reported."""
    try:
        return str(text(obj))
    except Exception as exc:
        return f"<{what} {type(obj).__name__}: its {text.__name__}() raised {type(exc).__name__}>"


def describe_input(value: Any, limit: int = _INPUT_REPR_LIMIT) -> str:
    """``repr(value)``, truncated to ``limit`` characters so huge inputs keep messages readable."""
    text = _shown(repr, value, "unrepresentable")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def error_line(exc: BaseException, limit: int = 2000) -> str:
    """``"Type: message"`` of a user's exception, as error rows show it, truncated to ``limit``.

    Example::

        error_line(ValueError("thirteen is unlucky"))   # 'ValueError: thirteen is unlucky'
    """
    text = f"{type(exc).__name__}: {_shown(str, exc, 'unprintable')}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def function_error(value: Any, cause: BaseException, what: str = "async call") -> AsyncFunctionError:
    """Build the operator failure for ``value``; the caller raises it ``from cause``."""
    error = AsyncFunctionError(f"{what} failed for input {describe_input(value)}: "
                               f"{_shown(repr, cause, 'unrepresentable')}")
    error.__cause__ = cause
    return error
