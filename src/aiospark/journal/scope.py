"""What a journal's fingerprint takes in and leaves out: credential names, the user's own code,
runtime objects (see :mod:`aiospark.journal.fingerprint`).

Example::

    is_secret_name("api_key"), is_secret_name("secret_sauce")   # (True, False)
    is_user_module("__main__"), is_user_module("json")          # (True, False)
"""
from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from typing import Any

__all__ = ["SECRET_NAMES", "SECRET_SUFFIXES", "is_runtime", "is_secret_name", "is_user_module", "module_of"]

#: names that hold credentials whatever the object (compared lowercased, ``-`` read as ``_``,
#: leading underscores ignored): only these and the suffixes below, so that a setting merely
#: named like one (``max_tokens``, ``secret_sauce``, ``password_policy``, ``auth``) still counts
SECRET_NAMES = frozenset({
    "password", "passwd", "passphrase", "pwd", "secret", "client_secret", "api_key", "apikey", "access_key",
    "secret_key", "secret_access_key", "access_token", "auth_token", "bearer_token", "refresh_token",
    "session_token", "private_key", "token", "credential", "credentials", "authorization",
    "proxy_authorization", "cookie", "set_cookie"})
#: ``db_password``, ``client_secret``, ``x_api_key``, ``github_token`` (not ``max_tokens``)
SECRET_SUFFIXES = ("_password", "_secret", "_api_key", "_token")

#: modules of runtime objects: their state differs between runs (or holds connections), their type counts
_RUNTIME = ("asyncio", "socket", "ssl", "threading", "_thread", "concurrent", "multiprocessing", "selectors",
            "subprocess", "queue", "logging", "io", "_io", "weakref", "tempfile", "sqlite3", "aiohttp",
            "httpx", "requests", "urllib3", "redis", "psycopg", "psycopg2", "asyncpg", "pyspark", "py4j",
            "openai", "pyreqwest", "yarl", "multidict", "uvloop", "aiospark.runtime", "aiospark.budget",
            "aiospark.spark", "aiospark.core.metrics")


def is_secret_name(name: Any) -> bool:
    """Whether an attribute, closure variable, default, global or dict key (an HTTP header) is named
    as a credential: exactly one of :data:`SECRET_NAMES` or ending in one of :data:`SECRET_SUFFIXES`.

    >>> is_secret_name("api_key"), is_secret_name("X-Api-Key"), is_secret_name("max_tokens")
    (True, True, False)
    """
    if not isinstance(name, str):
        return False
    norm = name.lower().replace("-", "_").lstrip("_")
    return norm in SECRET_NAMES or norm.endswith(SECRET_SUFFIXES)


def module_of(obj: Any) -> str:
    return getattr(obj, "__module__", None) or ""


def is_runtime(cls: type) -> bool:
    module = module_of(cls)
    return any(module == m or module.startswith(m + ".") for m in _RUNTIME)


def _prefixes() -> tuple[str, ...]:
    """Where installed code lives: the interpreter's prefixes, the standard library, site-packages."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *(v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib"))}
    try:
        paths.update(site.getsitepackages())
        paths.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(os.path.join(os.path.realpath(p), "") for p in paths if p)


@functools.lru_cache(maxsize=1024)
def is_user_module(name: str) -> bool:
    """Whether module ``name`` is the user's own code (whose functions' bodies decide answers):
    not aiospark, pyspark or py4j, not built in, and not a file under the interpreter's prefixes,
    the standard library or site-packages. ``__main__`` (a script, a notebook) is."""
    top = name.split(".", 1)[0]
    if not name or top in ("aiospark", "pyspark", "py4j", "builtins") or name in sys.builtin_module_names:
        return False
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if not path:
        return name == "__main__"  # a notebook's or an interactive session's code (else built in)
    real = os.path.join(os.path.realpath(path), "")[:-1]
    return not any(real.startswith(p) for p in _prefixes()) and "site-packages" not in real \
        and "dist-packages" not in real
