"""aiospark enrich never reads a malformed input line silently (the command run in this process on
the session's local Spark, see tests/cli/enrich_support.py; a real HTTP server on 127.0.0.1): by
default the run fails before any call, naming the lines; with --on-error row each becomes an error
row whose _error quotes the line."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from tests.cli.test_cli import ItemServer, read_json_dir

ITEM = "/item/{id}"
BAD_CSV = ['9991,"unterminated quote, and,more', "9992,a,b,c,d"]


def csv_input(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id,label\n" + "".join(f"{i},l{i}\n" for i in range(300)) + "\n".join(BAD_CSV) + "\n")
    return src


def test_malformed_csv_lines_fail_the_run_named_before_any_call(tmp_path, cli):
    src = csv_input(tmp_path)
    out = tmp_path / "out.parquet"
    with ItemServer() as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + ITEM, "--schema", "name STRING",
                   "--master", "local[2]")
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    err = done.stderr
    assert "2 malformed line(s)" in err and "no call was made" in err, err
    assert f"line 302 of {src}: malformed CSV line (a quote that never closes): '{BAD_CSV[0]}'" in err, err
    assert f"line 303 of {src}: malformed CSV line (its fields do not match" in err and f"'{BAD_CSV[1]}'" in err
    assert "--on-error row" in err and "Traceback" not in err and "at org.apache" not in err
    assert server.calls == 0 and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_malformed_csv_lines_become_error_rows_with_on_error_row(tmp_path, cli):
    src = csv_input(tmp_path)
    out = tmp_path / "out.parquet"
    with ItemServer() as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + ITEM, "--schema", "name STRING",
                   "--on-error", "row", "--master", "local[2]")
    assert done.returncode == 3, done.stderr[-3000:]  # written, with failed rows in it
    assert "302 rows" in done.stdout and "2 rows failed (2 of them malformed input lines)" in done.stderr
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 302 and server.calls == 300  # no call for a malformed line
    errors = {r["id"]: r for r in rows if r["_error"] is not None}
    assert sorted(errors) == ["9991", "9992"]  # CSV values are strings, as written
    assert errors["9991"]["_error"] == f"malformed CSV line (a quote that never closes): '{BAD_CSV[0]}'"
    assert errors["9992"]["_error"].startswith("malformed CSV line (its fields do not match the header's 2 ")
    assert errors["9992"]["_error"].endswith(f"'{BAD_CSV[1]}'") and errors["9992"]["name"] is None
    good = [r for r in rows if r["_error"] is None]
    assert all(r["name"] == f"item-{r['id']}" and r["label"] == f"l{r['id']}" for r in good)


def test_malformed_json_lines_fail_named_or_become_error_rows(tmp_path, cli):
    src = tmp_path / "in.json"
    lines = [json.dumps({"id": f"k{i}", "n": i}) for i in range(30)]
    lines.insert(10, '{"id": "broken", "n": ')
    src.write_text("\n".join(lines) + "\n")
    with ItemServer() as server:
        failed = cli("enrich", str(src), str(tmp_path / "a.json"), "--url", server.url + ITEM,
                     "--schema", "name STRING", "--master", "local[1]")
        calls_when_failed = server.calls
        kept = cli("enrich", str(src), str(tmp_path / "b.json"), "--url", server.url + ITEM,
                   "--schema", "name STRING", "--on-error", "row", "--master", "local[1]")
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert f"line 11 of {src}: malformed JSON line: '{lines[10]}'" in failed.stderr, failed.stderr
    assert calls_when_failed == 0 and not (tmp_path / "a.json").exists()
    assert kept.returncode == 3, kept.stderr[-3000:]  # written, with the malformed line as an error row
    rows = read_json_dir(tmp_path / "b.json")
    assert len(rows) == 31 and "_aiospark_corrupt" not in rows[0] and "_corrupt_record" not in rows[0]
    bad = [r for r in rows if r.get("_error")]
    assert len(bad) == 1 and bad[0]["_error"] == f"malformed JSON line: '{lines[10]}'"
    assert all(r["name"] == f"item-{r['id']}" for r in rows if not r.get("_error"))
