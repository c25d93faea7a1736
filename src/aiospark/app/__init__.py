"""The applications built on the library: the ``aiospark`` command (``demo``, ``enrich``,
``journal``), the demo's services, and the CLI's progress block. Nothing in the library imports
this package.

Example::

    from aiospark.app.cli import main
    main(["enrich", "in.csv", "out.parquet", "--url", "http://127.0.0.1:8080/item/{id}", "--schema", "name STRING"])
"""
