"""Issue 46, through the ``aiospark`` command: OUTPUT never overwrites what the job reads or what it
did not write (real paths, a marker file); no credential in any line it prints; credentials from
the environment or a file; the CLI pays once (--journal, --budget, --rate-limit) and says with its
exit code when rows failed. Runs that only compute and write are made in this process on the
session's Spark (tests/cli/enrich_support.py); the checks made before Spark starts run in a process
in which Java cannot start, and the run whose Spark log is read, and the --master local[1] run
whose rate is timed, in a process of their own."""
from __future__ import annotations

import os

import pytest

from aiospark.app.enrich_output import MARKER
from tests.cli.enrich_support import EchoServer, aiospark, no_spark_env, read_json_lines

URL = "http://127.0.0.1:9/item/{id}"


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("layout, input_arg, output_arg", [
    ("keep", "keep/in.csv", "./keep"),            # OUTPUT is the input's directory
    ("file", "in.csv", "./in.csv"),               # OUTPUT is the input file
    ("file", "in.csv", "sub/../in.csv"),          # ... written with '..'
    ("dir", "data", "data/out"),                  # OUTPUT inside the input directory
    ("link", "in.csv", "alias.csv"),              # a symlink to the input
    ("linkdir", "keep/in.csv", "alias"),          # a symlink to the input's directory
    ("keep", "keep/in.csv", "."),                 # the working directory, which holds the input
])
def test_output_where_the_input_is_is_refused_before_spark(tmp_path, layout, input_arg, output_arg):
    (tmp_path / "in.csv").write_text("id\na\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "in.csv").write_text("id\na\n")
    (tmp_path / "keep" / "other.txt").write_text("not the tool's")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part.csv").write_text("id\na\n")
    (tmp_path / "alias.csv").symlink_to(tmp_path / "in.csv")
    (tmp_path / "alias").symlink_to(tmp_path / "keep")
    before = _tree(tmp_path)
    done = aiospark("enrich", input_arg, output_arg, "--url", URL, "--schema", "name STRING", "--overwrite",
                    "--format", "csv", "--output-format", "json", env=no_spark_env(), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the INPUT" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert _tree(tmp_path) == before and (tmp_path / "keep" / "other.txt").read_text() == "not the tool's"


def test_overwrite_replaces_only_a_directory_the_tool_wrote(tmp_path, cli):
    src = tmp_path / "in.json"
    src.write_text('{"id": "a"}\n{"id": "b"}\n')
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("someone's notes")
    afile = tmp_path / "report.json"
    afile.write_text("{}")
    for target in (mine, afile):
        refused = aiospark("enrich", str(src), str(target), "--url", URL, "--schema", "name STRING", "--overwrite",
                           "--output-format", "json", env=no_spark_env())
        assert refused.returncode == 2 and "did not write" in refused.stderr and MARKER in refused.stderr, \
            refused.stderr
    assert (mine / "notes.txt").read_text() == "someone's notes" and afile.read_text() == "{}"
    out = tmp_path / "out.json"
    with EchoServer() as server:
        first = cli("enrich", str(src), str(out), "--url", server.url + "/item/{id}", "--schema", "seen STRING",
                    "--master", "local[1]")
        assert first.returncode == 0, first.stderr[-3000:]
        assert (out / MARKER).is_file()
        again = cli("enrich", str(src), str(out), "--url", server.url + "/item/{id}", "--schema", "seen STRING",
                    "--overwrite", "--master", "local[1]")
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(r["seen"] for r in read_json_lines(out)) == ["/item/a", "/item/b"] and (out / MARKER).is_file()


@pytest.mark.parametrize("url, secret", [
    ("htps://bob:S3CRET-PW@127.0.0.1/item/{id}", "S3CRET-PW"),             # a typo in the scheme
    ("http://bob:S3CRET-PW@127.0.0.1:99999/item/{id}", "S3CRET-PW"),        # a port out of range
    ("http://127.0.0.1:9/item/{}?api_key=TOPSECRET-KEY", "TOPSECRET-KEY"),  # an empty placeholder
    ("http://127.0.0.1:9/item/{id?api_key=TOPSECRET-KEY", "TOPSECRET-KEY"),  # a lone brace
    ("http://127.0.0.1:9/item?api_key=TOPSECRET-KEY", "TOPSECRET-KEY"),     # no placeholder
])
def test_no_credential_in_an_error(tmp_path, url, secret):
    (tmp_path / "in.csv").write_text("id\na\n")
    done = aiospark("enrich", "in.csv", "o.json", "--url", url, "--schema", "name STRING", env=no_spark_env(),
                    cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert secret not in done.stdout + done.stderr and "***" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_headers_and_token_from_the_environment_or_a_file_never_printed(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id\nk1\nk2\nbad\n")
    token_file = tmp_path / "token"
    token_file.write_text("FILE-TOKEN-123\n")
    env = dict(os.environ, SHOP_KEY="ENV-KEY-456", MY_TOKEN="ENV-TOKEN-789")
    with EchoServer(failing={"bad"}) as server:
        url = server.url + "/item/{id}?api_key=QUERY-KEY-000"
        done = aiospark("enrich", str(src), str(tmp_path / "out.json"), "--url", url, "--schema", "seen STRING",
                        "--header-env", "X-Api-Key=SHOP_KEY", "--header-file", "X-Other=" + str(token_file),
                        "--auth-token-env", "MY_TOKEN", "--retries", "0", "--master", "local[1]", env=env)
        seen = list(server.headers)
    assert done.returncode == 1, done.stderr[-3000:]  # the row 'bad' fails the job: its error is printed
    assert "500" in done.stderr
    log = open(done.stderr.split("Spark's log: ")[1].split(";")[0]).read()  # kept for the user to read
    assert "bad" in log  # the failure's whole story is there...
    for secret in ("ENV-KEY-456", "FILE-TOKEN-123", "ENV-TOKEN-789", "QUERY-KEY-000"):
        assert secret not in done.stdout + done.stderr, done.stderr
        assert secret not in log  # ...and no credential
    assert seen and all(h["X-Api-Key"] == "ENV-KEY-456" and h["X-Other"] == "FILE-TOKEN-123"
                        and h["Authorization"] == "Bearer ENV-TOKEN-789" for h in seen)
    missing = aiospark("enrich", str(src), str(tmp_path / "o2.json"), "--url", URL, "--schema", "seen STRING",
                       "--auth-token-env", "NOT_SET_ANYWHERE", env=no_spark_env())
    assert missing.returncode == 2 and "NOT_SET_ANYWHERE is not set" in missing.stderr, missing.stderr


@pytest.mark.parametrize("option, value, message", [
    ("--budget", "0", "whole number of calls >= 1"),
    ("--rate-limit", "0/s", "calls per second"),
    ("--rate-limit", "ten", "calls per second"),
    ("--journal", "ftp://host/j", "not a journal location"),
    ("--journal", "o.json/journal", "outside both"),  # --overwrite would delete what was paid for
    ("--timeout", "0", "--timeout must be > 0"),
    ("--header-env", "X-Key", "NAME=ENV_VAR"),
    ("--header-file", "X-Key=/nonexistent/file", "cannot read"),
])
def test_new_options_are_checked_before_spark(tmp_path, option, value, message):
    (tmp_path / "in.csv").write_text("id\na\n")
    done = aiospark("enrich", "in.csv", "o.json", "--url", URL, "--schema", "name STRING", option, value,
                    env=no_spark_env(), cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_journal_resumes_budget_stops_and_failed_rows_exit_3(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text("id\n" + "".join(f"k{i}\n" for i in range(12)))
    journal = tmp_path / "journal"
    out = tmp_path / "out.json"
    with EchoServer() as server:
        first = cli("enrich", str(src), str(out), "--url", server.url + "/item/{id}", "--schema", "seen STRING",
                    "--journal", str(journal), "--budget", "5", "--on-error", "row", "--concurrency", "1",
                    "--master", "local[1]")
        calls_first = len(server.paths)
        # a process of its own: --rate-limit bounds each running task, and only its local[1] runs one
        # task at a time (this session's local[2] would run two, at twice the rate asserted below)
        second = aiospark("enrich", str(src), str(out), "--url", server.url + "/item/{id}", "--schema",
                          "seen STRING", "--journal", str(journal), "--on-error", "row", "--overwrite",
                          "--rate-limit", "4/s", "--master", "local[1]")
        calls = list(server.paths)
        times = list(server.times)
    assert first.returncode == 3, first.stdout + first.stderr[-3000:]
    assert calls_first == 5 and "7 rows failed" in first.stderr
    rows = read_json_lines(out)  # the second run's output
    assert second.returncode == 0, second.stderr[-3000:]
    assert len(calls) == 12 and sorted(calls) == sorted(f"/item/k{i}" for i in range(12))  # each row paid once
    assert sorted(r["seen"] for r in rows) == sorted(f"/item/k{i}" for i in range(12))
    assert all(r.get("_error") is None for r in rows)
    # 7 calls at 4/s (a burst of 1): at least 1.5 s from the first call of the second run to its last
    assert times[-1] - times[5] >= 1.4


def test_every_row_failing_under_on_error_row_exits_3(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text("id\nx\ny\n")
    with EchoServer(failing={"x", "y"}) as server:
        done = cli("enrich", str(src), str(tmp_path / "out.json"), "--url", server.url + "/item/{id}",
                   "--schema", "seen STRING", "--retries", "0", "--on-error", "row", "--master", "local[1]")
    assert done.returncode == 3, done.stderr[-3000:]
    assert "2 rows failed" in done.stderr and "exit code 3" in done.stderr
    assert len(read_json_lines(tmp_path / "out.json")) == 2
