"""What a journal's outcomes belong to: the function, its code, the output schema, the key.

A journal written by one function must never answer for another: the manifest, recorded next to
the outcomes on the first write, names the entry point, the function (qualified name and a hash
of its code), the output schema and the key columns with their types. A journal whose manifest
differs is refused, naming what differs.

The code hash is of the function's source text when Python can find it (stable across Python
versions; an edit of the function's body is a new function), else of its bytecode without line
numbers (so a blank line above it changes nothing). An :class:`~aiospark.core.AsyncFunction` is
identified by its class (and by its ``journal_identity`` string when it has one: the built-in
lookups name their source there). Data the code reads from elsewhere (a prompt in a global, a
model name in an attribute) is not in the hash: start a new journal when that changes.

Example::

    m = Manifest.of("ordered_wait", enrich, "id BIGINT, name STRING", ["id"], ["bigint"])
    m.differences(Manifest.from_json(stored))   # [] or ["function: 'a' (journal) vs 'b' (now)", ...]
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import textwrap
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

FORMAT = 1


def _code_digest(code: types.CodeType, h: Any) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_digest(const, h)
        else:
            h.update(repr(const).encode())


def _target(function: Any) -> Any:
    while isinstance(function, functools.partial):
        function = function.func
    return getattr(function, "__wrapped__", function)


def function_fingerprint(function: Any) -> tuple:
    """``(qualified name, code hash)`` of ``function`` (see the module docstring)."""
    extra = getattr(function, "journal_identity", None)
    target = _target(function)
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = type(target)  # an AsyncFunction or another callable object: its class's code
    name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"
    h = hashlib.sha256()
    try:
        h.update(textwrap.dedent(inspect.getsource(target)).encode())
    except (OSError, TypeError):
        code = getattr(getattr(target, "__func__", target), "__code__", None)
        if code is not None:
            _code_digest(code, h)
        else:
            h.update(name.encode())
    if isinstance(function, functools.partial):
        h.update(repr((function.args, sorted(function.keywords.items()))).encode())
    if extra:
        h.update(str(extra).encode())
    return name, h.hexdigest()[:16]


@dataclass(frozen=True)
class Manifest:
    """What identifies the outcomes of one journal (see the module docstring)."""

    entry_point: str
    function: str
    code: str
    output_schema: str
    key: list[str]
    key_types: list[str]
    format: int = FORMAT

    @classmethod
    def of(cls, entry_point: str, function: Any, output_schema: str, key: Sequence[str],
           key_types: Sequence[str]) -> Manifest:
        name, code = function_fingerprint(function)
        return cls(entry_point, name, code, output_schema, list(key), list(key_types))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})

    @property
    def digest(self) -> str:
        """A short hash naming these outcomes (a directory, a Redis key prefix)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def differences(self, recorded: Manifest) -> list[str]:
        """What differs between ``recorded`` (the journal's) and this one (the job's)."""
        out = []
        for field in self.__dataclass_fields__:
            theirs, ours = getattr(recorded, field), getattr(self, field)
            if theirs != ours:
                what = "code (a hash of the function's source)" if field == "code" else field.replace("_", " ")
                out.append(f"{what}: {theirs!r} (journal) vs {ours!r} (now)")
        return out


class JournalMismatch(ValueError):
    """The journal was written by another function, schema or key: its outcomes do not apply."""


def refuse(location: str, recorded: Manifest | None, ours: Manifest) -> None:
    """Raise :class:`JournalMismatch` when ``recorded`` exists and differs from ``ours``."""
    if recorded is None:
        return
    diff = ours.differences(recorded)
    if diff:
        raise JournalMismatch(
            f"the journal at {location} was written by another function or schema, so its outcomes are not this "
            f"job's: " + "; ".join(diff) + ". Start a new journal: pass another location to aiospark.Journal "
            "(or delete this one to re-call every row)")
