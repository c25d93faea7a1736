"""The one place that knows a source's secrets and scrubs them from every text that leaves it.

A connector builds one :class:`Redactor` from everything secret it was given (passwords, tokens,
basic-auth pairs, header values, URL userinfo) and passes every error message, per-key error and
repr through it. Each secret is scrubbed in every form it can take in a message: as is,
URL-encoded, JSON- or repr-escaped (a server that echoes a request as JSON), and for a basic-auth
pair as ``user:password`` and its base64 (an echoed ``Authorization`` header).

Example::

    >>> r = Redactor(Secret("s3cret"), basic=(Secret("ann"), Secret("pw-1")))
    >>> r.scrub("token s3cret, header Basic YW5uOnB3LTE=")
    'token ***, header Basic ***'
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

from .errors import ConnectorError
from .secrets import Secret

__all__ = ["Redactor", "redact", "scrubbed", "short"]

MASK = "***"
#: Bodies and messages are scrubbed whole, up to this many characters, and only then cut short
#: (cutting first could leave half a secret at the cut).
SCRUB_LIMIT = 65_536

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


#: A secret shorter than this is masked only where it stands as a whole token (between characters
#: that are not letters or digits): masking a short one inside words ("th*** journal" for the
#: password "e") would spell it out by where the masks land.
WHOLE_TOKEN_BELOW = 6


def _forms(raw: str) -> set[str]:
    """Every spelling of ``raw`` a message may carry (JSON may escape any character as ``\\uXXXX``:
    a server that escapes all punctuation echoes ``sk-1`` as ``sk\\u002d1``)."""
    escaped = ["".join(c if c.isalnum() or ord(c) > 0xFFFF else f"\\u{ord(c):04{x}}" for c in raw) for x in "xX"]
    out = {raw, quote(raw, safe=""), quote(raw), quote_plus(raw), *escaped,
           json.dumps(raw)[1:-1], json.dumps(raw, ensure_ascii=False)[1:-1], repr(raw)[1:-1]}
    return {f for f in out if f}


def _pattern(forms: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex for every form, longest first; a short form only as a whole token."""
    if not forms:
        return None
    parts = [re.escape(f) if len(f) >= WHOLE_TOKEN_BELOW else rf"(?<![0-9A-Za-z]){re.escape(f)}(?![0-9A-Za-z])"
             for f in forms]
    return re.compile("|".join(parts))


class Redactor:
    """Scrubs a fixed set of secrets from text and exceptions.

    Args:
        *secrets: :class:`Secret` values (``None`` and empty ones are ignored).
        basic: an optional ``(user, password)`` pair sent as HTTP basic auth: the password, the
            ``user:password`` pair and its base64 are secrets.

    Pickles as its secrets only (the derived spellings are rebuilt on first use).
    """

    __slots__ = ("_secrets", "_forms", "_re")

    def __init__(self, *secrets: Secret | None, basic: tuple[Secret | None, Secret | None] | None = None) -> None:
        found = [s.reveal() for s in secrets if s]
        if basic is not None and (basic[0] or basic[1]):
            pair = f"{basic[0].reveal() if basic[0] else ''}:{basic[1].reveal() if basic[1] else ''}"
            found += [pair, base64.b64encode(pair.encode()).decode("ascii")]
            if basic[1]:
                found.append(basic[1].reveal())
        self._secrets = tuple(Secret(s) for s in dict.fromkeys(found))
        self._forms: tuple[str, ...] | None = None
        self._re: re.Pattern[str] | None = None

    def __getstate__(self) -> tuple:
        return self._secrets

    def __setstate__(self, state: tuple) -> None:
        self._secrets, self._forms, self._re = state, None, None

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} secret(s))"

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def _all_forms(self) -> tuple[str, ...]:
        if self._forms is None:
            forms: set[str] = set()
            for s in self._secrets:
                forms |= _forms(s.reveal())
            # longest first: a secret that contains another is masked whole
            self._forms = tuple(sorted(forms, key=len, reverse=True))
            self._re = _pattern(self._forms)
        return self._forms

    def scrub(self, text: str, limit: int | None = None) -> str:
        """``text`` with every secret masked; then cut to ``limit`` characters when given."""
        text = str(text)[:SCRUB_LIMIT]
        self._all_forms()
        if self._re is not None:
            text = self._re.sub(MASK, text)
        if limit is not None and len(text) > limit:
            text = text[: limit - 3] + "..."
        return text

    def exception(self, exc: BaseException, source: str) -> BaseException:
        """``exc`` as it may leave the connector: a :class:`ConnectorError` with scrubbed text.

        A ConnectorError keeps its class and attributes (status, retry_after, ...); any other
        exception passes unchanged when its text holds no secret (a caller's mistake stays a
        ValueError), else it becomes a ConnectorError naming the original type.
        """
        if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
            return exc
        if isinstance(exc, ConnectorError):
            message = self.scrub(getattr(exc, "_message", str(exc)))
            if message == getattr(exc, "_message", None) and not self._leaks(exc):
                return exc
            clean = type(exc).__new__(type(exc))
            clean.__dict__.update(exc.__dict__)
            clean._message = message
            Exception.__init__(clean, f"{exc.source}: {message}" if exc.source else message)
            return clean
        if not self._leaks(exc):
            return exc
        text = self.scrub(f"{type(exc).__name__}: {exc}".rstrip(": "), limit=500)
        return ConnectorError(text, source=source)

    def _leaks(self, exc: BaseException) -> bool:
        self._all_forms()
        return self._re is not None and self._re.search(str(exc)[:SCRUB_LIMIT]) is not None

    def outcomes(self, results: Any, source: str) -> Any:
        """A batch's ``{key: rows | exception}`` with every exception scrubbed (in place)."""
        if isinstance(results, dict):
            for key, value in results.items():
                if isinstance(value, BaseException):
                    results[key] = self.exception(value, source)
        return results


def scrubbed(method: F) -> F:
    """Decorate a connector's ``async`` method: whatever it raises (or returns as a per-key error)
    leaves through the connector's ``_redactor``, named after its ``_name``."""

    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await method(self, *args, **kwargs)
        except Exception as exc:
            clean = self._redactor.exception(exc, self._name)
            if clean is exc:
                raise
            raise clean from None
        return self._redactor.outcomes(result, self._name)

    return wrapper  # type: ignore[return-value]


def redact(text: str, *secrets: Secret | None) -> str:
    """Replace every secret value (and its URL-encoded form) in ``text`` by ``***``."""
    forms = {f for s in secrets if s for f in (s.reveal(), quote(s.reveal(), safe=""), quote(s.reveal())) if f}
    pattern = _pattern(tuple(sorted(forms, key=len, reverse=True)))
    return pattern.sub(MASK, text) if pattern is not None else text


def short(exc: BaseException, *secrets: Secret | None, limit: int = 300) -> str:
    """``"TypeName: message"`` of an exception, redacted and truncated."""
    msg = redact(str(exc), *secrets).strip()
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
