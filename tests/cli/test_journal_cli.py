"""``aiospark journal LOCATION [--drop-errors]`` on real journals written by real Spark jobs.

A counting HTTP service on 127.0.0.1 proves that after --drop-errors a rerun calls exactly the rows
that failed; both stores (a directory, a real redis-server); bad locations exit 2 with one line.
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
        for extra in ([], ["--drop-errors"]):
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
