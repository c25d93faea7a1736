"""The aiospark command: enrich end to end (a real process, local Spark, real HTTP on 127.0.0.1),
its checks before Spark starts, its error modes, and its output commit. Runs whose output and
messages are the point are made in this process on the session's Spark (tests/cli/enrich_support.py);
the end-to-end run, the failed run whose Spark log is read, the checks before Spark (a process in
which Java cannot start), ``--version`` and the demo (which starts a session of its own) are processes."""
from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import aiospark
from aiospark.app.cli import build_parser
from aiospark.app.enrich_checks import EnrichError, guess_format
from aiospark.app.enrich_output import MARKER, marker_text
from tests.support.service import FaultService, ServiceConfig, expected_item
from tests.support.threaded_http import LoopbackHTTPServer


def run_process(*args, timeout=400, env=None):
    """``python -m aiospark.app.cli ARGS`` in a process of its own (with its own JVM when it starts Spark)."""
    env = dict(os.environ if env is None else env, PYSPARK_PYTHON=sys.executable)
    return subprocess.run([sys.executable, "-m", "aiospark.app.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def no_java_env():
    """An environment in which Spark cannot start: an error seen here was found before Spark."""
    env = dict(os.environ, JAVA_HOME="/nonexistent-java", SPARK_HOME="/nonexistent-spark")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not os.path.exists(os.path.join(p, "java")))
    return env


class ItemServer:
    """GET /item/<key> -> {"name": "item-<key>", "value": len(key)}; keys in ``failing`` get HTTP 500.
    ``calls`` counts the requests."""

    def __init__(self, failing=()):
        failing = set(failing)
        lock = threading.Lock()
        self.calls = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with lock:
                    outer.calls += 1
                key = self.path.rsplit("/", 1)[-1]
                if key in failing:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"name": f"item-{key}", "value": len(key)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = LoopbackHTTPServer(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def read_json_dir(path):
    return [json.loads(line) for f in sorted(path.glob("part-*")) for line in f.read_text().splitlines()]


def rows_per_second(text, pattern):
    return re.search(pattern, text).group(1)


def test_enrich_csv_to_json(tmp_path):
    src = tmp_path / "in.csv"
    keys = [f"k{i}" for i in range(300)] + ["a/b", "100%"]
    src.write_text("id,qty\n" + "\n".join(f"{k},{i}" for i, k in enumerate(keys)) + "\n")
    out = tmp_path / "out.json"
    with FaultService(ServiceConfig(latency=0.005, error_rate=0.05, seed=3)) as service:
        done = run_process("enrich", str(src), str(out), "--url", service.url + "/item/{id}",
                           "--schema", "name STRING, value LONG", "--concurrency", "32", "--retries", "6",
                           "--master", "local[2]")
        stats = service.stats()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "302 rows" in done.stdout
    rows = read_json_dir(out)
    assert len(rows) == len(keys)
    assert {r["id"]: r["name"] for r in rows} == {k: expected_item(k)["name"] for k in keys}
    assert stats["errors_5xx"] > 0  # the retries really had something to do
    metrics_line = [line for line in done.stdout.splitlines() if line.startswith("metrics: ")][0]
    retries = int(metrics_line.split("retries=")[1].split()[0])
    calls = int(metrics_line.split("calls=")[1].split()[0])
    assert retries >= stats["errors_5xx"] - 5 and calls == len(keys) + retries  # 404s aside, one call per row
    # one rows/s figure: the progress line's and the summary's are the same number
    assert f"{len(keys):,} rows" in done.stderr
    assert rows_per_second(done.stderr, r"302 rows\s+([\d,.]+) rows/s") == \
        rows_per_second(done.stdout, r"302 rows in [\d.]+ s \(([\d,.]+) rows/s\)")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left


def test_schema_typo_is_an_error_and_writes_nothing(tmp_path, cli):
    src = tmp_path / "in.json"
    src.write_text("".join(json.dumps({"id": f"k{i}"}) + "\n" for i in range(20)))
    out = tmp_path / "out.json"
    with ItemServer() as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + "/item/{id}",
                   "--schema", "nme STRING, value LONG", "--master", "local[1]")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "['nme']" in done.stderr and "all 20 rows" in done.stderr and "--allow-empty-columns" in done.stderr
    assert "at org.apache" not in done.stderr and len(done.stderr.strip().splitlines()) <= 3, done.stderr
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["in.json"]


def test_failing_row_fails_short_and_keeps_the_old_output(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id\n" + "\n".join(f"k{i}" for i in range(50)) + "\n")
    out = tmp_path / "out.csv"
    out.mkdir()
    (out / "previous.csv").write_text("id,name\nold,row\n")
    (out / MARKER).write_text(marker_text(str(src)))  # an earlier run's output: --overwrite may replace it
    with ItemServer(failing={"k17"}) as server:
        done = run_process("enrich", str(src), str(out), "--url", server.url + "/item/{id}",
                           "--schema", "name STRING", "--retries", "1", "--overwrite", "--master", "local[1]")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("aiospark enrich: failed: AsyncFunctionError"), done.stderr
    assert "k17" in lines[0] and "500" in lines[0] and "--on-error row" in lines[1] and "--verbose" in lines[1]
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "previous.csv"]  # the old output, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "out.csv"]
    log = lines[1].split("Spark's log: ")[1].split(";")[0]
    assert "k17" in open(log).read()  # the full story is kept for whoever wants it
    os.unlink(log)


def test_on_error_row_writes_failed_rows_beside_good_ones(tmp_path, cli):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"k{i}" for i in range(40)], "n": list(range(40))}), src)
    out = tmp_path / "out.parquet"
    out.mkdir()
    (out / "stale.txt").write_text("replaced by --overwrite")
    (out / MARKER).write_text(marker_text(str(src)))  # an earlier run's output: --overwrite may replace it
    with ItemServer(failing={"k3", "k30"}) as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + "/item/{id}",
                   "--schema", "name STRING, value INT", "--retries", "0", "--on-error", "row", "--overwrite",
                   "--ordered", "--master", "local[1]")
    assert done.returncode == 3, done.stderr[-3000:]  # written, with failed rows in it
    assert "40 rows" in done.stdout and "2 rows failed" in done.stderr
    table = pq.read_table(out).to_pylist()
    assert not (out / "stale.txt").exists() and len(table) == 40
    by_id = {r["id"]: r for r in table}
    for key in ("k3", "k30"):
        row = by_id[key]
        assert row["name"] is None and row["n"] == int(key[1:]) and "500" in row["_error"], row
    good = [r for k, r in by_id.items() if k not in ("k3", "k30")]
    assert all(r["_error"] is None and r["name"] == f"item-{r['id']}" and r["value"] == len(r["id"]) for r in good)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_unknown_url_column_is_found_before_spark_starts(tmp_path, fmt):
    src = tmp_path / f"in.{fmt}"
    if fmt == "csv":
        src.write_text("sku,qty\na,1\n")
    elif fmt == "json":
        src.write_text('{"sku": "a"}\n{"sku": "b", "qty": 2}\n')
    else:
        pq.write_table(pa.table({"sku": ["a"], "qty": [1]}), src)
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = run_process("enrich", str(src), str(tmp_path / "o.json"), "--url", "http://127.0.0.1:9/item/{id}",
                       "--schema", "name STRING", env=dict(no_java_env(), TMPDIR=str(temp)))
    assert done.returncode == 2, done.stderr
    assert "--url uses ['id'], not a column of" in done.stderr and "'sku'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(temp.iterdir()) == []  # no Spark log kept for an error that names what to change


