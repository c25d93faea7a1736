"""Deprecated: moved to :mod:`aiospark.app.cli`."""

from ._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.app.cli")

if __name__ == "__main__":  # `python -m aiospark.cli` keeps working
    from aiospark.app.cli import main

    raise SystemExit(main())
