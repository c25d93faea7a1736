"""Lookup keys: the key template (``"user:{id}"``) and the checks every connector makes on a key."""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

__all__ = ["KeyTemplate", "check_key", "has_null"]


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
