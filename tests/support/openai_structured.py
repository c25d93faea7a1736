"""How the test OpenAI server answers structured-output requests (``response_format``).

:func:`structured_answer` checks the request the way OpenAI's strict mode does (400 and why, else
the message content); :func:`sample` is the answer it makes from a schema, so tests can predict it.

Example::

    structured_answer({"type": "json_schema", "json_schema": {"name": "r", "strict": True,
                       "schema": schema}}, "hello", 0)      # (200, '{"label": "hello"}')
"""
from __future__ import annotations

import json
import re
from typing import Any

_STRICT_KEYS = {"type", "properties", "required", "additionalProperties", "items", "description", "format",
                "pattern", "minimum", "maximum", "enum", "anyOf"}
_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}


def strict_problem(schema: Any, path: str = "#") -> str | None:
    """What breaks OpenAI's strict structured-output rules in ``schema`` (None: nothing): every
    object lists all its properties in ``required`` and has ``additionalProperties: false``; only
    the supported keywords, types and string formats."""
    if not isinstance(schema, dict):
        return f"{path}: a schema must be an object"
    unknown = set(schema) - _STRICT_KEYS
    if unknown:
        return f"{path}: unsupported keywords {sorted(unknown)}"
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if not kinds or any(k not in _TYPES for k in kinds):
        return f"{path}: bad type {schema.get('type')!r}"
    if "format" in schema and schema["format"] not in _FORMATS:
        return f"{path}: unsupported format {schema['format']!r}"
    if "object" in kinds:
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            return f"{path}: an object needs properties"
        if schema.get("additionalProperties") is not False:
            return f"{path}: 'additionalProperties' is required to be supplied and to be false"
        if sorted(schema.get("required") or []) != sorted(props):
            return f"{path}: 'required' must list every property: {sorted(props)}"
        for name, sub in props.items():
            found = strict_problem(sub, f"{path}/properties/{name}")
            if found:
                return found
    if "array" in kinds:
        if "items" not in schema:
            return f"{path}: an array needs items"
        return strict_problem(schema["items"], f"{path}/items")
    return None


def sample(schema: dict, text: str) -> Any:
    """The value the server answers for ``schema`` and prompt ``text``: strings are ``text``
    (dates ``2024-05-01``, date-times ``2024-05-01T12:30:00Z``, a ``pattern`` string
    ``2024-05-01T12:30:00``), integers ``len(text)``, numbers ``len(text) / 4``, booleans
    ``len(text)`` even; arrays have two items, made from ``text + " #0"`` and ``text + " #1"``;
    a nullable value is never null; a value with an ``enum`` is its first allowed value."""
    allowed = [v for v in schema.get("enum") or () if v is not None]
    if allowed:
        return allowed[0]
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    kind = next(k for k in kinds if k != "null")
    if kind == "object":
        return {name: sample(sub, text) for name, sub in schema["properties"].items()}
    if kind == "array":
        return [sample(schema["items"], f"{text} #{i}") for i in range(2)]
    if kind == "integer":
        return len(text)
    if kind == "number":
        return len(text) / 4
    if kind == "boolean":
        return len(text) % 2 == 0
    if "pattern" in schema:
        return "2024-05-01T12:30:00"
    return {"date": "2024-05-01", "date-time": "2024-05-01T12:30:00Z"}.get(schema.get("format"), text)


def structured_answer(response_format: Any, prompt: str, seen_before: int) -> tuple[int, str]:
    """``(status, text)`` for a chat request with ``response_format``: 400 and why for a request
    OpenAI's strict mode refuses; else 200 and the message content, which for a prompt that

    * starts with ``"json:"``       -> is the rest of the prompt, verbatim (tests write any answer);
    * starts with ``"flaky-json:"`` -> is ``{"cut": `` (not JSON) the first time that prompt is seen,
      then the rest of the prompt;
    * is anything else              -> is ``json.dumps(sample(schema, prompt))``.
    """
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return 400, f"response_format must be {{'type': 'json_schema', ...}}, got {response_format!r}"
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or spec.get("strict") is not True:
        return 400, "json_schema must be an object with strict: true"
    name = spec.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
        return 400, f"json_schema.name must match [a-zA-Z0-9_-]{{1,64}}, got {name!r}"
    schema = spec.get("schema")
    found = strict_problem(schema)
    if found is None and (not isinstance(schema, dict) or schema.get("type") != "object"):
        found = "#: the root must be an object"
    if found is not None:
        return 400, f"Invalid schema for response_format {name!r}: {found}"
    if prompt.startswith("json:"):
        return 200, prompt[len("json:"):]
    if prompt.startswith("flaky-json:"):
        return 200, '{"cut": ' if seen_before == 0 else prompt[len("flaky-json:"):]
    return 200, json.dumps(sample(schema, prompt))
