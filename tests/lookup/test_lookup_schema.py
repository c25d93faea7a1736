import datetime as dt
import decimal

import pytest

from aiospark.lookup import RowMapper, SchemaError, parse_schema


def test_parse_simple_and_nested():
    f = parse_schema("id BIGINT, `my col` STRING NOT NULL, d DECIMAL(10, 2), "
                     "tags ARRAY<STRING>, m MAP<STRING, INT> COMMENT 'x, y', s: string")
    assert [x.name for x in f] == ["id", "my col", "d", "tags", "m", "s"]
    assert [x.base_type for x in f] == ["BIGINT", "STRING", "DECIMAL", "ARRAY", "MAP", "STRING"]


@pytest.mark.parametrize("ddl, match", [
    ("", "non-empty"),
    ("   ", "non-empty"),
    ("a INT,", "empty column"),
    ("a", "expected 'name TYPE'"),
    ("a FOO", "unknown type"),
    ("a INT, A STRING", "duplicate"),
    ("a ARRAY<INT", "unbalanced"),
])
def test_parse_errors(ddl, match):
    with pytest.raises(SchemaError, match=match):
        parse_schema(ddl)


def test_row_mapper_converts_and_fills_missing():
    m = RowMapper(parse_schema("i INT, f DOUBLE, b BOOLEAN, s STRING, d DECIMAL(5,2), "
                               "day DATE, ts TIMESTAMP, a ARRAY<INT>, x STRING"))
    row = m.row({"i": "42", "f": "1.5", "b": "true", "s": 7, "d": "3.10", "day": "2024-02-03",
                 "ts": "2024-02-03T04:05:06Z", "a": "[1, 2]", "extra": 1})
    assert row == {"i": 42, "f": 1.5, "b": True, "s": "7", "d": decimal.Decimal("3.10"),
                   "day": dt.date(2024, 2, 3),
                   "ts": dt.datetime(2024, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc),
                   "a": [1, 2], "x": None}


def test_row_mapper_bad_value_names_column():
    m = RowMapper(parse_schema("age INT"))
    with pytest.raises(ValueError, match="column 'age'.*INT"):
        m.row({"age": "old"})
    with pytest.raises(ValueError, match="column 'age'"):
        m.row({"age": 1.5})  # no silent truncation


def test_values_already_of_their_type_are_kept_others_converted():
    mapper = RowMapper(parse_schema("s STRING, n BIGINT, x DOUBLE, b BOOLEAN, d DECIMAL(5,2)"))
    text = "".join(["pe", "n"])  # a str object of its own: kept as that very object
    row = mapper.row({"s": text, "n": 7, "x": 2, "b": True, "d": "1.50"})
    assert row["s"] is text and row == {"s": "pen", "n": 7, "x": 2.0, "b": True, "d": decimal.Decimal("1.50")}
    assert type(row["x"]) is float  # an int for a DOUBLE column is converted, not kept
    # a bool is not kept for a BIGINT column (bool is an int subclass): converted as before
    assert mapper.row({"n": True})["n"] == 1 and type(mapper.row({"n": True})["n"]) is int
    with pytest.raises(ValueError, match="column 'n'"):
        mapper.row({"n": "seven"})
