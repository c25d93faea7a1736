"""``aiospark enrich``: read a dataset, enrich every row from an HTTP endpoint, write the result.

Runs on local Spark by default; under ``spark-submit`` it uses the session spark-submit set up
(so ``--master`` comes from spark-submit), which is how it runs on a cluster.

What it promises (docs/design.md, "aiospark enrich"):

* arguments, paths and the input's columns are checked before Spark starts (:mod:`.enrich_checks`);
* the output appears only when the job succeeded: Spark writes a hidden sibling directory, which is
  renamed to OUTPUT at the end; an existing OUTPUT is replaced only with ``overwrite=True``, and only
  when it is a directory this tool wrote (:mod:`.enrich_output`: a marker file); OUTPUT is never
  the input, inside it or around it; a failed job removes its temporary directory and leaves
  OUTPUT as it was;
* CSV columns are read as strings and JSON's fractional numbers as their text, unless
  ``input_schema`` declares types (:mod:`.enrich_input`): values reach the service as written;
* a ``--schema`` column that no response carried (NULL in every row the service returned) fails
  the job, unless ``allow_empty_columns`` -- a typo is never a silent all-NULL column;
* ``on_error="row"`` keeps going: a failed row is written with its input columns and the error
  text in ``_error`` (NULL in good rows);
* a malformed input line (CSV or JSON Lines; :mod:`.enrich_input`) is never read silently: with
  ``on_error="fail"`` the run stops before any call, naming the lines (line numbers for a local
  input); with ``on_error="row"`` each becomes an error row whose ``_error`` quotes the line;
* rows/s is rows written over the seconds of the Spark job, in the progress line and the summary.

Example::

    run_enrich("in.csv", "out.parquet", url="http://127.0.0.1:8080/item/{id}", schema="name STRING")
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from ..lookup import LookupSource
from .enrich_base import quoted
from .enrich_checks import (  # noqa: F401
    ERROR_COLUMN,
    EnrichError,
    EnrichPlan,
    check_enrich,
    guess_format,
    is_local,
)
from .enrich_input import MALFORMED, read_marked, refuse_malformed
from .enrich_output import MARKER, check_remote, marker_text

#: the lookup's mark on every row a response carried (dropped before writing)
FOUND = "_aiospark_found"
#: the mark on an error row made of a malformed input line (counted, then dropped)
BAD_LINE = "_aiospark_bad_line"


class EnrichFailed(RuntimeError):
    """The Spark job ran and failed, or wrote something the user must fix (the CLI exits 1)."""


class _MarkedHttp(LookupSource):
    """The user's HttpLookup, marking every row it found so the job can count them."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.schema = f"{inner.schema}, {FOUND} BOOLEAN"
        self.key_columns = inner.key_columns

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def lookup(self, key: tuple) -> list[dict[str, Any]]:
        return [{**row, FOUND: True} for row in await self.inner.lookup(key)]

    def __aiospark_fingerprint__(self) -> dict[str, Any]:
        """The HttpLookup's own settings (URL template with credentials masked, method, the headers'
        names, schema, ...) for a journal's manifest: a rerun against another endpoint is refused,
        naming the setting that changed."""
        return {**self.inner.__aiospark_fingerprint__(), "marked": FOUND}

    def __repr__(self) -> str:
        return repr(self.inner)


def write(df: Any, path: str, fmt: str) -> None:
    """Write ``df`` to the new directory ``path``."""
    writer = df.write.mode("errorifexists").format(fmt)
    if fmt == "csv":  # values as they are: Spark's CSV writer trims spaces by default
        writer = (writer.option("header", "true").option("ignoreLeadingWhiteSpace", "false")
                  .option("ignoreTrailingWhiteSpace", "false"))
    writer.save(path)


def spark_session(master: str | None) -> Any:
    """Under spark-submit: its session; otherwise a local one on ``master``."""
    from pyspark.sql import SparkSession

    if master is None and os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit
        return SparkSession.builder.appName("aiospark-enrich").getOrCreate()
    from ..spark.session import local_session

    return local_session(master or "local[*]", app_name="aiospark-enrich")


