"""The application file to give ``spark-submit`` for the ``aiospark`` command (``enrich``, ``demo``).

``spark-submit`` runs its application as a plain script, outside any package, so ``aiospark/cli.py``
itself cannot be that script (its relative imports fail). This file only uses absolute imports::

    spark-submit --master local[2] "$(python -c 'import aiospark.app.spark_submit as s; print(s.PATH)')" \\
        enrich in.parquet out.parquet --url 'http://127.0.0.1:8080/item/{id}' --schema 'name STRING'

Arguments after the path are the ``aiospark`` command's; the session (master, conf) is spark-submit's.
"""
from __future__ import annotations

import os
import sys

PATH: str = os.path.abspath(__file__)
"""This file's path: the application argument of ``spark-submit``."""


def run(argv: list[str] | None = None) -> int:
    """Run the ``aiospark`` command with ``argv`` (default: this process's arguments).

    Example::

        run(["enrich", "in.csv", "out.json", "--url", "http://127.0.0.1:8080/item/{id}", "--schema", "name STRING"])
    """
    from aiospark.app.cli import main

    return main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    # Run as a file, Python puts this package's own directory first on sys.path, where its modules
    # (cli, core, progress, ...) would shadow top-level modules of those names; aiospark itself is
    # imported from where it is installed.
    _here = os.path.dirname(PATH)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    sys.exit(run())