@pytest.mark.parametrize("argv, message", [
    (["enrich", "missing.csv", "o.json"], "the input 'missing.csv' does not exist"),
    (["enrich", "in.csv", "o.json", "--schema", "name STRNG"], "unknown type 'STRNG' for column 'name'"),
    (["enrich", "in.csv", "exists.json"], "the output 'exists.json' exists: pass --overwrite"),
    (["enrich", "in.csv", "o.json", "--url", "http://127.0.0.1:9/item"], "--url 'http://127.0.0.1:9/item' has no placeholder"),
    (["enrich", "in.csv", "o.json", "--schema", "id STRING, qty INT"], "are input columns already"),
    (["enrich", "in.csv", "o.xml"], "cannot tell the output format"),
    (["enrich", "noext", "o.json"], "pass --format"),
])
def test_bad_arguments_are_found_before_spark_starts(tmp_path, argv, message):
    (tmp_path / "in.csv").write_text("id,qty\na,1\n")
    (tmp_path / "exists.json").mkdir()
    (tmp_path / "noext").write_text("id\na\n")
    defaults = {"--url": "http://127.0.0.1:9/item/{id}", "--schema": "name STRING"}
    argv = argv + [item for flag, value in defaults.items() if flag not in argv for item in (flag, value)]
    done = subprocess.run([sys.executable, "-m", "aiospark.app.cli", *argv], capture_output=True, text=True,
                          timeout=120, env=no_java_env(), cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_help_shows_defaults_and_version_prints(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["enrich", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # help wraps lines at the terminal's width
    assert info.value.code == 0
    for default in ("(default: 100)", "(default: 30.0)", "(default: 3)", "(default: fail)", "(default: left)"):
        assert default in text, default
    # required options and options without a default show none; no default is shown twice
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "input format (default: from the input's name) --output-format" in text


def test_an_unknown_option_of_a_subcommand_shows_that_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["enrich", "in.csv", "out", "--url", "u", "--schema", "a INT", "--urll", "x"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith("usage: aiospark enrich") and "aiospark enrich: error: unrecognized arguments: --urll x" in err
    done = subprocess.run([sys.executable, "-m", "aiospark.app.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"aiospark {aiospark.__version__}"


@pytest.mark.parametrize("argv, message", [
    (["enrich", "a.csv", "b.csv", "--schema", "x STRING"], "--url"),
    (["enrich", "a.csv", "b.csv", "--url", "u", "--schema", "s", "--concurrency", "0"], "must be >= 1"),
    (["enrich", "a.csv", "b.csv", "--url", "u", "--schema", "s", "--retries", "-1"], "must be >= 0"),
    (["demo", "--rows", "-5"], "must be >= 1"),
    (["demo", "--latency", "-1"], "must be >= 0"),
])
def test_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_format_guessing(tmp_path):
    assert guess_format("x/data.parquet", None, "input") == "parquet"
    assert guess_format("x.JSONL", None, "input") == "json"
    assert guess_format("x.csv.gz", None, "input") == "csv" and guess_format("x.json.bz2", None, "input") == "json"
    with pytest.raises(EnrichError, match="--format"):
        guess_format(str(tmp_path / "noext"), None, "input")
    with pytest.raises(EnrichError, match="one of"):
        guess_format("x.csv", "xml", "input")


@pytest.mark.version_agnostic  # the demo's Spark calls are the wait functions' and a plain UDF, tested everywhere
def test_demo_runs_end_to_end():
    done = run_process("demo", "--rows", "3000", "--sample", "40", "--latency", "0.02", "--jitter", "0.005",
                       "--capacity", "50")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "aiospark unordered_wait  |   3,000 |" in out and "blocking Python UDF      |      40 |" in out
    assert "metrics: calls=3000 ok=3000" in out
    speedup = float(out.split("speed-up: ")[1].split("x")[0].replace(",", ""))
    assert speedup > 1.0, out
