"""``aiospark enrich --dry-run`` (issue 48): what a rerun would call, computed by Spark, through the
real command (run in this process: tests/cli/enrich_support.py); nothing is called and nothing is written."""
from __future__ import annotations

from tests.cli.enrich_support import EchoServer


def test_dry_run_prints_what_a_rerun_would_call_and_calls_nothing(tmp_path, cli):
    src = tmp_path / "in.csv"  # 12 rows, 8 distinct ids, one row without an id
    src.write_text("id,n\n" + "".join(f"k{i % 8},{i}\n" for i in range(11)) + ",11\n")
    journal, out = tmp_path / "journal", tmp_path / "out.json"
    with EchoServer() as server:
        url = server.url + "/item/{id}"
        first = cli("enrich", str(src), str(out), "--url", url, "--schema", "seen STRING", "--journal",
                    str(journal), "--budget", "3", "--on-error", "row", "--concurrency", "1",
                    "--master", "local[1]")
        paid = len(server.paths)
        dry = cli("enrich", str(src), str(tmp_path / "again.json"), "--url", url, "--schema", "seen STRING",
                  "--journal", str(journal), "--on-error", "row", "--dry-run", "--master", "local[1]")
        assert len(server.paths) == paid  # nothing called
    assert first.returncode == 3 and 1 <= paid <= 3, first.stderr[-3000:]  # some ids paid, the rest over budget
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert not (tmp_path / "again.json").exists()  # nothing written
    line = dry.stdout
    assert "rows 12" in line and "NULL lookup keys 1 (a miss, no call)" in line and "distinct keys 8" in line, line
    assert f"recorded {paid}" in line and f"calls left {8 - paid}" in line, line
    assert "nothing was called or written" in line, line
