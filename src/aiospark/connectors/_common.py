"""Shared pieces of the connectors: errors, secrets and key templates."""

from __future__ import annotations

import os
import string
from typing import Any, Sequence

__all__ = ["ConnectorError", "ConnectorTimeout", "Secret", "KeyTemplate", "is_retryable",
           "resolve_secret", "redact"]


class ConnectorError(Exception):
    """A lookup against an external system failed.

    Attributes:
        source: which source failed, e.g. ``"RedisLookup(127.0.0.1:6379/0)"``
            (host:port, never credentials).
        retryable: whether trying again later may succeed (connection refused,
            timeouts, 5xx) or not (bad request, unknown table, bad password).
    """

    def __init__(self, message: str, *, source: str = "", retryable: bool = False) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source
        self.retryable = retryable
        self._message = message

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), self._message, dict(self.__dict__)))


def _rebuild(cls: type, message: str, state: dict) -> ConnectorError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, f"{state.get('source')}: {message}" if state.get("source") else message)
    exc.__dict__.update(state)
    return exc


class ConnectorTimeout(ConnectorError, TimeoutError):
    """The external system did not answer in time (retryable)."""

    def __init__(self, message: str, *, source: str = "", retryable: bool = True) -> None:
        super().__init__(message, source=source, retryable=retryable)


def is_retryable(exc: BaseException) -> bool:
    """Exception predicate for retry strategies: true for errors marked ``retryable``.

    Example: ``RetryStrategy.exponential_backoff(3, 0.1, 2.0, exception_predicate=is_retryable)``
    """
    return bool(getattr(exc, "retryable", False))


class Secret:
    """A credential that never shows in ``repr``/``str``; ``reveal()`` returns the value."""

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


def redact(text: str, *secrets: Secret | None) -> str:
    """Replace every secret value (and its URL-encoded form) in ``text`` by ``***``."""
    from urllib.parse import quote

    for s in secrets:
        if s:
            raw = s.reveal()
            for form in {raw, quote(raw, safe=""), quote(raw)}:
                if form:
                    text = text.replace(form, "***")
    return text


def short(exc: BaseException, *secrets: Secret | None, limit: int = 300) -> str:
    """``"TypeName: message"`` of an exception, redacted and truncated."""
    msg = redact(str(exc), *secrets).strip()
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class KeyTemplate:
    """A ``str.format``-style template with one placeholder per key column.

    Placeholders are either all named (``"user:{id}:{region}"``) or all positional
    (``"{0}/{1}"``). The key tuple order is ``key_columns`` when given, else the
    order in which names first appear. Conversions (``{id!r}``), format specs
    (``{id:>4}``), attribute/index access and ``{}`` are rejected.

    ``render(key, encode)`` joins literal text and ``encode(value)`` per placeholder.
    """

    __slots__ = ("template", "key_columns", "_parts", "_one")

    def __init__(self, template: str, key_columns: Sequence[str] | None, what: str) -> None:
        if not isinstance(template, str) or not template:
            raise ValueError(f"{what} must be a non-empty string such as 'item/{{id}}'")
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ValueError(
                f"{what} {template!r} is malformed ({exc}); write literal braces as '{{{{' and '}}}}'"
            ) from None
        fields: list[str] = []
        parts: list[tuple[str, int]] = []
        for literal, field, spec, conv in parsed:
            if field is None:
                parts.append((literal, -1))
                continue
            if field == "":
                raise ValueError(f"{what} {template!r}: empty placeholder '{{}}'; name it after the "
                                 "key column, e.g. '{id}', or use '{0}'")
            if conv or spec:
                raise ValueError(f"{what} {template!r}: placeholder {{{field}}} must not have a "
                                 "conversion or format spec; values are inserted (and encoded) as is")
            if not (field.isidentifier() or field.isdigit()):
                raise ValueError(f"{what} {template!r}: placeholder {{{field}}} must be a key column "
                                 "name (identifier) or a position like {0}")
            fields.append(field)
            parts.append((literal, -2))  # -2: resolved below
        if not fields:
            raise ValueError(f"{what} {template!r} has no placeholder: add one per key column, "
                             "e.g. 'user:{id}'")
        positional = [f.isdigit() for f in fields]
        if any(positional) and not all(positional):
            raise ValueError(f"{what} {template!r} mixes named and positional placeholders; use one style")
        if all(positional):
            n = max(int(f) for f in fields) + 1
            if {int(f) for f in fields} != set(range(n)):
                raise ValueError(f"{what} {template!r}: positional placeholders must cover {{0}}..{{{n-1}}}")
            index = {str(i): i for i in range(n)}
            if key_columns is None:
                cols = tuple(f"k{i}" for i in range(n))
            else:
                cols = _check_columns(key_columns, what)
                if len(cols) != n:
                    raise ValueError(f"key_columns {list(cols)} has {len(cols)} names but {what} "
                                     f"{template!r} has {n} positional placeholders")
        else:
            order = list(dict.fromkeys(fields))
            cols = tuple(order) if key_columns is None else _check_columns(key_columns, what)
            if set(cols) != set(order):
                raise ValueError(f"key_columns {list(cols)} must name exactly the placeholders of "
                                 f"{what} {template!r}: {order}")
            index = {c: i for i, c in enumerate(cols)}
        it = iter(fields)
        self._parts = tuple((lit, index[next(it)] if i == -2 else -1) for lit, i in parts)
        #: (text before, key index, text after) of a template with one placeholder: most of them
        self._one = None
        if len(fields) == 1:
            k = next(n for n, (_, i) in enumerate(self._parts) if i >= 0)
            self._one = ("".join(lit for lit, _ in self._parts[:k + 1]), self._parts[k][1],
                         "".join(lit for lit, _ in self._parts[k + 1:]))
        self.template = template
        self.key_columns = cols

    def render(self, key: tuple, encode: Any = str) -> str:
        """Fill the template with ``encode(key[i])`` for each placeholder."""
        if self._one is not None:
            before, i, after = self._one
            return before + encode(key[i]) + after
        out = []
        for lit, i in self._parts:
            out.append(lit)
            if i >= 0:
                out.append(encode(key[i]))
        return "".join(out)


def _check_columns(cols: Any, what: str) -> tuple[str, ...]:
    if isinstance(cols, str):
        cols = [cols]
    cols = tuple(cols)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise ValueError(f"key_columns must be a non-empty list of column names, got {list(cols)!r}")
    if len(set(cols)) != len(cols):
        raise ValueError(f"key_columns {list(cols)} has duplicates")
    return cols


def check_key(key: Any, arity: int, source: str) -> tuple:
    """Return ``key`` as a tuple of ``arity`` values or raise ``ValueError``."""
    if type(key) is not tuple:
        key = tuple(key) if isinstance(key, list) else (key,)
    if len(key) != arity:
        raise ValueError(f"{source}: expected a key tuple of {arity} value(s), got {len(key)}: {key!r}")
    return key


def has_null(key: tuple) -> bool:
    """True when any key value is ``None`` (identity test: safe for pandas.NA-like values)."""
    for v in key:
        if v is None:
            return True
    return False


def check_positive(name: str, value: Any, integer: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a positive number (int when ``integer``)."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise ValueError(f"{name} must be a positive {'integer' if integer else 'number'}, got {value!r}")
