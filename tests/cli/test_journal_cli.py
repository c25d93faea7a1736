"""``aiospark journal LOCATION [--drop-errors] [--compact]`` on real journals written by real Spark jobs.

A counting HTTP service on 127.0.0.1 proves that after --drop-errors a rerun calls exactly the rows
that failed; both stores (a directory, a real redis-server); --compact on a journal written twice;
bad locations exit 2 with one line.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark.app.cli import main
from aiospark.connectors.redis.journal_store import RedisStore
from aiospark.journal import Manifest
from aiospark.journal.directory import DirectoryStore
from aiospark.journal.summary import drop_errors, summarize
from tests.chaos import ITEM_SCHEMA, ServiceCall
from tests.support.journal import calls
from tests.support.servers import RedisServer, free_port
from tests.support.service import FaultService, ServiceConfig

ROWS = 700  # ids 0..699: 100 multiples of 7 fail


class FailSevens(ServiceCall):
    """Calls the service, then fails rows whose id is a multiple of 7 (after the call: it counts)."""

    async def async_invoke(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        out = await super().async_invoke(row)
        if row["id"] % 7 == 0:
            raise ValueError(f"row {row['id']} is refused")
        return out


@pytest.fixture(scope="module")
def service():
    svc = FaultService(ServiceConfig(latency=0.002)).start()
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as srv:
        yield srv


def run_job(spark, service, location: str) -> list[Any]:
    df = spark.range(0, ROWS, 1, 2).select("id", F.format_string("k%05d", "id").alias("key"))
    journal = aiospark.Journal(location, key="id", keep_errors=True)
    return aiospark.unordered_wait(df, FailSevens(service.url), ITEM_SCHEMA, on_error="row",
                                   journal=journal).collect()


def cli(capsys, *argv: str):
    code = main(["journal", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("store", ["dir", "redis"])
def test_show_then_drop_errors_then_a_rerun_calls_only_the_failed_rows(spark, service, redis_server, tmp_path,
                                                                        capsys, store):
    loc = str(tmp_path / "j") if store == "dir" else f"{redis_server.url}?prefix=cli-{os.urandom(4).hex()}"
    before = calls(service)
    first = run_job(spark, service, loc)
    assert calls(service) - before == ROWS and sum(r._error is not None for r in first) == 100

    code, out, err = cli(capsys, loc, "--errors", "3")
    assert code == 0 and err == ""
    assert f"({'directory' if store == 'dir' else 'redis'})" in out.splitlines()[0]
    assert "unordered_wait tests.cli.test_journal_cli.FailSevens" in out
    # the declared schema: the _error/_input columns of on_error="row" are not part of the question
    assert "schema      struct<id:bigint,key:string,value:bigint,name:string>\n" in out
    assert "key         id (bigint)" in out
    assert "outcomes    700: 600 results, 100 errors" in out
    shown = re.findall(r"\[(\d+)\] ValueError: row (\d+) is refused", out)
    assert len(shown) == 3 and all(a == b and int(a) % 7 == 0 for a, b in shown) and "... 97 more" in out
    if store == "dir":
        assert "segments" in out

    # a rerun keeping errors pays nothing: the errors are recorded (the control for what follows)
    before = calls(service)
    run_job(spark, service, loc)
    assert calls(service) - before == 0

    code, out, err = cli(capsys, loc, "--drop-errors")
    assert code == 0 and err == "", err
    assert out.startswith("dropped 100 recorded errors")
    assert "outcomes    600: 600 results, 0 errors" in out

    before = calls(service)
    again = run_job(spark, service, loc)
    assert calls(service) - before == 100  # exactly the failed rows, called again
    assert sorted(map(str, again)) == sorted(map(str, first))
    assert summarize(loc).errors == 100  # they failed again, and are kept again


def _small_journal(location: str, errors: int = 2, results: int = 3) -> Manifest:
    """A directory journal written through the store itself (no Spark), in 4 buckets: [1] and [101]
    land in k=0, [0] and [100] in k=1, [2] in k=3 (k=2 is left to the clean segment below)."""
    manifest = Manifest("ordered_wait", "m.f", "c0de", "x INT", ["id"], ["bigint"], buckets=4)
    store = DirectoryStore(location)
    store.check(manifest)
    task = store.task(manifest, 0, None, "0.0")
    task.write([(f"[{i}]", b"payload", None) for i in range(results)]
               + [(f"[{100 + i}]", None, f"ValueError: no {i}") for i in range(errors)])
    task.close()
    return manifest


def test_quiet_also_refuses_a_segment_just_written_and_clean_segments_are_untouched(tmp_path, capsys):
    """A live writer is known by its lease (tests/journal/test_object_store.py); ``--quiet`` is the
    extra guard for writers that take none (journals written before leases)."""
    loc = str(tmp_path / "j")
    manifest = _small_journal(loc)
    clean = DirectoryStore(loc).task(manifest, 1, None, "0.0")
    clean.write([("[7]", b"p", None)])
    clean.close()
    code, out, err = cli(capsys, loc, "--drop-errors", "--quiet", "30")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "is being written" in err and "once the job has ended" in err
    assert summarize(loc).errors == 2
    clean_files = sorted(os.listdir(tmp_path / "j" / manifest.digest / "k=2"))  # [7]'s bucket
    for root, _, files in os.walk(loc):  # the segments are old now
        for name in files:
            os.utime(os.path.join(root, name), (time.time() - 60, time.time() - 60))
    assert drop_errors(loc, quiet=30) == 2
    assert sorted(os.listdir(tmp_path / "j" / manifest.digest / "k=2")) == clean_files
    s = summarize(loc)
    assert (s.results, s.errors, s.segments) == (4, 0, 4)  # k=0 and k=1 compacted, k=2 and k=3 untouched
    # what a task reads now: the results, no errors
    known = DirectoryStore(loc).task(manifest, 0, None, "1.0").fetch(["[0]", "[1]", "[2]", "[100]", "[101]"])
    assert known == {f"[{i}]": (b"payload", None) for i in range(3)}
    assert drop_errors(loc) == 0


def test_compact_prints_what_it_did_and_the_counts_stay(tmp_path, capsys):
    loc = str(tmp_path / "j")
    _small_journal(loc)
    manifest = _small_journal(loc)  # a second run writing the same outcomes: two segments per bucket
    code, out, err = cli(capsys, loc)
    assert code == 0 and err == ""
    assert "  layout      4 buckets: 6 bucket segments in 3 buckets; --compact makes it one segment per bucket\n" in out
    assert "  outcomes    5: 3 results, 2 errors\n" in out  # each identity once, though written twice

    code, out, err = cli(capsys, loc, "--compact")
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[:2] == ["compacted 3 buckets into one segment each, removed 6 segments (6 bucket, 0 parts, "
                         "0 legacy); 0 buckets already one segment", "5 outcomes kept: 3 results, 2 errors"], out
    assert "  layout      4 buckets: 3 bucket segments in 3 buckets; one segment per bucket" in lines
    assert "  outcomes    5: 3 results, 2 errors" in lines
    assert all(len(os.listdir(tmp_path / "j" / manifest.digest / f"k={b}")) == 1 for b in (0, 1, 3))

    code, out, _ = cli(capsys, loc, "--compact")
    assert code == 0 and out.splitlines()[:2] == ["nothing to compact: every bucket is one segment (3 buckets)",
                                                  "5 outcomes kept: 3 results, 2 errors"], out
    code, out, _ = cli(capsys, loc, "--compact", "--drop-errors")
    assert code == 0 and out.splitlines()[:3] == [
        "dropped 2 recorded errors: a rerun calls those rows again",
        "compacted 2 buckets into one segment each, removed 2 segments (2 bucket, 0 parts, 0 legacy); "
        "1 bucket already one segment", "3 outcomes kept: 3 results, 0 errors"], out  # k=0, k=1 held an error

    _small_journal(loc)  # just written: --quiet refuses, as it refuses --drop-errors
    code, out, err = cli(capsys, loc, "--compact", "--quiet", "30")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "is being written" in err and "compact it once the job has ended" in err, err
    assert summarize(loc).bucket_segments == 6  # nothing changed


def test_a_redis_journal_has_nothing_to_compact_and_says_so(redis_server, capsys):
    loc = f"{redis_server.url}?prefix=compact-{os.urandom(4).hex()}"
    manifest = Manifest("ordered_wait", "m.f", "c0de", "x INT", ["id"], ["bigint"])
    store = RedisStore(loc)
    store.check(manifest)
    task = store.task(manifest, 0, None, "0.0")
    task.write([("[1]", [1], None), ("[2]", [2], None), ("[3]", None, "ValueError: no")])
    task.close()
    code, out, _ = cli(capsys, loc)
    assert code == 0 and "  layout      one key per outcome: counts exact, nothing to compact\n" in out
    code, out, err = cli(capsys, loc, "--compact")
    assert code == 0 and err == ""
    assert out.splitlines()[:2] == ["nothing to compact: a Redis journal keeps one key per outcome (its counts are "
                                    "exact)", "3 outcomes kept: 2 results, 1 error"], out
    code, out, _ = cli(capsys, loc, "--compact", "--drop-errors")
    assert code == 0 and out.splitlines()[:3] == ["dropped 1 recorded error: a rerun calls that row again",
                                                  "nothing to compact: a Redis journal keeps one key per outcome "
                                                  "(its counts are exact)", "2 outcomes kept: 2 results, 0 errors"]


def test_a_corrupt_row_is_counted_as_skipped(tmp_path, capsys):
    loc = str(tmp_path / "j")
    manifest = _small_journal(loc, errors=0, results=1)
    (segment,) = (tmp_path / "j" / manifest.digest).glob("k=*/*.arrow")
    data = segment.read_bytes()
    segment.write_bytes(data.replace(b"payload", b"paxload"))
    code, out, _ = cli(capsys, loc)
    assert code == 0 and "outcomes    0: 0 results, 0 errors" in out
    assert "skipped     1 rows with a bad checksum" in out


def test_bad_locations_are_one_line_and_exit_2(tmp_path, redis_server, capsys):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    (tmp_path / "empty").mkdir()
    closed = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    cases = {str(tmp_path / "nothing"): "nothing is there", str(a_file): "it is a file",
             str(tmp_path / "empty"): "holds no manifest.json", closed: "failed",
             f"{redis_server.url}?prefix=none": "holds no key none:manifest", "ftp://x/y": "not a journal location"}
    for location, says in cases.items():
        for extra in ([], ["--drop-errors"], ["--compact"], ["--compact", "--drop-errors"]):
            code, out, err = cli(capsys, location, *extra)
            assert code == 2 and out == "", (location, out)
            assert len(err.splitlines()) == 1 and err.startswith("aiospark journal: ") and says in err, err
            assert "s3cret" not in err


def test_the_command_exits_2_as_a_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aiospark.app.cli", "journal", str(tmp_path / "nothing")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"aiospark journal: no journal at {tmp_path / 'nothing'}: "
                                                "nothing is there"]
