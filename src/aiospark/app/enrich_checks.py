"""``aiospark enrich``: everything checked before Spark starts (paths, formats, columns, schema).

Starting Spark takes seconds; a typo must not. The input's column names are read cheaply, without
Spark: a Parquet dataset's schema from its footers (pyarrow), a CSV file's header line, the keys of
a JSON Lines dataset's first 16 MB (the whole of a smaller one). Partition directories
(``key=value``) add their columns as Spark's discovery does. A remote input (``s3a://``,
``hdfs://``) is checked once Spark is up instead, as is a JSON column first seen after 16 MB.

Example::

    plan = check_enrich("in.csv", "out.json", url="http://127.0.0.1:8080/item/{id}",
                        schema="name STRING", on_error="fail", overwrite=False)
    plan.in_format, plan.columns      # ('csv', ['id', 'qty'])
"""
from __future__ import annotations

import bz2
import csv
import gzip
import json
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .enrich_base import EnrichError, is_local, local_path

if TYPE_CHECKING:  # imported when a plan is made: the CLI's --help must not load the connectors
    from ..connectors import HttpLookup

FORMATS = ("parquet", "csv", "json")
EXTENSIONS = (("parquet", (".parquet", ".pq")), ("csv", (".csv",)), ("json", (".json", ".jsonl")))
#: the compression extensions Hadoop's codecs read (Spark reads such CSV/JSON files natively)
COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".xz")
#: JSON bytes read for column names before Spark starts; beyond it Spark's own check decides
JSON_SAMPLE_BYTES = 16 << 20
#: the column an error row's error text lands in under --on-error row
ERROR_COLUMN = "_error"


@dataclass(frozen=True)
class EnrichPlan:
    """What ``check_enrich`` found: formats, the input's columns, and the lookup source."""

    input_path: str
    output_path: str
    in_format: str
    out_format: str
    columns: list[str] | None  # None: not knowable before Spark (remote input)
    source: HttpLookup
    added: list[str]  # schema columns the output gains (a schema column named like a key is the key)


def guess_format(path: str, explicit: str | None, what: str) -> str:
    """The format named by ``explicit`` or by the path's extension (``.parquet``, ``.csv``, ``.json``).

    Example::

        guess_format("x/data.parquet", None, "input")   # 'parquet'
    """
    if explicit:
        if explicit not in FORMATS:
            raise EnrichError(f"{what} format must be one of {FORMATS}, got {explicit!r}")
        return explicit
    name = _uncompressed(path.rstrip("/").lower())
    for fmt, extensions in EXTENSIONS:
        if name.endswith(extensions):
            return fmt
    if is_local(path) and os.path.isdir(local_path(path)):
        found = {os.path.splitext(_uncompressed(f.lower()))[1] for f in _data_files(local_path(path))}
        for fmt, extensions in EXTENSIONS:
            if found & set(extensions):
                return fmt
    flag = "--format" if what == "input" else "--output-format"
    raise EnrichError(f"cannot tell the {what} format of {path!r} from its name: pass {flag} "
                      f"({'/'.join(FORMATS)})")


def _uncompressed(name: str) -> str:
    """``name`` without a compression extension (``in.csv.gz`` -> ``in.csv``)."""
    for ext in COMPRESSED:
        if name.endswith(ext):
            return name[:-len(ext)]
    return name


def open_text(name: str) -> Any:
    """A local data file as text lines (gzip and bzip2 decompressed; a UTF-8 BOM skipped, as Spark's
    line reader skips it), or None for a compression Python cannot read (Spark checks those)."""
    lower = name.lower()
    if lower.endswith(".gz"):
        return gzip.open(name, "rt", encoding="utf-8-sig", errors="replace", newline="")
    if lower.endswith(".bz2"):
        return bz2.open(name, "rt", encoding="utf-8-sig", errors="replace", newline="")
    if lower.endswith(COMPRESSED):
        return None
    return open(name, encoding="utf-8-sig", errors="replace", newline="")


