"""Credentials: :class:`Secret` (never shown by ``repr``/``str``) and where one comes from.

Example::

    >>> Secret("s3cret")
    '***'
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["Secret", "is_credential_header", "resolve_secret"]

#: what in a header's name says its value is a credential (Authorization, api-key, X-Api-Key,
#: Cookie, X-Auth-Token, X-Amz-Security-Token, X-Signature, ...): broader than for settings,
#: since a header is far more often a credential than an answer-deciding setting
_CREDENTIAL_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "password", "signature", "session")


class Secret:
    """A credential that never shows in ``repr``/``str``; ``reveal()`` returns the value."""

    __module__ = "aiospark.connectors"  # its public home (reprs, pickles)
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __getstate__(self) -> str:
        return self._value

    def __setstate__(self, state: str) -> None:
        self._value = state


def resolve_secret(value: Any, env: str | None) -> Secret | None:
    """An explicit ``value`` wins; else the environment variable ``env`` (if set)."""
    if isinstance(value, Secret):
        return value
    if value is not None:
        if not isinstance(value, str):
            raise TypeError("credentials must be strings")
        return Secret(value)
    if env:
        found = os.environ.get(env)
        if found:
            return Secret(found)
    return None


def is_credential_header(name: str) -> bool:
    """Whether an HTTP header named ``name`` may carry a credential (never fingerprinted or shown).

    >>> is_credential_header("X-Api-Key"), is_credential_header("X-Route")
    (True, False)
    """
    low = name.lower()
    return any(word in low for word in _CREDENTIAL_HEADER_WORDS)
