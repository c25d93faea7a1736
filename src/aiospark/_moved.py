"""What keeps an old import path working after a module moved: a thin alias that warns.

A module that moved leaves a two-line module at its old path::

    from ._moved import alias
    __getattr__, __dir__ = alias(__name__, "aiospark.connectors.http.client")

Importing the old path emits one ``DeprecationWarning`` naming the new one; every name (private ones
too, which pickles made before the move may reference) is then looked up in the new module(s) when
first asked for, so ``from <old> import X``, ``import <old>`` and ``pickle.loads`` keep working.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["alias"]


def alias(old: str, *new: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Warn that ``old`` moved to ``new`` (the first is where to import from now) and return the
    ``__getattr__``/``__dir__`` pair of a module that reads each name from the ``new`` modules."""
    warnings.warn(f"{old} moved to {new[0]}; import from {new[0]} (the old path will be removed)",
                  DeprecationWarning, stacklevel=3)
    modules = [importlib.import_module(n) for n in new]

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            return [n for m in modules for n in getattr(m, "__all__", ())]
        for module in modules:
            try:
                return getattr(module, name)
            except AttributeError:
                pass
        raise AttributeError(f"module {old!r} (moved to {new[0]!r}) has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({n for m in modules for n in dir(m)})

    return __getattr__, __dir__
