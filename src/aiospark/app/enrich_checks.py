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

import csv
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # imported when a plan is made: the CLI's --help must not load the connectors
    from ..connectors import HttpLookup

FORMATS = ("parquet", "csv", "json")
EXTENSIONS = (("parquet", (".parquet", ".pq")), ("csv", (".csv",)), ("json", (".json", ".jsonl")))
#: JSON bytes read for column names before Spark starts; beyond it Spark's own check decides
JSON_SAMPLE_BYTES = 16 << 20
#: the column an error row's error text lands in under --on-error row
ERROR_COLUMN = "_error"


class EnrichError(ValueError):
    """A bad argument or input: the message says what to change (the CLI exits 2)."""


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


def is_local(path: str) -> bool:
    """A path on this machine (no scheme, or ``file:``)."""
    scheme = urlsplit(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(path: str) -> str:
    return urlsplit(path).path if path.startswith("file:") else path


def guess_format(path: str, explicit: str | None, what: str) -> str:
    """The format named by ``explicit`` or by the path's extension (``.parquet``, ``.csv``, ``.json``).

    Example::

        guess_format("x/data.parquet", None, "input")   # 'parquet'
    """
    if explicit:
        if explicit not in FORMATS:
            raise EnrichError(f"{what} format must be one of {FORMATS}, got {explicit!r}")
        return explicit
    name = path.rstrip("/").lower()
    for fmt, extensions in EXTENSIONS:
        if name.endswith(extensions):
            return fmt
    if is_local(path) and os.path.isdir(local_path(path)):
        found = {os.path.splitext(f)[1].lower() for f in _data_files(local_path(path))}
        for fmt, extensions in EXTENSIONS:
            if found & set(extensions):
                return fmt
    flag = "--format" if what == "input" else "--output-format"
    raise EnrichError(f"cannot tell the {what} format of {path!r} from its name: pass {flag} "
                      f"({'/'.join(FORMATS)})")


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
        with open(files[0], newline="", encoding="utf-8", errors="replace") as handle:
            columns = next(csv.reader(handle), [])
        if not columns:
            raise EnrichError(f"{files[0]!r} is empty: a CSV input needs a header line naming its columns")
    else:
        columns, complete = _json_keys(files)
    if os.path.isdir(root):
        columns += [c for c in _partition_columns(root, files) if c not in columns]
    return columns, complete


def _json_keys(files: list[str]) -> tuple[list[str], bool]:
    keys: dict = {}
    budget = JSON_SAMPLE_BYTES
    for name in files:
        with open(name, "rb") as handle:
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
                 concurrency: int = 100) -> EnrichPlan:
    """Check every argument that can be checked without Spark; raise :class:`EnrichError` if one is wrong.

    Example::

        check_enrich("in.json", "out.json", url="http://h/item/{id}", schema="name STRING",
                     on_error="row", overwrite=True).added   # ['name']
    """
    from ..connectors import HttpLookup
    from ..lookup.schema import parse_schema

    if is_local(input_path) and not os.path.exists(local_path(input_path)):
        raise EnrichError(f"the input {input_path!r} does not exist (looked in {os.getcwd()})")
    in_format = guess_format(input_path, input_format, "input")
    out_name = os.path.basename(output_path.rstrip("/"))
    out_format = output_format or (guess_format(output_path, None, "output") if "." in out_name else in_format)
    if out_format not in FORMATS:
        raise EnrichError(f"output format must be one of {FORMATS}, got {out_format!r}")
    try:
        fields = parse_schema(schema)
        source = HttpLookup(url, schema, max_connections=concurrency)
    except ValueError as exc:  # SchemaError (a bad --schema) or a bad URL template
        raise EnrichError(str(exc).replace("url_template", "--url")) from None
    keys = list(source.key_columns)
    columns: list[str] | None = None
    if is_local(input_path):
        columns, complete = input_columns(input_path, in_format)
        missing = [k for k in keys if k not in columns]
        if missing and complete:
            raise EnrichError(f"--url uses {missing}, not {'a column' if len(missing) == 1 else 'columns'} of "
                              f"{input_path}: its columns are {columns}")
    added = [f.name for f in fields if f.name not in keys]
    clashes = [c for c in added if c in (columns or [])]
    if clashes:
        raise EnrichError(f"--schema columns {clashes} are input columns already: rename them in --schema "
                          "(the response field must carry the same name) or drop them from the input")
    if on_error == "row":
        if ERROR_COLUMN in (columns or []) or ERROR_COLUMN in added:
            raise EnrichError(f"--on-error row adds a column {ERROR_COLUMN!r}, which the input or --schema "
                              "already has: rename that column first")
    if output_path.rstrip("/") == input_path.rstrip("/"):
        raise EnrichError("OUTPUT is the INPUT: write the enriched data somewhere else")
    if is_local(output_path) and os.path.exists(local_path(output_path)) and not overwrite:
        raise EnrichError(f"the output {output_path!r} exists: pass --overwrite to replace it (it is replaced "
                          "only once the new output is complete), or choose another path")
    return EnrichPlan(input_path, output_path, in_format, out_format, columns, source, added)