def _data_files(root: str) -> list[str]:
    """Files Spark would read under ``root`` (it skips names starting with ``_`` or ``.``)."""
    if os.path.isfile(root):
        return [root]
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found += [os.path.join(folder, f) for f in sorted(files) if not f.startswith(("_", "."))]
    return found


def _partition_columns(root: str, files: list[str]) -> list[str]:
    names: list[str] = []
    for f in files:
        for part in os.path.relpath(os.path.dirname(f), root).split(os.sep):
            if "=" in part and part.split("=", 1)[0] not in names:
                names.append(part.split("=", 1)[0])
    return names


def input_columns(path: str, fmt: str) -> tuple[list[str], bool]:
    """The input's column names, and whether they are complete (a JSON sample may not be).

    Example::

        input_columns("in.csv", "csv")   # (['id', 'qty'], True)
    """
    root = local_path(path)
    files = _data_files(root)
    if not files:
        raise EnrichError(f"the input {path!r} holds no data files (names starting with '_' or '.' are skipped)")
    complete = True
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            columns = list(pq.read_schema(files[0]).names)
        except Exception as exc:
            raise EnrichError(f"{files[0]!r} is not a readable Parquet file ({exc}): pass --format csv or "
                              f"--format json if it is one") from None
    elif fmt == "csv":
        headers = csv_headers(files)
        if headers is None:
            return [], False  # a compression Python cannot read: Spark's reader checks the columns
        columns = next(iter(headers.values()))
        if not columns:
            raise EnrichError(f"{files[0]!r} is empty: a CSV input needs a header line naming its columns")
    else:
        columns, complete = _json_keys(files)
    if os.path.isdir(root):
        columns += [c for c in _partition_columns(root, files) if c not in columns]
    return columns, complete


def csv_headers(files: list[str]) -> dict[str, list[str]] | None:
    """Each CSV file's header fields (its first non-empty line), parsed as Spark's reader does (a
    field of any length; Spark's default escape is a backslash); None when a file cannot be read here.
    Files whose headers name different columns are refused: Spark's reader takes every file's
    columns by position under the first file's names, so a value would land under another name."""
    csv.field_size_limit(sys.maxsize)  # Spark has no limit on a field's length; Python's is 128 KiB
    headers: dict[str, list[str]] = {}
    for name in files:
        handle = open_text(name)
        if handle is None:
            return None
        with handle:
            lines = (line for line in handle if line.strip())
            try:
                headers[name] = next(csv.reader(lines, escapechar="\\"), [])
            except csv.Error:  # Spark's parser decides about such a header
                return None
    check_same_headers(headers)
    return headers


def check_same_headers(headers: dict[str, Any]) -> None:
    """Refuse CSV files whose headers differ (see :func:`csv_headers`)."""
    first_file, first = next(iter(headers.items()), (None, None))
    for name, header in headers.items():
        if header != first:
            raise EnrichError(f"the CSV files' headers differ: {first_file} has {_shown(first)}, {name} has "
                              f"{_shown(header)}; Spark reads CSV columns by position, so a value would land "
                              "under another column's name: give each set of columns its own input")


def _shown(header: Any) -> str:
    text = repr(header)
    return text if len(text) <= 200 else text[:197] + "..."


def _json_keys(files: list[str]) -> tuple[list[str], bool]:
    keys: dict = {}
    budget = JSON_SAMPLE_BYTES
    for name in files:
        if name.lower().endswith(COMPRESSED) and not name.lower().endswith((".gz", ".bz2")):
            return list(keys), False  # a compression Python cannot read: Spark's reader checks
        opener: Any = gzip.open if name.lower().endswith(".gz") else bz2.open if name.lower().endswith(".bz2") else open
        with opener(name, "rb") as handle:
            for line in handle:
                budget -= len(line)
                if budget < 0:
                    return list(keys), False
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # Spark makes such lines _corrupt_record; its own check will tell
                if isinstance(record, dict):
                    keys.update(dict.fromkeys(record))
    return list(keys), True


