"""Key conversion agrees with Spark SQL's own casts, value by value, on a real Spark session."""
from __future__ import annotations

import math

import pytest

from aiospark.lookup import keys

STRINGS = ["1", " 1 ", "\t1\n", "1\x00", "+1", "-1", "-0", "01", "007", "1_0", "1_2_3", "١", "１", "߁",
           "1.5", "1.0", "1.", ".5", "1e3", "", " ", "2147483647", "2147483648", "-2147483648",
           "-2147483649", "32767", "32768", "9223372036854775807", "9223372036854775808", "NaN",
           "Infinity", "-Infinity", "1\u00a0", "\u20031", "0x10", "+-1", "1 2", "true", "t", "YES",
           "no", "0", "abc"]
DOUBLES = [1.0, 1.5, -0.0, 0.1, 100.0, 1e20, -1e20, 1.5e-5, 123456789.0, 1e7, 9999999.0, 0.001, 0.0001,
           2.5e300, 2.0 ** 31, 2.0 ** 63, float("nan"), float("inf"), float("-inf")]


def ours(fn, value):
    try:
        return fn(value)
    except keys.KeyMismatch:
        return None


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def test_strings_convert_as_sparks_try_cast(spark):
    df = spark.createDataFrame([(s,) for s in STRINGS], "s STRING")
    rows = df.selectExpr("s", "try_cast(s AS SMALLINT) sm", "try_cast(s AS INT) i", "try_cast(s AS BIGINT) b",
                         "try_cast(s AS DOUBLE) d", "try_cast(s AS BOOLEAN) bo").collect()
    assert [r.s for r in rows] == STRINGS
    wrong = []
    for r in rows:
        for column, mine in (("sm", ours(lambda v: keys.to_int(v, 16), r.s)),
                             ("i", ours(lambda v: keys.to_int(v, 32), r.s)),
                             ("b", ours(lambda v: keys.to_int(v, 64), r.s)),
                             ("d", ours(keys.to_float, r.s)), ("bo", ours(keys.to_bool, r.s))):
            if not same(mine, r[column]):
                wrong.append((r.s, column, r[column], mine))
    assert wrong == []


def test_doubles_print_as_sparks_cast_to_string(spark):
    df = spark.createDataFrame([(d,) for d in DOUBLES], "d DOUBLE")
    rows = df.selectExpr("CAST(d AS STRING) s").collect()
    assert [keys.to_text(d) for d in DOUBLES] == [r.s for r in rows]


def test_other_types_print_as_sparks_cast_to_string(spark):
    row = spark.sql("SELECT CAST(true AS STRING) bo, CAST(DATE'2024-01-02' AS STRING) d, "
                    "CAST(1.50BD AS STRING) dec, CAST(CAST(100 AS DECIMAL(10,0)) AS STRING) dec0, "
                    "true AS bov, DATE'2024-01-02' AS dv, 1.50BD AS decv, CAST(100 AS DECIMAL(10,0)) AS dec0v"
                    ).collect()[0]
    assert keys.to_text(row.bov) == row.bo and keys.to_text(row.dv) == row.d
    assert keys.to_text(row.decv) == row.dec and keys.to_text(row.dec0v) == row.dec0


def test_numbers_match_integers_by_value_as_sparks_equality(spark):
    # a DOUBLE key joined to an INT key column: Spark compares after widening the INT to DOUBLE
    values = [1.0, 1.5, -0.0, 2.0 ** 31, float("nan"), float("inf")]
    df = spark.createDataFrame([(v,) for v in values], "d DOUBLE")
    rows = df.selectExpr("d", "d = CAST(try_cast(d AS BIGINT) AS DOUBLE) AS whole").collect()
    for r in rows:
        expect_match = bool(r.whole) and -2**31 <= r.d < 2**31
        assert (ours(lambda v: keys.to_int(v, 32), r.d) is not None) == expect_match, r.d


@pytest.mark.parametrize("value, bits, expected", [
    (True, 32, 1), (2**31, 32, None), (2**31 - 1, 32, 2**31 - 1), (-2**63, 64, -2**63), (2**63, 64, None),
    (b"12", 32, 12), (b"\xff", 32, None),
])
def test_int_edges(value, bits, expected):
    assert ours(lambda v: keys.to_int(v, bits), value) == expected


def test_text_refuses_what_has_no_session_independent_form():
    import datetime

    with pytest.raises(keys.KeyNotRenderable, match="cast the key column to STRING"):
        keys.to_text(datetime.datetime(2024, 1, 2, 3, 4))
    assert ours(keys.to_text, b"\xff") is None and keys.to_text(b"caf\xc3\xa9") == "café"
