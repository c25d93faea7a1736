"""The user's side of the operator: :class:`AsyncFunction` (same shape as PyFlink 2.2's)."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .errors import AsyncTimeoutError, describe_input


class AsyncFunction:
    """An async call made for every input element; returns a list of 0..n outputs.

    Override :meth:`async_invoke`; optionally :meth:`open` / :meth:`close` to manage a client shared
    by all calls, and :meth:`timeout` to produce a fallback result instead of failing.

    Example::

        class Lookup(AsyncFunction):
            async def open(self):
                self.session = aiohttp.ClientSession()
            async def async_invoke(self, value):
                async with self.session.get(f"http://127.0.0.1:8080/item/{value}") as r:
                    return [await r.json()]
            def timeout(self, value):
                return []          # emit nothing for a call that took too long
            async def close(self):
                await self.session.close()
    """

    async def open(self) -> None:
        """Called once, on the event loop, before the first call."""

    async def async_invoke(self, value: Any) -> list[Any]:
        """Make the call for ``value``; return a list (or tuple) of outputs."""
        raise NotImplementedError(f"{type(self).__name__} must implement async_invoke(value)")

    def timeout(self, value: Any) -> list[Any]:
        """Called when a call (retries included) times out. Return a list of outputs, or raise.

        May be ``async``. The default raises :class:`AsyncTimeoutError`.
        """
        raise AsyncTimeoutError(f"async call timed out for input {describe_input(value)}")

    async def close(self) -> None:
        """Called once, on the event loop, after the last call."""


def is_async_callable(fn: Any) -> bool:
    """True for ``async def`` functions, partials of them, and objects with an ``async def __call__``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 -- the method itself, to ask if it is async
    return call is not None and not inspect.isfunction(fn) and not inspect.isclass(fn) \
        and inspect.iscoroutinefunction(call)


def describe_function(fn: Any) -> str:
    """A short human name for a user function, for messages and warnings."""
    if isinstance(fn, AsyncFunction):
        return type(fn).__qualname__
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def check_async_function(function: Any, what: str = "function") -> Callable[..., Any]:
    """Validate an operator's function at definition time (TypeError that says what to change)."""
    if isinstance(function, type) and issubclass(function, AsyncFunction):
        raise TypeError(f"{what} is the class {function.__name__}; pass an instance: {function.__name__}()")
    if isinstance(function, AsyncFunction):
        if not inspect.iscoroutinefunction(type(function).async_invoke):
            raise TypeError(f"{type(function).__name__}.async_invoke must be defined with 'async def'")
        return function.async_invoke
    if not callable(function):
        raise TypeError(f"{what} must be an 'async def' function or an aiospark.AsyncFunction, "
                        f"got {type(function).__name__}")
    if not is_async_callable(function):
        raise TypeError(f"{what} {describe_function(function)!r} is not a coroutine function: "
                        "define it with 'async def' (blocking calls would serialise every row)")
    checked: Callable[..., Any] = function
    return checked
