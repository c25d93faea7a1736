"""JSON request and response bodies: orjson when installed, else :mod:`json`.

Example::

    >>> loads(dumps({"id": 1}))
    {'id': 1}
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["dumps", "loads"]

try:  # orjson decodes a small JSON body in about a third of json.loads' time
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; kept optional for vendored installs
    _orjson = None  # type: ignore[assignment]  # a module or None: checked before each use


def _json_loads(data: Any) -> Any:
    return json.loads(bytes(data))


#: Decodes a JSON body (bytes or a buffer): orjson's own function when installed (called once per
#: row, so without a Python frame around it), else ``json``
loads: Callable[[Any], Any] = _orjson.loads if _orjson is not None else _json_loads


def dumps(value: Any) -> bytes:
    """Encode a JSON request body as compact UTF-8 bytes."""
    if _orjson is not None:
        try:
            return _orjson.dumps(value)
        except TypeError:  # what orjson refuses (ints over 64 bits, ...) json may still carry
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
