"""``aiospark enrich``'s input: read it with every malformed line marked, never dropped or guessed.

Spark's CSV and JSON readers in their default PERMISSIVE mode turn a malformed line into a row
silently: a CSV line with extra fields loses them, one with an unterminated quote reads as if the
quote closed at the end of the line, a broken JSON line becomes a row of NULLs. Here every row
carries ``MALFORMED``: NULL for a good row, else why its line is malformed and the line itself
(truncated), and ``RAW``, the line as read (for naming its line number on the driver).

* CSV is read as text lines and parsed with ``from_csv`` (the reader's own parser, Spark's
  inferred types, ``columnNameOfCorruptRecord``), so every row keeps its raw line: a line whose
  fields do not match the header or the inferred types is marked, and so is one with a quote that
  never closes -- which Spark's parser cannot see (it ends the field at the end of the line).
* JSON is read with the inferred schema plus a corrupt-record column. Spark refuses a query on a
  raw JSON file that needs only that column, so queries here always name other columns too.

Example::

    df, columns = read_marked(spark, "in.csv", "csv")
    df.where(df[MALFORMED].isNotNull()).select(*columns, MALFORMED).show()
"""
from __future__ import annotations

import os
from typing import Any

from .enrich_base import quoted
from .enrich_checks import EnrichError, _data_files, check_same_headers, is_local, local_path, open_text

#: why a row's input line is malformed (NULL for a good row)
MALFORMED = "_aiospark_malformed"
#: the input line as read (NULL for a good row)
RAW = "_aiospark_raw"
_CORRUPT = "_aiospark_corrupt"
_FILE, _START, _ID = "_aiospark_file", "_aiospark_block", "_aiospark_line_id"
_SHOWN = 120  # characters of a malformed line shown in an error
# One CSV line whose every field is either quoted and closed ("...", a backslash escaping any
# character, as Spark's default escape does) or unquoted. A field that opens a quote and never
# closes it fails to match. Possessive quantifiers keep Java's regex engine from backtracking.
_FIELD = r'(?:"(?:[^"\\]|\\.)*+"[^,]*+|(?!")[^,]*+)'
CLOSED_QUOTES = rf"^{_FIELD}(?:,{_FIELD})*+$"
#: how a line with a quote it never closes is marked
UNCLOSED = "malformed CSV line (a quote that never closes): "


def _shown(column: Any) -> Any:
    from pyspark.sql import functions as F

    cut = F.concat(F.substring(column, 1, _SHOWN - 3), F.lit("..."))
    return F.concat(F.lit("'"), F.when(F.length(column) > _SHOWN, cut).otherwise(column), F.lit("'"))


def _ddl(fields: list[Any]) -> str:
    return ", ".join(f"`{f.name.replace('`', '``')}` {f.dataType.simpleString()}" for f in fields)


def _read_csv(spark: Any, path: str, declared: Any) -> tuple[Any, list[str]]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField

    if declared is None:  # every column a string: values reach the service and OUTPUT as written
        names = spark.read.option("header", "true").csv(path).schema.fieldNames()
        lines = spark.read.text(path)
        partitions = [c for c in lines.columns if c != "value"]  # key=value directories, as the CSV reader adds
        fields = [StructField(n, StringType()) for n in names if n not in partitions]
    else:
        lines = spark.read.text(path)
        partitions = [c for c in lines.columns if c != "value"]
        fields = [f for f in declared.fields if f.name not in partitions]
    lines = _without_headers(lines.where(F.trim("value") != ""), path)  # the CSV reader skips empty lines too
    options = {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}
    parsed = lines.select(F.from_csv("value", _ddl(fields + [StructField(_CORRUPT, StringType())]),
                                     options).alias("r"), "value", *partitions)
    value = F.col("value")
    why = (F.when(~value.rlike(CLOSED_QUOTES), F.concat(F.lit(UNCLOSED),
                                                         _shown(value)))
           .when(F.col("r").getField(_CORRUPT).isNotNull(),
                 F.concat(F.lit(f"malformed CSV line (its fields do not match the header's {len(fields)} "
                                "columns or their types): "), _shown(value))))
    columns = [f.name for f in fields] + partitions
    df = parsed.select(*[F.col("r").getField(f.name).alias(f.name) for f in fields], *partitions,
                       why.alias(MALFORMED), F.when(why.isNotNull(), value).alias(RAW))
    return df, columns


