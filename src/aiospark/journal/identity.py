"""A row's identity: a canonical, stable string of its key values (the journal's key, and what
``aiospark.idempotency_key()`` returns inside its call).

Stable across processes, machines and Python versions, so a rerun finds its rows: no ``hash()``
(salted per process), no ``repr`` of containers. The values are written as compact JSON with the
types JSON lacks tagged (``{"$dec": "1.10"}``, ``{"$date": ...}``, ``{"$bytes": <base64>}``, ...),
ASCII only; a text longer than :data:`MAX_PLAIN` characters is replaced by ``"sha256:" + hex``
(a JSON text never starts with ``s``, so the two forms never meet). Within one journal every key
column has one Spark type (the manifest pins the key columns' types), so a string column's value
can never be mistaken for a tagged one of another column type.

Without a journal the identity is computed only if the call asks for it (the operator's
``identify=`` is then called by ``idempotency_key()``): encoding a whole row costs a few
microseconds, which most calls would pay for nothing.

Example::

    identity([7, "a"])                 # '[7,"a"]'
    identity([Decimal("1.10"), None])  # '[{"$dec":"1.10"},null]'
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import hashlib
import json
import json.encoder
import math
import uuid
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

__all__ = ["MAX_PLAIN", "identity", "RowIdentity", "ValuesIdentity"]

#: identities longer than this are stored as their sha256 (Redis keys and segments stay small)
MAX_PLAIN = 120


def _tagged(value: Any) -> Any:
    """JSON's ``default=``: the values JSON has no type for, tagged with theirs."""
    if isinstance(value, decimal.Decimal):
        return {"$dec": str(value)}
    if isinstance(value, _dt.datetime):  # before date: a datetime is a date
        return {"$ts": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, _dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, _dt.timedelta):
        return {"$td": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, (set, frozenset)):
        return {"$set": sorted(identity([v]) for v in value)}
    if isinstance(value, tuple):  # only reached inside _plain's fallback
        return list(value)
    if hasattr(value, "asDict"):  # a pyspark Row (async_udf struct arguments)
        return value.asDict(recursive=False)
    if hasattr(value, "tolist"):  # numpy scalars and arrays (pandas UDFs on PySpark < 4.1)
        return value.tolist()
    raise TypeError(f"a row's identity cannot encode a {type(value).__name__} value ({value!r:.60}): "
                    "pass Journal(key=...) columns of plain Spark types")


def _floats(value: Any) -> Any:
    """NaN and the infinities as tagged values (JSON has none; ``NaN`` is not JSON)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        return {str(k): _floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_floats(v) for v in value]
    return value


_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=_tagged,
                           check_circular=False).encode


#: JSON's own string encoder (C when available): what ``_encode`` writes for a str
_quote = json.encoder.encode_basestring_ascii


def _fast(values: Sequence[Any]) -> str | None:
    """The identity of plain ints and strings without the JSON encoder's per-call setup (~0.3 us
    instead of ~2.6 us a row): the very text ``_encode`` writes for them (ints as ``int.__repr__``,
    strings as ``encode_basestring_ascii``), so both paths give one identity. None for any other
    value (bool is an int subclass that JSON writes as ``true``: not taken here)."""
    parts = []
    for v in values:
        t = type(v)
        if t is int:
            parts.append(int.__repr__(v))
        elif t is str:
            parts.append(_quote(v))
        else:
            return None
    return "[" + ",".join(parts) + "]"


def identity(values: Sequence[Any]) -> str:
    """The identity of a row whose key values are ``values`` (a list, in key-column order)."""
    text = _fast(values)
    if text is not None:
        return text if len(text) <= MAX_PLAIN else "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()
    try:
        text = _encode(values)
    except (ValueError, TypeError) as exc:
        if "JSON compliant" not in str(exc) and "keys must be" not in str(exc):
            raise
        text = _encode(_floats(values))  # NaN/inf floats, or non-string dict keys (a MAP<INT, ...>)
    if len(text) > MAX_PLAIN:
        return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()
    return text


class RowIdentity:
    """``row dict -> identity`` of the given columns (picklable).

    ``nulls=False`` (an explicit ``Journal(key=...)``): a row with a NULL (None) in any of the
    columns has no identity (None): NULL is no value, so it identifies nothing -- two such rows
    are not the same row, and no rerun can find it again."""

    def __init__(self, columns: Sequence[str], nulls: bool = True):
        self.columns = tuple(columns)
        self.nulls = nulls
        self._get = itemgetter(*self.columns) if len(self.columns) > 1 else None

    def __call__(self, row: Any) -> str | None:
        if self._get is None:
            value = row[self.columns[0]]
            if type(value) is int and -2**63 <= value < 2**63:  # the commonest key (a LONG), inline:
                return f"[{int.__repr__(value)}]"               # what identity([value]) returns
            if value is None and not self.nulls:
                return None
            return identity([value])
        values = self._get(row)
        if not self.nulls and None in values:
            return None
        return identity(values)

    def __reduce__(self) -> Any:
        return RowIdentity, (self.columns, self.nulls)


class IdempotencyKey:
    """``row -> aiospark.idempotency_key()``: a UUID (RFC 4122 version 5, 36 characters: what
    services' ``Idempotency-Key`` headers take) of the row's identity in the namespace of the
    question -- the entry point and the function's fingerprint (its name and the hash of its
    code and state: :mod:`aiospark.journal.fingerprint`). So the key is the same for the same row
    in every attempt, task retry and rerun of the same program, and two functions (``charge``,
    ``refund``) never send the same key for the same row. The row's identity is its journal key,
    else (no journal, or a NULL in the key) its input values. Picklable."""

    def __init__(self, question: str, of: Any, whole: Any):
        #: ``question``: the entry point, the function's name and its fingerprint's hash
        self.namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"aiospark:{question}")
        self.of = of
        self.whole = whole

    @classmethod
    def of_function(cls, entry: str, function: Any, of: Any, whole: Any) -> IdempotencyKey:
        """The keys of ``function``'s rows in ``entry`` (``ordered_wait/unordered_wait``, ...)."""
        from .manifest import function_fingerprint

        name, code, _ = function_fingerprint(function)
        return cls(f"{entry}:{name}:{code}", of, whole)

    def __call__(self, row: Any) -> str:
        key = self.of(row) if self.of is not None else None
        if key is None:
            key = self.whole(row)
        return str(uuid.uuid5(self.namespace, key))


class ValuesIdentity:
    """``value -> identity`` of an async_udf's arguments (one value, or a tuple of them)."""

    def __init__(self, spread: bool):
        self.spread = spread

    def __call__(self, value: Any) -> str:
        return identity(list(value) if self.spread and isinstance(value, tuple) else [value])