class _Files:
    """Hadoop's FileSystem through the JVM: the same rename/delete for local paths, HDFS and S3."""

    def __init__(self, spark: Any):
        self.spark = spark
        self.jvm = spark.sparkContext._jvm
        self.conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> Any:
        p = self.jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self.conf), p

    def exists(self, path: str) -> bool:
        fs, p = self._fs(path)
        return bool(fs.exists(p))

    def delete(self, path: str) -> None:
        fs, p = self._fs(path)
        fs.delete(p, True)

    def qualified(self, path: str) -> str:
        fs, p = self._fs(path)
        return str(fs.makeQualified(p).toString())

    def read_text(self, path: str, limit: int) -> str:
        """A small file's text; a file over ``limit`` bytes reads as ``"x"`` (not a marker of ours)."""
        fs, p = self._fs(path)
        if fs.getFileStatus(p).getLen() > limit:
            return "x"
        rows = self.spark.read.text(path, wholetext=True).collect()
        return str(rows[0][0]) if rows else ""

    def write_text(self, path: str, text: str) -> None:
        fs, p = self._fs(path)
        stream = fs.create(p, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def rename(self, src: str, dst: str) -> None:
        fs, p = self._fs(src)
        if not fs.rename(p, self._fs(dst)[1]):
            raise EnrichFailed(f"could not rename {src} to {dst}; the enriched data is in {src}")


def _sibling(path: str, tag: str) -> str:
    head, name = os.path.split(path.rstrip("/"))
    # a hidden name: Spark and most tools skip names starting with '.' when reading the parent
    return os.path.join(head, f".{name}.aiospark-{tag}-{uuid.uuid4().hex[:8]}")


def safe_names(columns: list[str]) -> dict[str, str]:
    """A name for each input column that PySpark's ``mapInArrow`` can look up: it resolves every column
    with ``df[name]``, which reads ``a.b`` as field ``b`` of ``a`` (UNRESOLVED_COLUMN), so such names go
    through the lookup as ``_aiospark_c<i>`` and are given back afterwards."""
    taken = set(columns)
    out = {}
    for i, c in enumerate(columns):
        safe = c
        if "." in c or "`" in c:
            safe = f"_aiospark_c{i}"
            while safe in taken:
                safe = "_" + safe
            taken.add(safe)
        out[c] = safe
    return out


def _prepare(df: Any, columns: list[str], plan: EnrichPlan, on_error: str, safe: dict[str, str]) -> Any:
    """The output columns: input ``columns`` (named ``safe[c]`` in ``df``), schema columns, and ``_error``
    under ``on_error="row"`` (plus the marks ``FOUND`` and ``BAD_LINE``, counted and then dropped)."""
    from pyspark.sql import functions as F

    good = F.lit(None).cast("boolean").alias(BAD_LINE)
    added = [F.col(quoted(c)) for c in plan.added]
    if on_error != "row":
        return df.select(*[F.col(quoted(safe[c])).alias(c) for c in columns], *added, FOUND, good)
    # an error row has its input in the struct _input and NULL elsewhere: put the input back in place
    failed = F.col(ERROR_COLUMN).isNotNull()
    back = [F.when(failed, F.col("_input").getField(safe[c])).otherwise(F.col(quoted(safe[c]))).alias(c)
            for c in columns]
    return df.select(*back, *added, F.col(ERROR_COLUMN), FOUND, good)


def _malformed_rows(marked: Any, columns: list[str], like: Any) -> Any:
    """``--on-error row``: each malformed input line as an error row shaped like ``like`` -- its input
    columns as Spark parsed them (perhaps partly), NULL schema columns, the reason in ``_error``."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in like.schema.fields}
    added = [c for c in like.columns if c not in columns and c not in (ERROR_COLUMN, FOUND, BAD_LINE)]
    return marked.where(F.col(MALFORMED).isNotNull()).select(
        *[F.col(quoted(c)) for c in columns], *[F.lit(None).cast(types[c]).alias(c) for c in added],
        F.col(MALFORMED).alias(ERROR_COLUMN), F.lit(None).cast("boolean").alias(FOUND), F.lit(True).alias(BAD_LINE))


def _journal_refusal(text: str) -> str:
    """The journal's refusal in the CLI's words: what changed, and the CLI's way on."""
    what = text.split(". Nothing was called.")[0]
    return (f"{what}. Nothing was called. A journal serves only the job it recorded (same --url, method, "
            "headers, --schema, key columns): pass a new --journal location to record this job's outcomes, "
            "or rerun with the options the journal was written with")


def _empty_columns(counts: dict[str, int], plan: EnrichPlan) -> list[str]:
    """Schema columns NULL in every row a response carried (none when no response carried a row)."""
    return [c for c in plan.added if counts["found"] and counts[c] == 0]


def run_enrich(input_path: str, output_path: str, *, url: str, schema: str, concurrency: int = 100,
               timeout: float = 30.0, retries: int = 3, ordered: bool = False, how: str = "left",
               input_format: str | None = None, output_format: str | None = None, overwrite: bool = False,
               on_error: str = "fail", allow_empty_columns: bool = False, cache_rows: int = 0,
               master: str | None = None, out: Callable[[str], Any] = print,
               warn: Callable[[str], Any] = print, live: bool | None = None, input_schema: str | None = None,
               headers: dict[str, str] | None = None, auth_token: str | None = None, journal: Any = None,
               budget: Any = None, rate_limit: Any = None, multiline: bool = False,
               dry_run: bool = False) -> dict[str, Any]:
    """Enrich ``input_path`` into ``output_path``; returns rows, seconds, rows/s, error rows and metrics.

    Raises :class:`EnrichError` (before Spark starts) for bad arguments and :class:`EnrichFailed`
    when the job fails or a schema column stayed empty; OUTPUT is then untouched. ``timeout``
    bounds each request and each row (retries included). ``journal``, ``budget`` and
    ``rate_limit`` (an :class:`aiospark.Journal`, :class:`aiospark.Budget`,
    :class:`aiospark.RateLimit`) go to :func:`aiospark.lookup_join` as they are. ``dry_run=True``
    prints what the run would call (:func:`aiospark.plan`: rows, NULL keys, distinct keys, outcomes
    recorded, calls left) and returns ``{"plan": RunPlan, ...}``: nothing is called or written.

    Example::

        run_enrich("in.json", "out.json", url="http://127.0.0.1:8080/item/{id}", schema="name STRING",
                   on_error="row")["error_rows"]   # 0
    """
    plan = check_enrich(input_path, output_path, url=url, schema=schema, on_error=on_error, overwrite=overwrite,
                        input_format=input_format, output_format=output_format, concurrency=concurrency,
                        timeout=timeout, input_schema=input_schema, headers=headers, auth_token=auth_token)
    if multiline and plan.in_format != "csv":
        raise EnrichError(f"--multiline is for CSV input; {input_path} is read as {plan.in_format}")
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from ..connectors import is_retryable
    from ..core import RetryStrategy
    from ..lookup import LookupCache
    from ..spark.lookup_join import lookup_join
    from ..spark.metrics import Metrics
    from .progress import Progress, format_rate, rate

    retry = (RetryStrategy.exponential_backoff(retries, 0.1, 5.0, jitter=0.2, exception_predicate=is_retryable)
             if retries > 0 else None)
    cache = LookupCache(max_rows=cache_rows) if cache_rows > 0 else None
    spark = spark_session(master)
    try:  # Spark's own parser, naming only what the user wrote (the strict check up front should agree)
        from ..spark.schema import parse_schema as spark_schema

        spark_schema(spark, schema, what="--schema")
    except ValueError as exc:
        raise EnrichError(str(exc)) from None
    files = _Files(spark)
    if not files.exists(input_path):  # remote inputs are first checked here
        raise EnrichError(f"the input {input_path!r} does not exist")
    if not (is_local(input_path) and is_local(output_path)):  # local paths were checked before Spark
        check_remote(files, input_path, output_path, overwrite)
    marked, columns = read_marked(spark, input_path, plan.in_format, input_schema, multiline)
    missing = [k for k in plan.source.key_columns if k not in columns]
    if missing:
        raise EnrichError(f"--url uses {missing}, not columns of {input_path}: its columns are {columns}")
    if on_error == "fail":
        refuse_malformed(marked, columns, input_path)  # before any call: a bad line fails the run, named
    safe = safe_names(columns)
    df = marked.where(F.col(MALFORMED).isNull()).select(*[F.col(quoted(c)).alias(safe[c]) for c in columns])
    metrics = Metrics("enrich")
    from ..journal import JournalMismatch

    join = dict(on=[safe[k] for k in plan.source.key_columns], how=how, capacity=concurrency, timeout=timeout,
                retry=retry, ordered=ordered, cache=cache, on_error=on_error, metrics=metrics, budget=budget,
                rate_limit=rate_limit)
    # a GET's answer is its URL's: rows are identified by the URL's columns (equal URLs, one call per
    # job); a journal an earlier release wrote identifies rows by every column and is read that way
    journals = [journal] if journal is None or journal.key is not None else \
        [journal.with_key([safe[k] for k in plan.source.key_columns]), journal]
    for tried, candidate in enumerate(journals):
        try:
            if dry_run:  # the same lookup_join, counted by Spark instead of run: nothing is called or written
                from ..spark.plan import plan as plan_run

                counted_run = plan_run(lookup_join, df, _MarkedHttp(plan.source), journal=candidate, **join)
                out(f"dry run of {input_path} -> {output_path}: {counted_run}; nothing was called or written")
                return {"plan": counted_run, "rows": counted_run.rows, "error_rows": 0}
            enriched = lookup_join(df, _MarkedHttp(plan.source), journal=candidate, **join)
            break
        except JournalMismatch as exc:  # checked on the driver, before any call or write
            if tried == 0 and len(journals) == 2:
                refusal = exc
                continue
            raise EnrichError(_journal_refusal(str(refusal if tried else exc))) from None
    prepared = _prepare(enriched, columns, plan, on_error, safe)
    if on_error == "row":
        prepared = prepared.unionByName(_malformed_rows(marked, columns, prepared))
    seen = Observation("aiospark_enrich")
    # metric names must not be column names: n0, n1, ... stand for plan.added
    # what kinds of error the failed rows hold (an exception's name, and the HTTP status of a
    # status error): a few distinct values, never the error's text (it may quote a response)
    kind = F.lit("")
    if on_error == "row":  # 'HttpStatusError: HttpLookup(host:port): HTTP 500 ...' -> 'HttpStatusError (HTTP 500)'
        name = F.regexp_extract(F.col(ERROR_COLUMN), r"^([A-Za-z_][\w.]*):", 1)
        status = F.regexp_extract(F.col(ERROR_COLUMN), r"^[A-Za-z_][\w.]*: (?:[^ ]*: )?(HTTP \d{3})\b", 1)
        kind = F.when(status != "", F.concat(name, F.lit(" ("), status, F.lit(")"))).otherwise(name)
    # one string, not an array: PySpark 3.5's Observation hands an array back as a bare JavaObject
    kinds = F.concat_ws("\n", F.slice(F.array_sort(F.collect_set(F.when(F.col(BAD_LINE).isNull() & (kind != ""),
                                                                        kind))), 1, 6))
    counted = prepared.observe(seen, F.count(F.lit(1)).alias("rows"), F.count(FOUND).alias("found"),
                               F.count(BAD_LINE).alias("bad_lines"), kinds.alias("kinds"),
                               *[F.count(F.col(quoted(c))).alias(f"n{i}") for i, c in enumerate(plan.added)])
    temporary = _sibling(output_path, "tmp")
    try:
        with Progress(metrics, live=live, summary=False) as progress:
            write(counted.drop(FOUND, BAD_LINE), temporary, plan.out_format)
        observed = seen.get
        counts = {"found": int(observed["found"]), **{c: int(observed[f"n{i}"]) for i, c in enumerate(plan.added)}}
        rows = int(observed["rows"])
        bad_lines = int(observed["bad_lines"])
        progress.finish(rows)
        empty = _empty_columns(counts, plan)
        if empty and not allow_empty_columns:
            raise EnrichFailed(
                f"--schema column(s) {empty} were NULL or absent in all {counts['found']:,} rows the service "
                f"returned: check their spelling against the response's JSON fields, or pass "
                f"--allow-empty-columns if they are really empty. Nothing was written to {output_path}.")
        files.write_text(f"{temporary.rstrip('/')}/{MARKER}", marker_text(input_path))
        _commit(files, temporary, output_path)
    finally:
        if files.exists(temporary):
            files.delete(temporary)
    seconds = progress.elapsed
    for c in empty:
        warn(f"warning: column {c!r} is NULL in every row (--allow-empty-columns)")
    error_rows = metrics.total.error_rows + bad_lines
    out(f"enriched {input_path} ({plan.in_format}) -> {output_path} ({plan.out_format}): {rows:,} rows in "
        f"{seconds:.1f} s ({format_rate(rate(rows, seconds))} rows/s)")
    answered = rows - error_rows  # rows the service answered (found or not found)
    if counts["found"] == 0 and answered > 0:
        every = "any row" if answered == rows else f"any of the {answered:,} rows that did not fail"
        warn(f"warning: the service returned no data (404) for {every}")
    if error_rows:
        lines = f" ({bad_lines:,} of them malformed input lines)" if bad_lines else ""
        shown = [k for k in (observed["kinds"] or "").split("\n") if k]
        errors = f": {', '.join(shown)}" if shown else ""
        warn(f"warning: {error_rows:,} rows failed{lines}{errors}; they are in the output with their error in "
             f"column {ERROR_COLUMN!r}")
    out(f"metrics: {metrics.total}")
    return {"rows": rows, "seconds": seconds, "rows_per_second": rate(rows, seconds), "error_rows": error_rows,
            "metrics": metrics.total}


def _commit(files: _Files, temporary: str, output_path: str) -> None:
    """Move the finished output into place; an old OUTPUT goes only once the new one is there."""
    old = None
    if files.exists(output_path):
        old = _sibling(output_path, "old")
        files.rename(output_path, old)
    try:
        files.rename(temporary, output_path)
    except Exception:
        if old is not None:
            files.rename(old, output_path)
        raise
    if old is not None:
        files.delete(old)
