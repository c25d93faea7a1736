"""A local Spark session set up for aiospark (workers on this very Python)."""
from __future__ import annotations

import os
import sys
from typing import Any


def use_this_python() -> None:
    """Make PySpark workers start ``sys.executable`` (the default ``python3`` may lack pyarrow)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(master: str = "local[2]", *, app_name: str = "aiospark", connect: bool = False,
                  conf: dict[str, Any] | None = None) -> Any:
    """A local classic session, or with ``connect=True`` a Spark Connect session on ``master``.

    Example::

        spark = aiospark.local_session("local[2]")
    """
    use_this_python()
    from pyspark.sql import SparkSession

    from .compat import SPARK_VERSION

    if connect and SPARK_VERSION < (4, 0):
        # the 3.5 wheel has no Connect server (its JVM fails with ClassNotFoundException: SparkConnectPlugin)
        raise RuntimeError("local_session(connect=True) starts a local Spark Connect server, which needs PySpark "
                           ">= 4.0 (the PySpark 3.5 package has none); on 3.5 use a running server: "
                           "SparkSession.builder.remote('sc://host:15002').getOrCreate()")

    builder = SparkSession.builder.appName(app_name)
    builder = builder.remote(master) if connect else builder.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()
