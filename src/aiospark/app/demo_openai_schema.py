"""A deterministic JSON instance of a JSON schema: the demo OpenAI endpoint's structured answers.

:func:`schema_instance` answers what a model asked for ``response_format`` ``json_schema`` would:
JSON text that fits the schema. Every choice (a string's text, an integer, an array's length,
whether a nullable value is null, which ``anyOf`` branch) comes from a hash of the prompt and the
value's path in the schema, so one prompt always gets one answer and different prompts differ.

Covered: ``type`` (one or a list, ``"null"`` included), ``object`` (``properties``, maps through
``additionalProperties``), ``array`` (``items``, ``prefixItems``, ``minItems``/``maxItems``),
``string`` (``minLength``/``maxLength``, ``format`` date, date-time, time, email, uuid, uri),
``integer``/``number`` (``minimum``/``maximum`` and their exclusive forms), ``boolean``, ``enum``,
``const``, ``anyOf``/``oneOf``/``allOf`` and local ``$ref`` (``#/$defs/...``, as pydantic writes).
Not covered: ``pattern`` (ignored) and ``not``.

Example::

    schema_instance({"type": "object", "properties": {"label": {"type": "string"},
                     "score": {"type": ["integer", "null"], "minimum": 1, "maximum": 5}}}, "great!")
    # '{"label": "label-5c0e0d", "score": 4}'
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["SchemaError", "digest", "schema_instance"]

MAX_DEPTH = 32       # nesting (and $ref hops) before a schema is called recursive without an end
MAX_VALUES = 20_000  # values in one answer: a schema cannot make the endpoint build a huge answer
_NULL_SHARE = 4      # a nullable value is null for about one prompt in this many


class SchemaError(ValueError):
    """The schema cannot be answered (its text says what to change)."""


def digest(text: str, size: int, salt: str) -> bytes:
    """``size`` bytes that depend only on ``text`` and ``salt``."""
    return hashlib.shake_256(f"{salt}\0{text}".encode()).digest(size)


class _Maker:
    def __init__(self, root: Any, prompt: str) -> None:
        self.root, self.prompt, self.values = root, prompt, 0

    def pick(self, path: str, n: int) -> int:
        """A number in ``[0, n)`` for this prompt and path."""
        return int.from_bytes(digest(self.prompt, 8, path), "big") % n if n > 1 else 0

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaError(f"only local $ref ('#/$defs/Name') is supported, got {ref!r}")
        node = self.root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise SchemaError(f"$ref {ref!r} points to nothing in the schema")
            node = node[part]
        return node

    def make(self, schema: Any, path: str, depth: int) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            raise SchemaError(f"the answer would hold more than {MAX_VALUES} values: bound maxItems")
        if depth > MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels (a $ref cycle with no "
                              "nullable or optional way out?)")
        if schema is True or schema == {}:
            return f"{_name(path)}-{self.pick(path, 1 << 24):06x}"
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or true at {path or '/'}, got {schema!r}")
        if "$ref" in schema:
            target = self.resolve(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self.make({**target, **rest} if isinstance(target, dict) and rest else target, path, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            options = schema["enum"]
            if not isinstance(options, list) or not options:
                raise SchemaError(f"'enum' must be a non-empty list at {path or '/'}")
            return options[self.pick(path + "#enum", len(options))]
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                part = self.resolve(part["$ref"]) if isinstance(part, dict) and "$ref" in part else part
                for key, value in (part or {}).items():
                    if key in ("properties", "$defs") and isinstance(value, dict):
                        merged[key] = {**merged.get(key, {}), **value}
                    elif key == "required":
                        merged[key] = list(merged.get(key, [])) + list(value)
                    else:
                        merged.setdefault(key, value)
            return self.make(merged, path, depth + 1)
        branches = schema.get("anyOf", schema.get("oneOf"))
        if branches is not None:
            if not isinstance(branches, list) or not branches:
                raise SchemaError(f"'anyOf'/'oneOf' must be a non-empty list at {path or '/'}")
            return self.make(branches[self.branch(branches, path, depth)], path, depth + 1)
        kinds = schema.get("type")
        if isinstance(kinds, list):
            if not kinds:
                raise SchemaError(f"'type' is an empty list at {path or '/'}")
            kind = kinds[self.branch([{"type": k} for k in kinds], path, depth)]
        elif kinds is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        else:
            kind = kinds
        maker = getattr(self, f"make_{kind}", None)
        if maker is None:
            raise SchemaError(f"unknown type {kind!r} at {path or '/'}")
        return maker(schema, path, depth)

    def branch(self, branches: list[Any], path: str, depth: int) -> int:
        """Which branch: a null one for about a quarter of prompts (always, deep down), else any other."""
        nulls = [i for i, b in enumerate(branches) if isinstance(b, dict) and b.get("type") == "null"]
        others = [i for i in range(len(branches)) if i not in nulls]
        if nulls and (not others or depth > MAX_DEPTH // 2 or self.pick(path + "#null", _NULL_SHARE) == 0):
            return nulls[0]
        return others[self.pick(path + "#branch", len(others))]

    def make_null(self, schema: dict[str, Any], path: str, depth: int) -> None:
        return None

    def make_boolean(self, schema: dict[str, Any], path: str, depth: int) -> bool:
        return self.pick(path, 2) == 1

    def make_integer(self, schema: dict[str, Any], path: str, depth: int) -> int:
        low, high = _bounds(schema, 0, 100, integer=True)
        if low > high:
            raise SchemaError(f"no integer fits minimum/maximum at {path or '/'}")
        return low + self.pick(path, min(high - low + 1, 1 << 62))

    def make_number(self, schema: dict[str, Any], path: str, depth: int) -> float:
        low, high = _bounds(schema, 0.0, 100.0, integer=False)
        if low > high:
            raise SchemaError(f"no number fits minimum/maximum at {path or '/'}")
        return low + (high - low) * self.pick(path, 1001) / 1000  # exclusive bounds were nudged inside

    def make_string(self, schema: dict[str, Any], path: str, depth: int) -> str:
        n = self.pick(path, 1 << 24)
        fmt = schema.get("format")
        if fmt == "date-time":
            return f"2024-{n % 12 + 1:02d}-{n % 28 + 1:02d}T{n % 24:02d}:{n % 60:02d}:00Z"
        if fmt == "date":
            return f"2024-{n % 12 + 1:02d}-{n % 28 + 1:02d}"
        if fmt == "time":
            return f"{n % 24:02d}:{n % 60:02d}:00"
        if fmt == "email":
            return f"user{n}@example.com"
        if fmt == "uuid":
            h = digest(self.prompt, 16, path).hex()
            return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"
        if fmt in ("uri", "url"):
            return f"https://example.com/{_name(path)}/{n}"
        text = f"{_name(path)}-{n:06x}"
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        if len(text) < low:
            text += "x" * (low - len(text))
        return text[:int(high)] if high is not None else text

    def make_array(self, schema: dict[str, Any], path: str, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", True)
        deep = depth > MAX_DEPTH // 2  # deep down, as few items as allowed: recursion ends
        low = int(schema.get("minItems", len(prefix) if items is False else 0 if deep else 1))
        high = schema.get("maxItems")
        high = low + 2 if high is None else int(high)
        if low > high:
            raise SchemaError(f"minItems > maxItems at {path or '/'}")
        if deep:
            high = low
        count = low + self.pick(path + "#len", high - low + 1)
        if items is False:
            count = min(count, len(prefix))
        return [self.make(prefix[i] if i < len(prefix) else items, f"{path}/{i}", depth + 1) for i in range(count)]

    def make_object(self, schema: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise SchemaError(f"'properties' must be an object at {path or '/'}")
        required = set(schema.get("required") or ())
        out = {}
        for key, sub in props.items():  # every property: strict mode requires them all anyway
            if key in required or depth <= MAX_DEPTH // 2:
                out[key] = self.make(sub, f"{path}/{key}", depth + 1)
        extra = schema.get("additionalProperties")
        if not props and isinstance(extra, dict):  # a map: a key or two
            for i in range(1 + self.pick(path + "#keys", 2)):
                out[f"key{i + 1}"] = self.make(extra, f"{path}/key{i + 1}", depth + 1)
        return out


def _name(path: str) -> str:
    """The last property name on ``path`` (a string value reads like its field: ``label-5c0e0d``)."""
    names = [p for p in path.split("/") if p and not p.isdigit()]
    return names[-1][:40] if names else "value"


def _bounds(schema: dict[str, Any], low: Any, high: Any, integer: bool) -> Any:
    step = 1 if integer else 1e-6
    if "minimum" in schema:
        low = schema["minimum"]
    if "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
        low = schema["exclusiveMinimum"] + step
    if "maximum" in schema:
        high = schema["maximum"]
    if "exclusiveMaximum" in schema and not isinstance(schema["exclusiveMaximum"], bool):
        high = schema["exclusiveMaximum"] - step
    if ("minimum" in schema or "exclusiveMinimum" in schema) and not (
            "maximum" in schema or "exclusiveMaximum" in schema):
        high = low + 100
    elif ("maximum" in schema or "exclusiveMaximum" in schema) and not (
            "minimum" in schema or "exclusiveMinimum" in schema):
        low = high - 100
    if integer:
        import math
        return math.ceil(low), math.floor(high)
    return float(low), float(high)


def schema_instance(schema: Any, prompt: str) -> str:
    """JSON text of a value that fits ``schema``, chosen by ``prompt`` (same prompt, same text)."""
    return json.dumps(_Maker(schema, prompt).make(schema, "", 0))
