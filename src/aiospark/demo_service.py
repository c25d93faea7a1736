"""Deprecated: moved to :mod:`aiospark.app.demo_service`."""

from ._moved import alias

__getattr__, __dir__ = alias(__name__, "aiospark.app.demo_service")

if __name__ == "__main__":  # `python -m aiospark.demo_service` keeps working
    from aiospark.app.demo_service import main

    raise SystemExit(main())
