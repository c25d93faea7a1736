"""A function's fingerprint: everything that decides its answers, as named parts with stable hashes.

A journal serves a recorded outcome only to the question it answers, so the manifest pins the
function by parts, each a short sha256 of a canonical encoding (never ``hash()``, salted per
process, and never a ``repr`` that could hold an object's address):

* ``code``: the function's source text when Python finds it (else its bytecode without line
  numbers; a lambda's bytecode too: its "source" is its whole line); for a callable object, the
  source of its class and of its bases outside aiospark;
* ``closure 'x'``, ``default 'x'``, ``global 'X'`` (any value the code reads from its module,
  walked; a library's functions, classes and modules excluded), ``global 'mod.f'`` (a member of a
  user module the code names), ``wrapped function`` (``functools.wraps``' ``__wrapped__``),
  ``partial arguments``;
* ``attribute 'x'`` of a callable object (an :class:`~aiospark.core.AsyncFunction`'s state), and
  the globals its class's methods read;
* ``setting 'x'``: what an object that knows its answer-deciding settings gives through
  ``__aiospark_fingerprint__() -> dict`` (the built-in connectors: model, system prompt, URL
  template, key pattern, table, ...); its other attributes (clients, pools, pacers) are not looked at.

One walker encodes every value, up to :data:`MAX_DEPTH` levels, cycles cut: containers, objects'
attributes, and functions reached anywhere by their code and their own closures, defaults and
globals. The user's own code (:func:`is_user_module`) counts by its body, a library's does not.

Never part of it: secrets (:func:`is_secret_name`: exactly a credential's name, or one ending in
``_password``/``_secret``/``_api_key``/``_token``; and ``Secret`` values: left out, not hashed),
and what differs between two runs of one program: runtime objects (event loops, sockets, locks,
threads, HTTP/Redis/PostgreSQL clients, Spark sessions: only their type counts), object ids, and
objects beyond the depth bound (their type only). What the code reads at call time from outside
(environment variables, files) is not part of it either.

Example::

    name, parts = fingerprint(Styled("short"))
    # 'm.Styled', {'code': '3f0c...', "attribute 'style'": '9a1b...'}
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import fractions
import functools
import hashlib
import inspect
import textwrap
import types
import uuid
from typing import Any

from .scope import is_runtime, is_secret_name, is_user_module, module_of

__all__ = ["FINGERPRINT_METHOD", "MAX_DEPTH", "fingerprint", "is_secret_name", "is_user_module"]

#: the method an object implements to name its answer-deciding settings (a dict, no secrets)
FINGERPRINT_METHOD = "__aiospark_fingerprint__"
#: how deep an object's attributes are walked (deeper: its type only)
MAX_DEPTH = 6

_PLAIN = (type(None), bool, int, float, complex, str, bytes, decimal.Decimal, fractions.Fraction, _dt.date,
          _dt.time, _dt.timedelta, uuid.UUID, range)


def _is_secret_value(value: Any) -> bool:
    cls = type(value)
    return cls.__name__ == "Secret" and callable(getattr(cls, "reveal", None))


def _own_code(cls: type) -> bool:
    """Whether ``cls``'s source decides answers as the user's code (not a library's or Python's:
    their release is not this program's question)."""
    return is_user_module(module_of(cls)) and not is_runtime(cls)


def _source(obj: Any) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None


def _code_digest(code: types.CodeType, h: Any) -> None:
    """Bytecode without line numbers (a blank line above the function changes nothing)."""
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_digest(const, h)
        else:
            h.update(repr(const).encode())


def put_code(walk: _Walk, fn: types.FunctionType) -> None:
    """A function's code: its source text when Python finds it, and its bytecode too for a lambda
    (whose "source" is the whole line: two lambdas on one line would read the same)."""
    source = _source(fn)
    if source is not None:
        walk.put("source", source)
    if source is None or fn.__name__ == "<lambda>":
        _code_digest(fn.__code__, walk.h)


def _qualname(obj: Any) -> str:
    return f"{module_of(obj) or '?'}.{getattr(obj, '__qualname__', None) or getattr(obj, '__name__', '?')}"


class _Walk:
    """The canonical encoding of values into a sha256 (see the module docstring)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self._path: set[int] = set()
        #: functions walked so far (a helper reached twice is walked once: no blow-up on a call graph)
        self._done: dict[int, Any] = {}

    def put(self, tag: str, text: str | bytes = b"") -> None:
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        self.h.update(f"{tag}:{len(data)}:".encode())
        self.h.update(data)

    def value(self, value: Any, depth: int) -> None:
        if _is_secret_value(value):
            self.put("secret")  # left out: only that there is one
            return
        if isinstance(value, enum.Enum):
            self.put("enum", f"{_qualname(type(value))}.{value.name}")
            return
        if isinstance(value, _PLAIN):
            self.put(type(value).__name__, repr(value))
            return
        if id(value) in self._path:
            self.put("cycle")
            return
        if depth > MAX_DEPTH:
            self.put("deep", _qualname(type(value)))
            return
        self._path.add(id(value))
        try:
            self._compound(value, depth + 1)
        finally:
            self._path.discard(id(value))

    def _compound(self, value: Any, depth: int) -> None:
        if isinstance(value, (list, tuple)):
            self.put("list" if isinstance(value, list) else "tuple", str(len(value)))
            if all(type(v) in _PLAIN_TYPES for v in value):  # a big table of plain values: one repr
                self.put("plain", repr(value))
                return
            for v in value:
                self.value(v, depth)
        elif isinstance(value, dict):
            self.mapping(value, depth)
        elif isinstance(value, (set, frozenset)):
            self.put("set", "".join(sorted(_digest_of(v, depth) for v in value)))
        elif isinstance(value, functools.partial):
            self.put("partial")
            self.value(value.func, depth)
            self.value(value.args, depth)
            self.mapping(value.keywords, depth)
        elif isinstance(value, types.MethodType):
            self.put("method")
            self.value(value.__func__, depth)
            self.value(value.__self__, depth)
        elif isinstance(value, types.FunctionType):
            self.function(value, depth)
        elif isinstance(value, (types.BuiltinFunctionType, types.ModuleType)):
            self.put("named", _qualname(value) if not isinstance(value, types.ModuleType) else value.__name__)
        elif isinstance(value, type):
            self.put("class", _qualname(value))
            if _own_code(value):
                self.put("source", _source(value) or "")
        else:
            self.instance(value, depth)

    def mapping(self, value: dict[Any, Any], depth: int) -> None:
        items = sorted(((_key_text(k, depth), v) for k, v in value.items() if not is_secret_name(k)),
                       key=lambda item: item[0])
        self.put("dict", str(len(items)))
        if all(type(v) in _PLAIN_TYPES for _, v in items):  # plain values: one repr of them all
            self.put("plain", repr(items))
            return
        for key, v in items:
            self.put("key", key)
            self.value(v, depth)

    def function(self, fn: types.FunctionType, depth: int) -> None:
        self.put("function", _qualname(fn))
        if id(fn) in self._done:  # walked already in this value: its code and state are in the hash
            self.put("again")
            return
        self._done[id(fn)] = fn  # kept alive: an id is never reused while the walk runs
        put_code(self, fn)
        for name, v in function_state(fn):
            self.put("state", name)
            self.value(v, depth)

    def instance(self, obj: Any, depth: int) -> None:
        cls = type(obj)
        self.put("object", _qualname(cls))
        if is_runtime(cls):
            return
        method = getattr(obj, FINGERPRINT_METHOD, None)
        if callable(method):
            self.mapping(dict(method()), depth)
            return
        if hasattr(obj, "dtype") and callable(getattr(obj, "tobytes", None)):  # a numpy array or scalar
            self.put("array", f"{obj.dtype}{getattr(obj, 'shape', '')}")
            self.put("data", obj.tobytes())
            return
        for base in cls.__mro__:
            if _own_code(base):
                self.put("source", _source(base) or _qualname(base))
        for name, v in class_globals(cls):
            self.put("state", name)
            self.value(v, depth)
        self.mapping(attributes(obj), depth)


#: exactly these types (not subclasses, whose repr may be anything) take the one-repr fast path
_PLAIN_TYPES = frozenset(_PLAIN) - {range}


def _key_text(key: Any, depth: int) -> str:
    """A dict key's canonical text (its sort order, too): a plain key's type and repr, else a digest."""
    if type(key) in _PLAIN_TYPES:
        return f"{type(key).__name__}:{key!r}"
    return _digest_of(key, depth)


def _digest_of(value: Any, depth: int) -> str:
    walk = _Walk()
    walk.value(value, depth)
    return walk.h.hexdigest()


def digest(value: Any) -> str:
    """A short stable hash of ``value`` (see the module docstring)."""
    return _digest_of(value, 0)[:16]


def attributes(obj: Any) -> dict[str, Any]:
    """An object's own state: ``vars()`` and ``__slots__``, without secret-named attributes."""
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        out.update(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()) if isinstance(getattr(cls, "__slots__", ()), (tuple, list)) else ():
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                out.setdefault(slot, getattr(obj, slot))
    return {k: v for k, v in out.items() if not is_secret_name(k) and not _is_secret_value(v)}


def function_state(fn: types.FunctionType) -> list[tuple[str, Any]]:
    """``(part name, value)`` of what a plain function's answers depend on besides its code."""
    out: list[tuple[str, Any]] = []
    code = fn.__code__
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a name bound later)
            continue
        if not is_secret_name(name) and not _is_secret_value(value):
            out.append((f"closure {name!r}", value))
    params = [p for p in inspect.signature(fn).parameters.values()] if _has_signature(fn) else []
    for p in params:
        if p.default is not inspect.Parameter.empty and not is_secret_name(p.name) \
                and not _is_secret_value(p.default):
            out.append((f"default {p.name!r}", p.default))
    for key, value in sorted(vars(fn).items()):
        if key == "__wrapped__":
            out.append(("wrapped function", value))
        elif not key.startswith("__") and not is_secret_name(key) and not _is_secret_value(value):
            out.append((f"attribute {key!r}", value))
    module_globals = fn.__globals__
    names = _global_names(code)
    for name in names:
        if name not in module_globals or is_secret_name(name):
            continue
        value = module_globals[name]
        if value is fn or _is_secret_value(value):
            continue
        if isinstance(value, types.ModuleType):
            # ``helpers.fmt(x)``: the user's own module's members this code names (``fmt``)
            if is_user_module(value.__name__):
                members = vars(value)
                out += [(f"global '{name}.{m}'", members[m]) for m in names
                        if m in members and not is_secret_name(m) and not _is_secret_value(members[m])
                        and not isinstance(members[m], types.ModuleType)]
            continue
        if isinstance(value, (types.FunctionType, type)) and not (
                module_of(value) == module_of(fn) or is_user_module(module_of(value))):
            continue  # a library's function or class: its release is not this program's question
        out.append((f"global {name!r}", value))
    return out


