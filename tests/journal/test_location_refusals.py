"""Journal locations that cannot be parsed as written: refused where they are defined, saying what
to change and showing no credential (the repr, ``vars()``, the error and its causes,
``aiospark journal``), on a real local Spark and moto's S3-compatible server.
"""
from __future__ import annotations

import traceback
import urllib.parse

import pytest

import aiospark
from aiospark.app.cli import main
from tests.support.s3 import ACCESS_KEY

#: secrets as cloud consoles hand them out: "/" and "+" are common; "#" and "?" happen
RAW = {"slash": "sEcr3t/Plus+Slash/VALUEzz9", "hash": "abc#DEF9secretQ", "qmark": "abc?DEF9secretQ",
       "pct": "abc%zzDEF9secretQ", "space": "abc DEF9secretQ"}
PIECES = ("sEcr3t", "VALUEzz9", "DEF9", "secretQ")


async def ident(row):
    return {"id": row["id"]}


def everything(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def assert_clean(text: str, where: str) -> None:
    shown = [p for p in PIECES if p in text]
    assert not shown, f"a piece of the secret shows in {where}: {text[:600]}"


@pytest.mark.parametrize("name", sorted(RAW))
def test_a_secret_written_unencoded_is_refused_at_definition_without_showing_it(spark, s3, capsys, name):
    """Before: the location was accepted; pyarrow's "Cannot parse URI" (chained), the driver's error,
    the CLI and even repr(Journal) (for '?' and '#') showed the secret."""
    location = (f"s3://{ACCESS_KEY}:{RAW[name]}@{s3.bucket}/j-{name}?endpoint_override={s3.endpoint}"
                "&scheme=http&region=us-east-1")
    with pytest.raises(ValueError, match="URL-encode the access key and the secret") as info:
        journal = aiospark.Journal(location, key="id")
        aiospark.unordered_wait(spark.range(5), ident, "id LONG", journal=journal).collect()
    assert_clean(everything(info.value), "the error")
    assert "environment" in str(info.value) and "Pass a directory" not in str(info.value)
    assert main(["journal", location]) == 2
    out, err = capsys.readouterr()
    assert_clean(out + err, "aiospark journal's output")
    assert "URL-encode" in err

    encoded = location.replace(RAW[name], urllib.parse.quote(RAW[name], safe=""))
    journal = aiospark.Journal(encoded, key="id")
    assert_clean(repr(journal) + repr(vars(journal)) + repr(vars(journal.store)), "the journal's repr and vars()")


def test_a_uri_with_a_space_or_non_ascii_says_how_to_encode_it(tmp_path):
    """Before: refused with "Pass a directory this job may create and write files in", which is not
    what is wrong."""
    for location in (f"file://{tmp_path}/my journal", f"file://{tmp_path}/journal-é",
                     "s3://bucket/my journal?region=us-east-1", "s3://bucket/100%/j"):
        with pytest.raises(ValueError, match="is not a valid URI") as info:
            aiospark.Journal(location)
        assert "Percent-encode" in str(info.value) and "Pass a directory" not in str(info.value)
    journal = aiospark.Journal(f"file://{urllib.parse.quote(str(tmp_path))}/my%20journal")
    assert journal.store.fs[1].endswith("/my journal")
    assert aiospark.Journal(str(tmp_path / "my journal é")).store.fs[1].endswith("my journal é")  # a plain path