def _read_csv_records(spark: Any, path: str, declared: Any) -> tuple[Any, list[str]]:
    """``--multiline``: Spark's CSV reader with ``multiLine`` (a quoted field may hold line breaks), string
    columns unless declared; a record Spark cannot parse is marked with its text."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    reader = spark.read.option("header", "true").option("multiLine", "true")
    probe = reader.csv(path)  # the header's names, then the key=value partition columns the reader adds
    partitions = [c for c in spark.read.text(path).columns if c != "value"]
    if declared is None:
        fields = [StructField(n, StringType()) for n in probe.columns if n not in partitions]
    else:
        fields = [f for f in declared.fields if f.name not in partitions]
    schema = StructType(fields + [StructField(_CORRUPT, StringType())])
    reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT)
    if declared is None:  # each file's header must name these columns (a remote input's files are not
        reader = reader.option("enforceSchema", "false")  # compared before Spark): else the job fails
    df = reader.schema(schema).csv(path)
    corrupt = F.col(_CORRUPT)
    why = F.when(corrupt.isNotNull(), F.concat(
        F.lit(f"malformed CSV record (its fields do not match the header's {len(fields)} columns or their types): "),
        _shown(corrupt)))
    columns = [f.name for f in fields] + partitions
    return df.select(*[F.col(quoted(c)) for c in columns], why.alias(MALFORMED), corrupt.alias(RAW)), columns


def _without_headers(lines: Any, path: str) -> Any:
    """``lines`` without each file's header: its first non-empty line, as Spark's CSV reader drops
    it (only that line: a data line that reads like the header stays). Files whose headers differ
    are refused (:func:`.enrich_checks.check_same_headers`)."""
    from pyspark.sql import functions as F

    numbered = lines.select("*", F.col("_metadata.file_path").alias(_FILE),
                            F.col("_metadata.file_block_start").alias(_START),
                            F.monotonically_increasing_id().alias(_ID))
    # a file's header is in the split that starts at byte 0, read in order: its smallest row id there
    firsts = (numbered.where(F.col(_START) == 0).groupBy(_FILE)
              .agg(F.min(_ID).alias("id"), F.min_by("value", _ID).alias("header")).collect())
    check_same_headers({r[_FILE]: r["header"] for r in sorted(firsts, key=lambda r: r[_FILE])})
    ids = [r["id"] for r in firsts]
    kept = numbered.where(~F.col(_ID).isin(ids)) if ids else numbered
    return kept.drop(_FILE, _START, _ID)


def _strings(kind: Any) -> Any:
    """``kind`` with every floating-point and decimal number read as its text (nested ones too)."""
    from pyspark.sql import types as T

    if isinstance(kind, (T.DoubleType, T.FloatType, T.DecimalType)):
        return T.StringType()
    if isinstance(kind, T.StructType):
        return T.StructType([T.StructField(f.name, _strings(f.dataType), f.nullable) for f in kind.fields])
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(_strings(kind.elementType), kind.containsNull)
    if isinstance(kind, T.MapType):
        return T.MapType(kind.keyType, _strings(kind.valueType), kind.valueContainsNull)
    return kind


def _text_lost(inferred: Any, declared: Any, name: str) -> list[str]:
    """The columns (dotted paths) where ``declared`` reads as a string what ``inferred`` found to be
    a number with a fraction or an exponent."""
    from pyspark.sql import types as T

    if isinstance(inferred, (T.DoubleType, T.FloatType)) or (isinstance(inferred, T.DecimalType) and inferred.scale):
        return [name] if isinstance(declared, T.StringType) else []  # (an integer's text is copied as written)
    if isinstance(inferred, T.StructType) and isinstance(declared, T.StructType):
        kinds = {f.name: f.dataType for f in declared.fields}
        return [lost for f in inferred.fields if f.name in kinds
                for lost in _text_lost(f.dataType, kinds[f.name], f"{name}.{f.name}" if name else f.name)]
    if isinstance(inferred, T.ArrayType) and isinstance(declared, T.ArrayType):
        return _text_lost(inferred.elementType, declared.elementType, f"{name}[]")
    if isinstance(inferred, T.MapType) and isinstance(declared, T.MapType):
        return _text_lost(inferred.valueType, declared.valueType, f"{name}{{}}")
    return []


def _keeps_number_text(spark: Any) -> bool:
    """Whether this Spark's JSON file reader reads a number into a string column as its text
    (``1.10`` stays ``1.10``): Spark 4's ``spark.sql.json.enableExactStringParsing``, on by default.
    Spark 3.5 has no such setting and reads it as a double first (``1.1``; ``1e2`` becomes ``100.0``)."""
    try:
        # no default given: Spark would return that default instead of its own when the key is unset
        return str(spark.conf.get("spark.sql.json.enableExactStringParsing")).lower() == "true"
    except Exception:  # Spark 3.5 (no such key), or a session that refuses to say: refuse, never change
        return False


def _read_json(spark: Any, path: str, declared: Any) -> tuple[Any, list[str]]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    inferred = None
    if declared is None:
        # JSON says what a string, a boolean, an integer is; a number with a fraction or an exponent
        # is kept as its text (1.10 stays 1.10, 1e400 stays 1e400), as Spark reads a number into a
        # string column: as a double it would lose digits, as a decimal its scale (or fail on 1e2)
        inferred = spark.read.option("columnNameOfCorruptRecord", _CORRUPT).json(path).schema
        fields = [StructField(f.name, _strings(f.dataType), f.nullable)
                  for f in inferred.fields if f.name != _CORRUPT]
    else:
        fields = list(declared.fields)
    _refuse_lost_text(spark, path, inferred, StructType(fields))
    schema = StructType(fields + [StructField(_CORRUPT, StringType())])
    df = spark.read.schema(schema).option("columnNameOfCorruptRecord", _CORRUPT).json(path)
    corrupt = F.col(_CORRUPT)
    why = F.when(corrupt.isNotNull(), F.concat(F.lit("malformed JSON line: "), _shown(corrupt)))
    columns = [f.name for f in fields]
    return df.select(*[F.col(quoted(c)) for c in columns], why.alias(MALFORMED), corrupt.alias(RAW)), columns


def _refuse_lost_text(spark: Any, path: str, inferred: Any, schema: Any) -> None:
    """Refuse, before any call, string columns that would get a fractional JSON number's text
    changed: Spark 3.5 cannot read it as written (values reach the service and OUTPUT exactly as
    written, or the run does not start)."""
    from pyspark.sql.types import StringType

    if inferred is not None:
        lost = _text_lost(inferred, schema, "")
        if not lost or _keeps_number_text(spark):
            return
    else:  # declared types: where the JSON holds fractional numbers is read from the data
        if not any(_holds(f.dataType, StringType) for f in schema.fields) or _keeps_number_text(spark):
            return
        lost = _text_lost(spark.read.option("columnNameOfCorruptRecord", _CORRUPT).json(path).schema, schema, "")
    if lost:
        import pyspark

        shown = ", ".join(lost[:5]) + (f" (and {len(lost) - 5} more)" if len(lost) > 5 else "")
        raise EnrichError(
            f"the JSON input's {shown} hold numbers with a fraction or an exponent, which PySpark "
            f"{pyspark.__version__} reads only as doubles into a text column (1.10 would reach the service and "
            f"OUTPUT as 1.1, 1e2 as 100.0): declare their types with --input-schema (e.g. "
            f"\"{lost[0].split('.')[0].split('[')[0]} DOUBLE\" to send the double's text, or a DECIMAL), or run "
            f"on PySpark 4, which keeps the text as written")


def _holds(kind: Any, wanted: type) -> bool:
    """Whether ``kind`` is, or nests, an instance of ``wanted``."""
    from pyspark.sql import types as T

    if isinstance(kind, wanted):
        return True
    if isinstance(kind, T.StructType):
        return any(_holds(f.dataType, wanted) for f in kind.fields)
    if isinstance(kind, T.ArrayType):
        return _holds(kind.elementType, wanted)
    if isinstance(kind, T.MapType):
        return _holds(kind.valueType, wanted)
    return False


def read_marked(spark: Any, path: str, fmt: str, input_schema: str | None = None,
                multiline: bool = False) -> tuple[Any, list[str]]:
    """The input with ``MALFORMED`` and ``RAW`` columns, and the input's own column names. CSV
    columns are strings and JSON's fractional numbers their text, unless ``input_schema`` (DDL)
    declares the columns and their types. ``multiline``: CSV records may span lines (a quoted field
    holding a line break), read with Spark's ``multiLine`` option.

    Example::

        df, columns = read_marked(spark, "in.json", "json")   # columns: ['id', 'qty']
    """
    from pyspark.sql import functions as F

    declared = None
    if input_schema is not None:
        from ..spark.schema import parse_schema as spark_schema

        try:
            declared = spark_schema(spark, input_schema, what="--input-schema")
        except ValueError as exc:
            raise EnrichError(str(exc)) from None
    if fmt == "csv":
        return _read_csv_records(spark, path, declared) if multiline else _read_csv(spark, path, declared)
    if fmt == "json":
        return _read_json(spark, path, declared)
    df = spark.read.format(fmt).load(path)
    none = F.lit(None).cast("string")
    return df.select(*[F.col(quoted(c)) for c in df.columns], none.alias(MALFORMED), none.alias(RAW)), df.columns


def refuse_malformed(df: Any, columns: list[str], path: str, shown: int = 5) -> None:
    """Raise :class:`EnrichError` naming the first malformed lines (with their line numbers when the
    input is local), if there are any. One pass over the input, before any call is made."""
    from pyspark.sql import functions as F

    bad = df.where(F.col(MALFORMED).isNotNull())
    # the whole row, not the marks alone: Spark refuses a JSON query that needs only the corrupt column
    first = bad.select(*[F.col(quoted(c)) for c in columns], MALFORMED, RAW).limit(shown).collect()
    if not first:
        return
    # counted through the RDD, which keeps every selected column (an aggregate would be pruned down to
    # the corrupt column alone, which Spark refuses); only malformed rows travel
    total = bad.select(*[F.col(quoted(c)) for c in columns], MALFORMED).rdd.count() if len(first) == shown else len(first)
    where = line_numbers(path, [r[RAW] for r in first]) if is_local(path) else {}
    lines = [f"  {where.get(r[RAW], 'a line')}: {r[MALFORMED]}" for r in first]
    more = f" ({total - len(first):,} more not shown)" if total > len(first) else ""
    # a quote left open at the end of a line is, in a valid CSV file, a field holding a line break
    multiline = any(str(r[MALFORMED]).startswith(UNCLOSED) for r in first)
    hint = ("\n  if a quoted field holds a line break, pass --multiline to read records that span lines"
            if multiline else "")
    raise EnrichError(f"{path} has {total:,} malformed line(s); nothing was written and no call was made{more}:\n"
                      + "\n".join(lines) + hint
                      + "\n  fix them, or pass --on-error row to write them as error rows (column _error)")


def line_numbers(path: str, raws: list[str]) -> dict[str, str]:
    """``'line N of FILE'`` for each raw line, found by reading the local input's files in order."""
    wanted = {r for r in raws if r is not None}
    found: dict[str, str] = {}
    root = local_path(path)
    for name in _data_files(root):
        handle = open_text(name)
        if handle is None:
            continue
        with handle:
            for number, line in enumerate(handle, 1):
                text = line.rstrip("\r\n")
                if text in wanted and text not in found:
                    shown = name if os.path.isdir(root) else path
                    found[text] = f"line {number} of {shown}"
                    if len(found) == len(wanted):
                        return found
    return found
