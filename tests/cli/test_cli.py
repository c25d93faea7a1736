"""The aiospark command: enrich end to end (a real process, local Spark, real HTTP) and argument errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aiospark.cli import build_parser
from aiospark.enrich import guess_format
from tests.support.service import FaultService, ServiceConfig, expected_item


def run_cli(*args, timeout=240):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.run([sys.executable, "-m", "aiospark.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_enrich_csv_to_json(tmp_path):
    src = tmp_path / "in.csv"
    keys = [f"k{i}" for i in range(300)] + ["a/b", "100%"]
    src.write_text("id,qty\n" + "\n".join(f"{k},{i}" for i, k in enumerate(keys)) + "\n")
    out = tmp_path / "out.json"
    with FaultService(ServiceConfig(latency=0.005, error_rate=0.05, seed=3)) as service:
        done = run_cli("enrich", str(src), str(out), "--url", service.url + "/item/{id}",
                       "--schema", "name STRING, value LONG", "--concurrency", "32", "--retries", "6",
                       "--master", "local[2]")
        stats = service.stats()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "302 rows" in done.stdout
    rows = [json.loads(line) for f in sorted(out.glob("part-*")) for line in f.read_text().splitlines()]
    assert len(rows) == len(keys)
    assert {r["id"]: r["name"] for r in rows} == {k: expected_item(k)["name"] for k in keys}
    assert stats["errors_5xx"] > 0  # the retries really had something to do
    metrics_line = [l for l in done.stdout.splitlines() if l.startswith("metrics: ")][0]
    retries = int(metrics_line.split("retries=")[1].split()[0])
    calls = int(metrics_line.split("calls=")[1].split()[0])
    assert retries >= stats["errors_5xx"] - 5 and calls == len(keys) + retries  # 404s aside, one call per row
    assert f"{len(keys):,} rows" in done.stderr  # the progress summary


def test_enrich_missing_column_is_a_clear_error(tmp_path):
    src = tmp_path / "in.json"
    src.write_text('{"sku": "a"}\n')
    done = run_cli("enrich", str(src), str(tmp_path / "o.json"), "--url", "http://127.0.0.1:9/item/{id}",
                   "--schema", "name STRING", "--master", "local[1]")
    assert done.returncode == 2 and "not columns" in done.stderr


@pytest.mark.parametrize("argv, message", [
    (["enrich", "a.csv", "b.csv", "--schema", "x STRING"], "--url"),
    (["enrich", "a.csv", "b.csv", "--url", "u", "--schema", "s", "--concurrency", "0"], "must be >= 1"),
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
    with pytest.raises(ValueError, match="--input-format"):
        guess_format(str(tmp_path / "noext"), None, "input")
    with pytest.raises(ValueError, match="one of"):
        guess_format("x.csv", "xml", "input")


def test_demo_runs_end_to_end():
    done = run_cli("demo", "--rows", "3000", "--sample", "40", "--latency", "0.02", "--jitter", "0.005",
                   "--capacity", "50")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "aiospark unordered_wait  |   3,000 |" in out and "blocking Python UDF      |      40 |" in out
    assert "metrics: calls=3000 ok=3000" in out
    speedup = float(out.split("speed-up: ")[1].split("x")[0].replace(",", ""))
    assert speedup > 1.0, out
