"""What a journal's outcomes belong to: the question they answer.

A journal written for one question must never answer another: the manifest, recorded next to
the outcomes on the first write, names the entry point, the function (its qualified name and the
hashes of everything that decides its answers: :mod:`aiospark.journal.fingerprint`), the output
schema the user declared (not the ``_error``/``_input`` columns ``on_error="row"`` adds: a first
run with error rows and a rerun without them ask the same question), the key columns with their
types, and the ``version`` the user gave. A journal whose manifest differs is refused before any
call, naming what changed (``attribute 'style' of the function changed``) and the ways on.

Example::

    m = Manifest.of("ordered_wait", enrich, "id BIGINT, name STRING", ["id"], ["bigint"])
    m.differences(Manifest.from_json(stored))   # [] or ["the function's attribute 'style' changed", ...]
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .fingerprint import fingerprint

#: the file a directory journal keeps its manifest in, next to its outcomes
MANIFEST = "manifest.json"

#: 3: globals walked whole, the user's own helpers by code, lambdas by bytecode, narrow secret names
FORMAT = 3


def function_fingerprint(function: Any) -> tuple[str, str, dict[str, str]]:
    """``(qualified name, one hash of every part, {part: hash})`` of ``function``."""
    name, parts = fingerprint(function)
    whole = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    return name, whole, parts


@dataclass(frozen=True)
class Manifest:
    """What identifies the outcomes of one journal (see the module docstring). ``code`` is one
    hash of all of ``parts`` (what ``aiospark journal`` shows); ``parts`` name what changed."""

    entry_point: str
    function: str
    code: str
    output_schema: str
    key: list[str]
    key_types: list[str]
    format: int = FORMAT
    parts: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    #: a directory journal's buckets (:mod:`~aiospark.journal.buckets`): its layout, not part of
    #: the question (not in :attr:`digest`, never a difference); None: a journal written before
    #: buckets (or a store without them)
    buckets: int | None = None

    @classmethod
    def of(cls, entry_point: str, function: Any, output_schema: str, key: Sequence[str],
           key_types: Sequence[str], version: str | None = None) -> Manifest:
        name, code, parts = function_fingerprint(function)
        return cls(entry_point, name, code, output_schema, list(key), list(key_types), parts=parts,
                   version=version)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        values = {k: data.get(k) for k in cls.__dataclass_fields__}
        values["parts"] = values["parts"] or {}
        return cls(**values)

    @property
    def digest(self) -> str:
        """A short hash naming these outcomes (a directory, a Redis key prefix): of the question
        only, so a journal's layout (``buckets``) never moves its outcomes."""
        question = {k: v for k, v in asdict(self).items() if k != "buckets"}
        return hashlib.sha256(json.dumps(question, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, recorded: Manifest) -> list[str]:
        """What differs between ``recorded`` (the journal's) and this one (the job's)."""
        if recorded.format != self.format:
            return [f"the journal was written by another aiospark release (manifest format {recorded.format!r}, "
                    f"this one writes {self.format!r}), which identified functions differently"]
        out = []
        for name in self.__dataclass_fields__:
            theirs, ours = getattr(recorded, name), getattr(self, name)
            if name in ("code", "parts", "buckets") or theirs == ours:
                continue
            out.append(f"{name.replace('_', ' ')}: {theirs!r} (journal) vs {ours!r} (now)")
        if recorded.function == self.function and recorded.code != self.code:
            out += [f"the function's {part}" for part in _changed(recorded.parts, self.parts)] \
                or ["the function's code"]
        return out


def _changed(theirs: dict[str, str], ours: dict[str, str]) -> list[str]:
    out = []
    for part in sorted(set(theirs) | set(ours)):
        if part not in ours:
            out.append(f"{part} is gone")
        elif part not in theirs:
            out.append(f"{part} is new")
        elif theirs[part] != ours[part]:
            out.append(f"{part} changed")
    return out


class JournalMismatch(ValueError):
    """The journal was written for another question (function, its state, schema or key): its
    outcomes do not apply."""


def refuse(location: str, recorded: Manifest | None, ours: Manifest) -> None:
    """Raise :class:`JournalMismatch` when ``recorded`` exists and differs from ``ours``."""
    if recorded is None:
        return
    diff = ours.differences(recorded)
    if diff:
        version = "" if ours.version is None else f" (version {ours.version!r})"
        raise JournalMismatch(
            f"the journal at {location}{version} holds the outcomes of another question, not this job's: "
            + "; ".join(diff) + ". Nothing was called. Ways on: pass another location to aiospark.Journal "
            "(a new journal), or bump aiospark.Journal(..., version=...) to record this version's outcomes "
            "next to the old ones (or delete the journal to call every row again)")
