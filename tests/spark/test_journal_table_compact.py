"""``aiospark journal --compact`` on the table route's Parquet files (issue 48, item 5): runs that
added keys, overlapping writers and calls of 0, 1 or 3 rows become one file per partition; every
answer stays, a rerun partitioned another way calls nothing, a DataFrame defined before the
compaction fails loudly rather than paying again."""
from __future__ import annotations

import glob
import os
from collections import Counter

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark import AsyncFunction
from aiospark.app.cli import main
from tests.support.call_log import log_call, logged

SCHEMA = "k LONG, i INT"


class Many(AsyncFunction):
    """0, 1 or 3 rows per input, by the key (``k % 3``)."""

    def __init__(self, log: str):
        self.log = log

    async def async_invoke(self, row):
        log_call(self.log, [row["k"]])
        return [{"k": row["k"], "i": i} for i in range({0: 0, 1: 1, 2: 3}[row["k"] % 3])]


def rows_of(spark, keys: int, parts: int = 3):
    return spark.range(0, 2 * keys, 1, parts).select("id", (F.col("id") % keys).alias("k"))


def expected(keys: int) -> Counter:
    return Counter((k % keys, i) for k in range(2 * keys) for i in range({0: 0, 1: 1, 2: 3}[k % keys % 3]))


def files(loc: str) -> list[str]:
    return glob.glob(os.path.join(loc, "*", "table", "**", "*.parquet"), recursive=True)


@pytest.fixture
def ended(monkeypatch):
    """Runs count as ended at once (not a minute after their last file). Setting files' times back
    instead would end each run before it was defined, which no clock does."""
    monkeypatch.setattr("aiospark.journal.table_compact.TABLE_QUIET_SECONDS", 0.0)


def run(spark, df, log, loc):
    return Counter(tuple(r) for r in aiospark.unordered_wait(
        df, Many(log), SCHEMA, journal=aiospark.Journal(loc, key="k", buckets=4)).collect())


def test_runs_compact_to_one_file_per_partition_and_a_rerun_calls_nothing(spark, tmp_path, capsys, monkeypatch):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    assert run(spark, rows_of(spark, 300), log, loc) == expected(300)
    assert run(spark, rows_of(spark, 500, parts=2), log, loc) == expected(500)  # 200 new keys
    # two definitions before either ran: both record keys 500-549 (writers that overlapped)
    one, two = (aiospark.unordered_wait(rows_of(spark, 550), Many(log), SCHEMA,
                                        journal=aiospark.Journal(loc, key="k", buckets=4)) for _ in range(2))
    assert Counter(tuple(r) for r in one.collect()) == expected(550)
    assert Counter(tuple(r) for r in two.collect()) == expected(550)
    calls = len(logged(log))
    assert calls == 300 + 200 + 2 * 50
    before = files(loc)
    assert len(before) > 4
    assert main(["journal", loc]) == 0
    shown = capsys.readouterr().out
    assert "--compact makes it one segment per bucket and one table file per partition" in shown, shown
    assert "550 results" in shown.replace(",", ""), shown

    assert main(["journal", loc, "--compact"]) == 0
    shown = capsys.readouterr().out
    assert f"left {len(before)} table files of runs written in the last 60 s" in shown, shown
    assert sorted(files(loc)) == sorted(before), "runs that ended a moment ago may still be writing"
    monkeypatch.setattr("aiospark.journal.table_compact.TABLE_QUIET_SECONDS", 0.0)  # a minute later
    stale = aiospark.unordered_wait(rows_of(spark, 550), Many(log), SCHEMA,
                                    journal=aiospark.Journal(loc, key="k", buckets=4))
    assert main(["journal", loc, "--compact"]) == 0
    shown = capsys.readouterr().out
    assert f"merged {len(before)} table files into 4 (one per partition)" in shown, shown
    assert "550 outcomes kept: 550 results, 0 errors" in shown, shown
    assert "--compact makes it" not in shown and "one table file per partition" in shown, shown
    assert len(files(loc)) == 4

    for n in (1, 5):
        assert run(spark, rows_of(spark, 550).repartition(n), log, loc) == expected(550)
    assert len(logged(log)) == calls, "a rerun after --compact called recorded keys"
    assert run(spark, rows_of(spark, 600), log, loc) == expected(600)
    assert sorted(k for [k] in logged(log)[calls:]) == list(range(550, 600)), "only the new keys"
    # a DataFrame defined before the compaction lists files that are gone: an error, not a rerun's bill
    before_stale = len(logged(log))
    with pytest.raises(Exception, match="(?i)does not exist|FileNotFound|FILE_NOT_EXIST"):
        stale.collect()
    assert len(logged(log)) == before_stale


