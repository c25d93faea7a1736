"""``aiospark enrich``: read a dataset, enrich every row from an HTTP endpoint, write the result.

Runs on local Spark by default; under ``spark-submit`` it uses the session spark-submit set up
(so ``--master`` comes from spark-submit), which is how it runs on a cluster.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Optional

FORMATS = ("parquet", "csv", "json")


def guess_format(path: str, explicit: Optional[str], what: str) -> str:
    """The format named by ``explicit`` or by the path's extension (``.parquet``, ``.csv``, ``.json``)."""
    if explicit:
        if explicit not in FORMATS:
            raise ValueError(f"{what} format must be one of {FORMATS}, got {explicit!r}")
        return explicit
    name = path.rstrip("/").lower()
    for fmt, extensions in (("parquet", (".parquet", ".pq")), ("csv", (".csv",)), ("json", (".json", ".jsonl"))):
        if name.endswith(extensions):
            return fmt
    if os.path.isdir(path):
        found = {f.rsplit(".", 1)[-1].lower() for f in os.listdir(path) if "." in f and not f.startswith((".", "_"))}
        for fmt, ext in (("parquet", "parquet"), ("csv", "csv"), ("json", "json")):
            if ext in found:
                return fmt
    raise ValueError(f"cannot tell the {what} format of {path!r} from its name: pass --{what}-format "
                     f"({'/'.join(FORMATS)})")


def read(spark: Any, path: str, fmt: str) -> Any:
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.format(fmt).load(path)


def write(df: Any, path: str, fmt: str, mode: str) -> None:
    writer = df.write.mode(mode).format(fmt)
    if fmt == "csv":
        writer = writer.option("header", "true")
    writer.save(path)


def spark_session(master: Optional[str]) -> Any:
    """Under spark-submit: its session; otherwise a local one on ``master``."""
    from pyspark.sql import SparkSession

    if master is None and os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit
        return SparkSession.builder.appName("aiospark-enrich").getOrCreate()
    from .spark.session import local_session

    return local_session(master or "local[*]", app_name="aiospark-enrich")


def run_enrich(input_path: str, output_path: str, *, url: str, schema: str, concurrency: int = 100,
               timeout: float = 30.0, retries: int = 3, ordered: bool = False, how: str = "left",
               input_format: Optional[str] = None, output_format: Optional[str] = None, mode: str = "error",
               cache_rows: int = 0, master: Optional[str] = None, out: Callable[[str], Any] = print,
               live: Optional[bool] = None) -> Dict[str, Any]:
    """Enrich ``input_path`` into ``output_path``; returns rows and seconds (also printed via ``out``)."""
    from .connectors import HttpLookup, is_retryable
    from .core import RetryStrategy
    from .lookup import LookupCache
    from .progress import Progress
    from .spark.lookup_join import lookup_join
    from .spark.metrics import Metrics

    in_fmt = guess_format(input_path, input_format, "input")
    out_fmt = output_format or (guess_format(output_path, None, "output") if "." in os.path.basename(
        output_path.rstrip("/")) else in_fmt)
    if out_fmt not in FORMATS:
        raise ValueError(f"output format must be one of {FORMATS}, got {out_fmt!r}")
    source = HttpLookup(url, schema, max_connections=concurrency)
    retry = (RetryStrategy.exponential_backoff(retries, 0.1, 5.0, jitter=0.2, exception_predicate=is_retryable)
             if retries > 0 else None)
    cache = LookupCache(max_rows=cache_rows) if cache_rows > 0 else None
    spark = spark_session(master)
    started = time.perf_counter()
    df = read(spark, input_path, in_fmt)
    missing = [k for k in source.key_columns if k not in df.columns]
    if missing:
        raise ValueError(f"the URL template uses {missing}, which are not columns of {input_path} ({df.columns})")
    metrics = Metrics("enrich")
    enriched = lookup_join(df, source, on=list(source.key_columns), how=how, capacity=concurrency, timeout=timeout,
                           retry=retry, ordered=ordered, cache=cache, metrics=metrics)
    with Progress(metrics, live=live):
        write(enriched, output_path, out_fmt, mode)
    seconds = time.perf_counter() - started
    rows = read(spark, output_path, out_fmt).count()
    out(f"enriched {input_path} ({in_fmt}) -> {output_path} ({out_fmt}): {rows:,} rows in {seconds:.1f} s "
        f"({rows / seconds:,.0f} rows/s)")
    out(f"metrics: {metrics.total}")
    return {"rows": rows, "seconds": seconds, "metrics": metrics.total}
