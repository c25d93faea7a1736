"""key_hash: Python's hash partition of a key is Spark's ``pmod(hash(cols), B)`` for every join type."""
from __future__ import annotations

import datetime
import decimal
import random
import re

import pyarrow as pa
import pytest

from aiospark.spark.key_hash import key_partition, spark_hash
from aiospark.spark.table_route import JOIN_TYPES


def _values(rng: random.Random) -> dict[str, list]:
    text = ["", "a", "ab", "abc", "abcd", "abcde", "é", "日本語", "\x00", "ÿ" * 7, "x" * 33,
            *["".join(rng.choice("aZ09 é日\U0001f600") for _ in range(rng.randrange(12))) for _ in range(40)]]
    longs = [0, 1, -1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), *[rng.randrange(-(2**63), 2**63) for _ in range(40)]]
    ints = [0, 1, -1, 2**31 - 1, -(2**31), *[rng.randrange(-(2**31), 2**31) for _ in range(40)]]
    return {
        "b": [True, False, None],
        "t": [0, 1, -1, 127, -128, None],
        "s": [0, 1, -1, 32767, -32768, None],
        "i": [*ints, None],
        "l": [*longs, None],
        "str": [*text, None],
        "bin": [t.encode() for t in text] + [bytes([200, 1, 255]), bytes(range(256)), None],
        "d": [datetime.date(1970, 1, 1), datetime.date(1, 1, 1), datetime.date(9999, 12, 31),
              datetime.date(1969, 12, 31), datetime.date(2026, 12, 1), None],
        "dec": [decimal.Decimal("0.00"), decimal.Decimal("-1.27"), decimal.Decimal("1.28"),
                decimal.Decimal("-1.29"), decimal.Decimal("9999999999999999.99"), None],
        "big": [decimal.Decimal("0.000"), decimal.Decimal("-0.128"), decimal.Decimal("0.127"),
                decimal.Decimal("99999999999999999999999999999999999.999"),
                decimal.Decimal("-99999999999999999999999999999999999.999"), decimal.Decimal("12345678901234567.890"),
                None],
    }


def _types(df) -> list[pa.DataType]:
    """The Arrow types of a DataFrame's columns, as the route's tasks get them."""
    from aiospark.spark.schema import arrow_schema

    return list(arrow_schema(df.schema).types)


SCHEMA = ("b BOOLEAN, t TINYINT, s SMALLINT, i INT, l BIGINT, str STRING, bin BINARY, d DATE, "
          "dec DECIMAL(18,2), big DECIMAL(38,3)")


@pytest.mark.parametrize("buckets", [1, 2, 7, 200])
def test_each_join_type_hashes_as_spark_does(spark, buckets):
    from pyspark.sql import functions as F

    values = _values(random.Random(buckets))
    rows = []
    for name, column in values.items():
        for value in column:
            row = dict.fromkeys(values)
            row[name] = value
            rows.append(row)
    df = spark.createDataFrame(rows, SCHEMA)
    for name in values:
        [arrow] = _types(df.select(name))
        for value, p, h in df.select(name, F.pmod(F.hash(name), F.lit(buckets)), F.hash(name)).collect():
            assert spark_hash([value], [arrow]) == h, (name, value)
            assert key_partition([pa.scalar(value, arrow)], buckets) == p, (name, value)


def test_several_columns_and_nulls_chain_as_spark_does(spark):
    from pyspark.sql import functions as F

    rng = random.Random(5)
    values = _values(rng)
    names = list(values)
    rows = [{n: rng.choice(values[n]) for n in names} for _ in range(300)]
    df = spark.createDataFrame(rows, SCHEMA)
    for chosen in (["l", "str"], ["str", "b", "d"], names, ["big", "i", "bin"]):
        types = _types(df.select(*chosen))
        for *key, p in df.select(*chosen, F.pmod(F.hash(*chosen), F.lit(13))).collect():
            assert key_partition([pa.scalar(v, t) for v, t in zip(key, types)], 13) == p, key


def test_every_join_type_is_compared_and_other_types_are_refused():
    """The comparisons above cover every type the table route joins on (a new join type needs its
    hash); a type outside them raises rather than naming a folder Spark would not have chosen."""
    compared = {name.lower() for name in re.findall(r"(?:^|, )\w+ ([A-Z]+)", SCHEMA)}
    assert JOIN_TYPES | {"decimal"} <= compared, compared
    for arrow in (pa.float64(), pa.timestamp("us"), pa.list_(pa.int64()), pa.uint32()):
        with pytest.raises(TypeError, match="no Spark hash"):
            spark_hash([1], [arrow])
