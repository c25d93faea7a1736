"""The strict DDL parser (aiospark.lookup.ddl) against Spark's own: every schema it accepts, Spark
parses to the same columns; what Spark refuses, it refuses too -- before any JVM starts."""
from __future__ import annotations

import subprocess
import sys
import time

import pyspark
import pytest

from aiospark.lookup import SchemaError, parse_schema
from aiospark.spark.compat import parse_ddl, version_tuple

ACCEPTED = [
    "name STRING, value BIGINT",
    "a: INT, b STRING",
    "a INT NOT NULL COMMENT 'x, y', b string comment \"q\"",
    pytest.param("b string comment \"q\" 'r'", marks=pytest.mark.skipif(  # adjacent literals concatenate
        version_tuple(pyspark.__version__) < (4, 0), reason="Spark 3.5's parser takes one literal")),
    "`my col` STRING, `we``ird` INT, `a-b` DOUBLE",
    "select INT, not INT, comment STRING, struct INT, `null` INT",
    "t TINYINT, b BYTE, s SMALLINT, sh SHORT, i INTEGER, l LONG, f FLOAT, r REAL, d DOUBLE",
    "d DECIMAL, e DEC(5), n NUMERIC(38, 38), x decimal(10,2)",
    "c CHAR(3), cc CHARACTER(4), v VARCHAR(10)",
    "d DATE, t TIMESTAMP, n TIMESTAMP_NTZ, l timestamp_ltz, b BINARY, o BOOLEAN, v VOID",
    pytest.param("j VARIANT", marks=pytest.mark.skipif(version_tuple(pyspark.__version__) < (4, 0),
                                                       reason="VARIANT is Spark 4's")),
    "tags ARRAY<STRING>, nested ARRAY<ARRAY<INT>>, m MAP<STRING, ARRAY<BIGINT>>",
    "s STRUCT<>, t STRUCT< >, u struct<a: int not null comment 'c', `b c` map<string,struct<d:double>>>",
    "  padded\tSTRING ,\n other  INT  ",
    "_x INT, x_1 STRING",
]

REFUSED_BY_BOTH = [
    "name STRING value BIGINT", "a INT,", "a", ",a INT", "a BOOL", "a NULL", "a FOO", "a CHAR",
    "a DECIMAL(39,0)", "a DECIMAL(5,6)", "a ARRAY<INT", "a ARRAY<INT>>", "a MAP<STRING>", "a-b INT",
    "a INT NOT", "a INT COMMENT", "é INT", "a INT DEFAULT 1", "a STRUCT<b INT c INT>", "`a INT", "a INT)",
]

#: Spark takes these; the strict parser refuses them (ambiguous, or nothing downstream handles them)
REFUSED_BY_US_ONLY = ["1a INT", "a INT -- note", "a INTERVAL DAY", "a STRING COLLATE UTF8_LCASE",
                      "a TIMESTAMP WITHOUT TIME ZONE"]


def spark_columns(spark, ddl):
    """What Spark's own parser makes of ``ddl`` (the session's, on every supported PySpark)."""
    parsed = parse_ddl(spark, ddl)
    return [(f.name, f.dataType.simpleString()) for f in parsed.fields]


def ours(ddl):
    return [(f.name, f.type.lower().replace(" ", "")) for f in parse_schema(ddl)]


@pytest.mark.parametrize("ddl", ACCEPTED)
def test_what_we_accept_spark_parses_to_the_same_columns(spark, ddl):
    expected = [(n, t.replace(" ", "")) for n, t in spark_columns(spark, ddl)]
    assert ours(ddl) == expected
    # lookup_join declares array<struct<SCHEMA>>: the same text must parse there too
    nested = parse_ddl(spark, f"array<struct<{ddl}>>").elementType
    assert [f.name for f in nested.fields] == [n for n, _ in expected]


@pytest.mark.parametrize("ddl", REFUSED_BY_BOTH)
def test_what_spark_refuses_we_refuse_up_front(spark, ddl):
    with pytest.raises(SchemaError):
        parse_schema(ddl)
    with pytest.raises(Exception):
        spark_columns(spark, ddl)


@pytest.mark.parametrize("ddl", REFUSED_BY_US_ONLY)
def test_refused_though_spark_takes_it(ddl):
    with pytest.raises(SchemaError):
        parse_schema(ddl)


def test_missing_comma_names_the_fix():
    with pytest.raises(SchemaError) as info:
        parse_schema("name STRING value BIGINT")
    message = str(info.value)
    assert "'name STRING' is followed by 'value', not by a comma" in message
    assert "'name STRING, value BIGINT'" in message


def test_missing_comma_refused_by_the_cli_before_spark(tmp_path):
    from tests.cli.test_cli import no_java_env

    (tmp_path / "in.csv").write_text("id\na\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "aiospark.app.cli", "enrich", "in.csv", "out.parquet",
                           "--url", "http://127.0.0.1:9/item/{id}", "--schema", "name STRING value BIGINT"],
                          capture_output=True, text=True, timeout=120, env=no_java_env(), cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "separate columns with a comma, e.g. 'name STRING, value BIGINT'" in lines[0]
    for internal in ("_aiospark", "_MarkedHttp", "Traceback", "BOOLEAN"):
        assert internal not in done.stderr
    assert elapsed < 60, elapsed  # generous: no Spark (it cannot start here) and no job ran