def class_globals(cls: type) -> list[tuple[str, Any]]:
    """The globals the methods of ``cls`` and of its user-code bases read (their source is the
    class's: a helper they call is not in it), one part per name."""
    out: dict[str, Any] = {}
    for base in cls.__mro__:
        if not is_user_module(module_of(base)):
            continue
        for member in vars(base).values():
            fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if isinstance(fn, types.FunctionType):
                for part, v in function_state(fn):
                    if part.startswith("global ") and v is not cls:
                        out.setdefault(part, v)
    return sorted(out.items(), key=lambda item: item[0])


def _has_signature(fn: Any) -> bool:
    try:
        inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return True


def _global_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return sorted(set(names))


def _unwrap(function: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """The callable whose code counts, and the parts a ``functools.partial`` adds."""
    extra: list[tuple[str, Any]] = []
    while isinstance(function, functools.partial):
        extra.append(("partial arguments", (function.args, function.keywords)))
        function = function.func
    return function, extra


def fingerprint(function: Any) -> tuple[str, dict[str, str]]:
    """``(qualified name, {part: hash})`` of ``function`` (see the module docstring).

    The name is the innermost wrapped function's (what the user wrote); the parts cover the
    wrapper too (a decorator's arguments live in its closure)."""
    function, extra = _unwrap(function)
    named = inspect.unwrap(function) if isinstance(function, types.FunctionType) else function
    if isinstance(named, (types.FunctionType, types.MethodType)):
        name = _qualname(named)
    else:
        name = _qualname(type(named))
    parts: list[tuple[str, Any]] = list(extra)
    code = _Walk()
    if isinstance(function, types.MethodType):
        parts.append(("instance", function.__self__))
        function = function.__func__
    if isinstance(function, types.FunctionType):
        put_code(code, function)
        parts += function_state(function)
    else:
        cls = type(function)
        code.put("class", _qualname(cls))
        for base in cls.__mro__:
            if _own_code(base):
                code.put("source", _source(base) or _qualname(base))
        method = getattr(function, FINGERPRINT_METHOD, None)
        if callable(method):
            parts += _settings(dict(method()))
        else:
            parts += class_globals(cls)
            parts += [(f"attribute {k!r}", v) for k, v in sorted(attributes(function).items())]
    out = {"code": code.h.hexdigest()[:16]}
    for part, value in parts:
        out[part] = digest(value)
    return name, out


def _settings(settings: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``setting 'x'`` parts; a setting that is itself an object with settings (a lookup join's
    source) is spelt out one level down, so a change names the source's setting."""
    out: list[tuple[str, Any]] = []
    for key, value in sorted(settings.items()):
        if is_secret_name(key) or _is_secret_value(value):
            continue
        method = getattr(value, FINGERPRINT_METHOD, None)
        if not prefix and callable(method) and not isinstance(value, type):
            out.append((f"{key} type", _qualname(type(value))))
            cls = type(value)
            own = [b for b in cls.__mro__ if _own_code(b)]
            if own:
                out.append((f"{key} code", [_source(b) or _qualname(b) for b in own]))
            out += _settings(dict(method()), prefix=f"{key} ")
        elif not prefix and not isinstance(value, (type, types.FunctionType)) and not isinstance(value, _PLAIN) \
                and not isinstance(value, (list, tuple, dict, set, frozenset)) and not is_runtime(type(value)):
            # a user object among the settings (a custom lookup source): its attributes, by name
            out.append((f"{key} type", _qualname(type(value))))
            cls = type(value)
            own = [b for b in cls.__mro__ if _own_code(b)]
            if own:
                out.append((f"{key} code", [_source(b) or _qualname(b) for b in own]))
            out += [(f"{key} attribute {k!r}", v) for k, v in sorted(attributes(value).items())]
        else:
            out.append((f"{prefix}setting {key!r}", value))
    return out