def test_the_default_key_with_nulls_survives_compaction(spark, tmp_path, capsys, ended):
    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")

    class Echo(AsyncFunction):
        async def async_invoke(self, row):
            log_call(log, [row["key"]])
            return [{"key": row["key"], "v": f"v:{row['key']}"}]

    def data(keys):
        return [(None if i % 4 == 0 else f"k{i % keys}",) for i in range(60)]

    def run(keys, parts):
        df = spark.createDataFrame(data(keys), "key STRING").repartition(parts)
        out = aiospark.unordered_wait(df, Echo(), "key STRING, v STRING", journal=aiospark.Journal(loc, buckets=2))
        assert Counter(tuple(r) for r in out.collect()) == Counter((k, f"v:{k}") for (k,) in data(keys))

    run(7, 2)
    run(13, 3)  # six new keys, in the same two partitions
    assert len(logged(log)) == 14  # thirteen keys and NULL, each once
    assert len(files(loc)) > 2
    assert main(["journal", loc, "--compact"]) == 0
    assert "into 2 (one per partition)" in capsys.readouterr().out
    run(13, 4)
    assert len(logged(log)) == 14, "a rerun after --compact called again"


def test_a_users_files_in_the_table_never_break_a_run_the_cli_or_compaction(spark, tmp_path, capsys, ended,
                                                                           monkeypatch):
    """Files aiospark did not write -- not Parquet at all, or Parquet of another schema -- at the
    table's top, in a schema folder or in a partition folder: the run, ``aiospark journal`` and
    ``--compact`` never open them, count them apart and leave them as they are."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    log, loc = str(tmp_path / "calls"), str(tmp_path / "j")
    assert run(spark, rows_of(spark, 300), log, loc) == expected(300)
    assert run(spark, rows_of(spark, 500, parts=2), log, loc) == expected(500)
    ours = files(loc)
    (table,) = glob.glob(os.path.join(loc, "*", "table"))
    (shape,) = os.listdir(table)
    partition = os.path.dirname(ours[0])
    foreign = [os.path.join(table, "my_notes.parquet"), os.path.join(partition, "my_notes.parquet"),
               os.path.join(table, shape, "mine.parquet")]
    for path in foreign[:2]:
        with open(path, "w") as f:
            f.write("not Parquet")
    pq.write_table(pa.table({"a": [1, 2]}), foreign[2])
    kept = {path: open(path, "rb").read() for path in foreign}

    assert main(["journal", loc]) == 0
    shown = capsys.readouterr().out
    assert "3 not aiospark's" in shown and "500 results" in shown, shown
    assert f"in {len(ours) + 3} table files" in shown and "0 segments" not in shown, shown
    calls = len(logged(log))
    assert run(spark, rows_of(spark, 500).repartition(5), log, loc) == expected(500)
    assert len(logged(log)) == calls

    assert main(["journal", loc, "--compact"]) == 0
    shown = capsys.readouterr().out
    assert f"merged {len(ours)} table files into" in shown and "500 outcomes kept" in shown, shown
    assert "bucket" not in shown.split("merged")[0], shown  # no bucket to speak of on this journal
    monkeypatch.setattr("aiospark.journal.table_compact.TABLE_QUIET_SECONDS", 60.0)  # at once, as a user would
    assert main(["journal", loc, "--compact"]) == 0
    shown = capsys.readouterr().out
    assert "nothing to compact" in shown and "left" not in shown, "compaction's own files are no running job's"
    assert {path: open(path, "rb").read() for path in foreign} == kept
    assert run(spark, rows_of(spark, 500).repartition(2), log, loc) == expected(500)
    assert len(logged(log)) == calls