def check_enrich(input_path: str, output_path: str, *, url: str, schema: str, on_error: str, overwrite: bool,
                 input_format: str | None = None, output_format: str | None = None,
                 concurrency: int = 100, timeout: float = 30.0, input_schema: str | None = None,
                 headers: dict[str, str] | None = None, auth_token: str | None = None) -> EnrichPlan:
    """Check every argument that can be checked without Spark; raise :class:`EnrichError` if one is wrong.

    ``timeout`` bounds each request as well as each row (retries included): no request outlives it.

    Example::

        check_enrich("in.json", "out.json", url="http://h/item/{id}", schema="name STRING",
                     on_error="row", overwrite=True).added   # ['name']
    """
    from ..connectors import HttpLookup
    from ..lookup.schema import parse_schema
    from .enrich_output import check_overwrite, check_paths
    from .enrich_request import column_template, redact_url

    if is_local(input_path) and not os.path.exists(local_path(input_path)):
        raise EnrichError(f"the input {input_path!r} does not exist (looked in {os.getcwd()})")
    check_paths(input_path, output_path)  # before anything else: OUTPUT must never be where the input is
    in_format = guess_format(input_path, input_format, "input")
    out_name = os.path.basename(output_path.rstrip("/"))
    out_format = output_format or (guess_format(output_path, None, "output") if "." in out_name else in_format)
    if out_format not in FORMATS:
        raise EnrichError(f"output format must be one of {FORMATS}, got {out_format!r}")
    if not timeout > 0:
        raise EnrichError(f"--timeout must be > 0 seconds (it bounds each request and each row), got {timeout}")
    declared = None
    if input_schema is not None:
        if in_format == "parquet":
            raise EnrichError("--input-schema is for CSV and JSON inputs: a Parquet input has its own types")
        try:
            declared = [f.name for f in parse_schema(input_schema)]
        except ValueError as exc:
            raise EnrichError(str(exc).replace("schema", "--input-schema", 1)) from None
    positional, names = column_template(url)
    try:
        fields = parse_schema(schema)
        source = HttpLookup(positional, schema, key_columns=names or None, max_connections=concurrency,
                            timeout=timeout, headers=headers or None, auth_token=auth_token)
    except ValueError as exc:  # SchemaError (a bad --schema) or a bad URL template
        text = str(exc).replace("url_template", "--url").replace(repr(positional), repr(redact_url(url)))
        raise EnrichError(text) from None
    keys = list(source.key_columns)
    columns: list[str] | None = None
    if declared is not None:
        columns, complete = declared, True
    elif is_local(input_path):
        columns, complete = input_columns(input_path, in_format)
    if columns is not None:
        missing = [k for k in keys if k not in columns]
        if missing and complete:
            raise EnrichError(f"--url uses {missing}, not {'a column' if len(missing) == 1 else 'columns'} of "
                              f"{input_path}: its columns are {columns} (a placeholder is a column's exact "
                              "name in braces, e.g. {order-id} or {customer id})")
        if not complete and not columns:
            columns = None
    added = [f.name for f in fields if f.name not in keys]
    clashes = [c for c in added if c in (columns or [])]
    if clashes:
        raise EnrichError(f"--schema columns {clashes} are input columns already: rename them in --schema "
                          "(the response field must carry the same name) or drop them from the input")
    if on_error == "row":
        if ERROR_COLUMN in (columns or []) or ERROR_COLUMN in added:
            raise EnrichError(f"--on-error row adds a column {ERROR_COLUMN!r}, which the input or --schema "
                              "already has: rename that column first")
    check_overwrite(output_path, overwrite)
    return EnrichPlan(input_path, output_path, in_format, out_format, columns, source, added)
