"""Issue 48 through the commands (run in this process, see tests/cli/enrich_support.py): ``aiospark
enrich --journal`` (paid once per job, with or without
``--rate-limit``) and ``aiospark journal LOCATION [--compact]`` over journals written by many runs."""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

import aiospark
from aiospark.app.cli import main
from tests.cli.enrich_support import EchoServer
from tests.spark.test_journal_pay_once import SCHEMA, Call, ans, logged


def parquet_dataset(path, files=3, keys=20):
    """``files`` Parquet files, each holding every key ``k0``..``k{keys-1}``: each file is a partition."""
    path.mkdir()
    for f in range(files):
        pq.write_table(pa.table({"id": [f"k{i}" for i in range(keys)], "n": list(range(keys))}),
                       str(path / f"part-{f}.parquet"))


def enrich(cli, src, out, url, journal, *extra):
    return cli("enrich", str(src), str(out), "--url", url, "--schema", "seen STRING", "--journal",
               str(journal), "--master", "local[2]", "--on-error", "row", *extra)


def test_enrich_with_a_rate_limit_still_pays_each_url_once_per_job(tmp_path, cli):
    """README: "A paid endpoint is paid once with --journal LOCATION (each distinct URL is called once per
    job ...)", shown with --rate-limit 20/s in the very example."""
    src = tmp_path / "in.parquet"
    parquet_dataset(src, files=4)
    with EchoServer(delay=0.5) as server:  # slow enough that tasks holding the same URLs overlap
        url = server.url + "/item/{id}"
        done = enrich(cli, src, tmp_path / "out.json", url, tmp_path / "j", "--rate-limit", "1000/s")
        assert done.returncode == 0, done.stderr[-2000:]
        paid = Counter(server.paths)
    assert len(paid) == 20
    assert sum(paid.values()) == 20, f"{sum(paid.values())} calls for 20 URLs: {paid.most_common(3)}"


def test_enrich_without_a_rate_limit_pays_each_url_once_and_a_csv_rerun_pays_nothing(tmp_path, cli):
    src = tmp_path / "in.parquet"
    parquet_dataset(src)
    csv = tmp_path / "in.csv"
    csv.write_text("id,n\n" + "".join(f"k{i},{i}\n" for i in range(20)) * 2)
    with EchoServer(delay=0.01) as server:
        url = server.url + "/item/{id}"
        done = enrich(cli, src, tmp_path / "out.json", url, tmp_path / "j")
        assert done.returncode == 0, done.stderr[-2000:]
        assert len(server.paths) == 20, Counter(server.paths).most_common(3)
        again = enrich(cli, csv, tmp_path / "out2.json", url, tmp_path / "j")
        assert again.returncode == 0, again.stderr[-2000:]
        assert len(server.paths) == 20, "the CSV rerun of the same URLs paid again"
    # another --url on the same journal is refused: tests/cli/test_enrich_review.py


def test_journal_counts_each_identity_once_across_runs_and_compact_keeps_every_outcome(spark, tmp_path, capsys):
    log, loc = str(tmp_path / "log"), str(tmp_path / "j")
    flag = tmp_path / "fail"
    flag.write_text(" ".join(f"k{i:04d}" for i in range(0, 100, 10)))  # 10 keys fail while the flag is there

    def rows(lo, hi, parts, copies=2):
        return spark.range(0, (hi - lo) * copies, 1, parts).select(
            F.format_string("k%04d", F.col("id") % (hi - lo) + lo).alias("key"))

    def run(df, keep=True, dedup=False, **kw):
        return aiospark.unordered_wait(df, Call(log, fail_file=str(flag)), SCHEMA, on_error="row", dedup=dedup,
                                       journal=aiospark.Journal(loc, key="key", keep_errors=keep, buckets=4),
                                       **kw).collect()

    run(rows(0, 60, 2))       # each key in both partitions: two tasks may both record it
    run(rows(40, 100, 3))     # 20 keys overlap
    run(rows(0, 100, 4, 1).repartition(5))
    called = Counter(logged(log))
    assert set(called) == {repr((f"k{i:04d}",)) for i in range(100)}
    capsys.readouterr()
    assert main(["journal", loc]) == 0
    shown = capsys.readouterr().out
    assert "  outcomes    100: 90 results, 10 errors\n" in shown, shown
    p = aiospark.plan(aiospark.unordered_wait, rows(0, 100, 3), Call(log, fail_file=str(flag)), SCHEMA,
                      on_error="row", journal=aiospark.Journal(loc, key="key", keep_errors=True))
    assert (p.recorded, p.calls) == (100, 0), p

    assert main(["journal", loc, "--compact"]) == 0
    shown = capsys.readouterr().out
    assert "100 outcomes kept: 90 results, 10 errors" in shown and "one segment per bucket" in shown, shown
    n = len(logged(log))
    out = run(rows(0, 100, 3))
    assert len(logged(log)) == n
    assert sum(r._error is not None for r in out) == 20 and all("refused k00" in r._error for r in out if r._error)
    assert all(r.a == ans(r.key) for r in out if r._error is None)

    # the failed keys answered now: a journal without keep_errors calls them again, the results outrank
    flag.unlink()
    try:
        run(rows(0, 100, 2), keep=False, dedup=True)  # each failed key once, though both partitions hold it
    except ValueError as e:
        assert "keep_errors" in str(e), e
        return
    assert len(logged(log)) == n + 10, len(logged(log)) - n
    assert main(["journal", loc]) == 0
    shown = capsys.readouterr().out
    assert "  outcomes    100: 100 results, 0 errors\n" in shown, shown
    assert main(["journal", loc, "--compact"]) == 0
    shown = capsys.readouterr().out
    assert "100 outcomes kept: 100 results, 0 errors" in shown, shown
    out = run(rows(0, 100, 3))
    assert len(logged(log)) == n + 10 and not [r for r in out if r._error is not None]
    assert all(r.a == ans(r.key) for r in out)


def test_a_journal_an_earlier_release_wrote_is_read_as_it_was_written(spark, tmp_path):
    """Before enrich identified rows by the URL's columns, its journals identified them by every
    column (the manifest's key: all input columns). Such a journal is still served, not refused."""
    from aiospark.app.enrich import run_enrich

    src = tmp_path / "in.csv"
    src.write_text("id,n\n" + "".join(f"k{i},{i}\n" for i in range(20)))
    loc = str(tmp_path / "j")
    quiet = dict(out=lambda line: None, warn=lambda line: None)
    with EchoServer(delay=0.01) as server:
        url = server.url + "/item/{id}"
        # what the earlier release bound: key = every input column
        run_enrich(str(src), str(tmp_path / "o1.json"), url=url, schema="seen STRING",
                   journal=aiospark.Journal(loc, key=["id", "n"]), **quiet)
        assert len(server.paths) == 20
        again = run_enrich(str(src), str(tmp_path / "o2.json"), url=url, schema="seen STRING",
                           journal=aiospark.Journal(loc), **quiet)
        assert len(server.paths) == 20, "a journal of the earlier release was not served"
        assert again["rows"] == 20
        fresh = str(tmp_path / "k")  # a new journal is keyed by the URL's columns
        run_enrich(str(src), str(tmp_path / "o3.json"), url=url, schema="seen STRING",
                   journal=aiospark.Journal(fresh), **quiet)
    assert aiospark.Journal(fresh).store.read_manifest().key == ["id"]
