"""``aiospark enrich`` after an adversarial review: a journal refuses another endpoint, --overwrite
trusts only a valid marker, quoted newlines in CSV, dotted column names, Ctrl-C, and a truthful
summary of failed rows. Each through the ``aiospark`` command, a local Spark and a local service:
run in this process on the session's Spark (tests/cli/enrich_support.py), except the checks made
before Spark starts (a process in which Java cannot start) and Ctrl-C (a signal to a real process)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from aiospark.app.enrich_output import MARKER
from tests.cli.enrich_support import AIOSPARK, EchoServer, aiospark, no_spark_env, read_csv_dir, read_json_lines

URL = "http://127.0.0.1:9/item/{id}"


def test_a_journal_refuses_a_rerun_against_another_url(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text("id\na\nb\nc\n")
    journal = tmp_path / "jr"
    with EchoServer() as server:
        first = cli("enrich", str(src), str(tmp_path / "o1.json"), "--url", server.url + "/v1/{id}",
                    "--schema", "seen STRING", "--journal", str(journal), "--master", "local[1]")
        assert first.returncode == 0, first.stderr[-3000:]
        assert len(server.paths) == 3
        second = cli("enrich", str(src), str(tmp_path / "o2.json"), "--url",
                     server.url + "/v2/{id}?api_key=SECRET-KEY-42", "--schema", "seen STRING",
                     "--journal", str(journal), "--master", "local[1]")
        calls = list(server.paths)
    assert second.returncode == 2, second.stdout + second.stderr[-3000:]
    assert len(calls) == 3, calls  # not one call for the other endpoint
    assert "url_template" in second.stderr and "--journal" in second.stderr, second.stderr
    assert "SECRET-KEY-42" not in second.stdout + second.stderr and "Traceback" not in second.stderr
    assert not (tmp_path / "o2.json").exists()


@pytest.mark.parametrize("content", ["", "{}", "not json", '{"written_by": "someone else", "input": "x", "at": "y"}',
                                     '{"written_by": "aiospark 1 enrich", "input": 3, "at": "y"}'])
def test_overwrite_needs_a_valid_marker(tmp_path, content):
    src = tmp_path / "in.json"
    src.write_text('{"id": "a"}\n')
    target = tmp_path / "precious"
    target.mkdir()
    (target / "data.txt").write_text("keep me")
    (target / MARKER).write_text(content)
    done = aiospark("enrich", str(src), str(target), "--url", URL, "--schema", "name STRING", "--overwrite",
                    "--output-format", "json", env=no_spark_env())
    assert done.returncode == 2, done.stdout + done.stderr
    assert MARKER in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert (target / "data.txt").read_text() == "keep me" and (target / MARKER).read_text() == content


def test_csv_with_a_quoted_newline(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text('id,pair,text\n-0,"a,b","line1\nline2"\n7,x,plain\n')
    out = tmp_path / "out.json"
    with EchoServer() as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + "/item/{id}", "--schema", "seen STRING",
                   "--multiline", "--master", "local[1]")
        calls = sorted(server.paths)
    assert done.returncode == 0, done.stderr[-3000:]
    assert calls == ["/item/-0", "/item/7"]
    rows = sorted(read_json_lines(out), key=lambda r: r["id"])
    assert rows[0] == {"id": "-0", "pair": "a,b", "text": "line1\nline2", "seen": "/item/-0"}
    assert rows[1]["text"] == "plain"


def test_csv_with_a_quoted_newline_refused_names_multiline(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text('id,text\n1,"line1\nline2"\n')
    with EchoServer() as server:
        done = cli("enrich", str(src), str(tmp_path / "o.json"), "--url", server.url + "/item/{id}",
                   "--schema", "seen STRING", "--master", "local[1]")
        calls = list(server.paths)
    assert done.returncode == 2 and "--multiline" in done.stderr, done.stderr[-3000:]
    assert calls == []


@pytest.mark.parametrize("fmt", ["csv"])  # a JSON input reaches the same renaming (spark/arrow_names.py)
def test_dotted_column_names(tmp_path, fmt, cli):
    src = tmp_path / f"in.{fmt}"
    if fmt == "json":
        src.write_text('{"a.b": "x", "id": "1"}\n{"a.b": "y", "id": "2"}\n')
    else:
        src.write_text("a.b,id\nx,1\ny,2\n")
    with EchoServer() as server:
        plain = cli("enrich", str(src), str(tmp_path / "o1.json"), "--url", server.url + "/item/{id}",
                    "--schema", "seen STRING", "--master", "local[1]")
        placeholder = cli("enrich", str(src), str(tmp_path / "o2.json"), "--url", server.url + "/v/{a.b}",
                          "--schema", "seen STRING", "--on-error", "row", "--master", "local[1]")
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert sorted((r["a.b"], r["seen"]) for r in read_json_lines(tmp_path / "o1.json")) == [
        ("x", "/item/1"), ("y", "/item/2")]
    assert placeholder.returncode == 0, placeholder.stderr[-3000:]
    assert sorted(r["seen"] for r in read_json_lines(tmp_path / "o2.json")) == ["/v/x", "/v/y"]


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id\n" + "".join(f"k{i}\n" for i in range(200)))
    with EchoServer(delay=0.5) as server:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        proc = subprocess.Popen([AIOSPARK, "enrich", str(src), str(tmp_path / "o.json"), "--url",
                                 server.url + "/item/{id}", "--schema", "seen STRING", "--concurrency", "2",
                                 "--journal", str(tmp_path / "jr"), "--master", "local[1]"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 300
        while not server.paths and time.monotonic() < deadline:  # the job is calling
            time.sleep(0.2)
        assert server.paths, "the job never called the service"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, out + err[-3000:]
    assert "Traceback" not in err and "py4j" not in err, err[-3000:]
    assert "interrupted" in err and len(err.strip().splitlines()) <= 3, err
    assert not (tmp_path / "o.json").exists()


def test_every_row_failing_with_500_is_not_called_404(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text("id\nx\ny\n")
    with EchoServer(failing={"x", "y"}) as server:  # HTTP 500 for both
        done = cli("enrich", str(src), str(tmp_path / "out.csv"), "--url", server.url + "/item/{id}",
                   "--schema", "seen STRING", "--retries", "0", "--on-error", "row", "--master", "local[1]")
    assert done.returncode == 3, done.stderr[-3000:]
    assert "404" not in done.stderr, done.stderr
    warning = [line for line in done.stderr.splitlines() if line.startswith("warning: 2 rows failed")]
    assert warning and "HTTP 500" in warning[0], done.stderr  # what the errors were, not a guess
    assert len(read_csv_dir(tmp_path / "out.csv")) == 2
