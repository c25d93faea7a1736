"""Issue 46, through the ``aiospark`` command (run in this process on the session's local Spark, see
tests/cli/enrich_support.py; an HTTP service on 127.0.0.1): input values reach the service and
OUTPUT exactly as written; inputs Spark reads (compressed, with a BOM, long header fields, any
column name, several files) are read as Spark reads them; --timeout bounds each request."""
from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq

from aiospark.spark.compat import SPARK_VERSION
from tests.cli.enrich_support import EchoServer, aiospark, no_spark_env, read_csv_dir, read_json_lines

ZIPS = ["007", "01234", "+44", "-0", "1.10", "1e3", " 12"]


def test_csv_values_are_sent_and_written_as_written(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text("id,zip,price,at\n" + "".join(
        f"{i},{z},1.10,2024-03-01T10:00:00+05:30\n" for i, z in enumerate(ZIPS)))
    out = tmp_path / "out"
    with EchoServer() as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + "/z/{zip}", "--schema", "seen STRING",
                   "--output-format", "csv", "--master", "local[1]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(server.paths) == sorted(f"/z/{z}" for z in ZIPS)
    rows = read_csv_dir(out)
    assert sorted(r["zip"] for r in rows) == sorted(ZIPS)
    by_seen = {r["seen"]: r for r in rows}
    for z in ZIPS:
        row = by_seen[f"/z/{z}"]
        assert row["zip"] == z and row["price"] == "1.10" and row["at"] == "2024-03-01T10:00:00+05:30"


def test_input_schema_declares_the_types(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text("id,zip\n1,007\n2,+44\n")
    out = tmp_path / "out.parquet"
    with EchoServer() as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + "/z/{zip}", "--schema", "seen STRING",
                   "--input-schema", "id INT, zip INT", "--master", "local[1]")
    assert done.returncode == 0, done.stderr[-3000:]
    table = pq.read_table(out)
    assert str(table.schema.field("id").type) == "int32" and str(table.schema.field("zip").type) == "int32"
    assert sorted(server.paths) == ["/z/44", "/z/7"]  # what the user asked for: integers
    bad = aiospark("enrich", str(src), str(tmp_path / "o.json"), "--url", server.url + "/z/{zip}",
                   "--schema", "seen STRING", "--input-schema", "id INTT", env=no_spark_env())
    assert bad.returncode == 2 and "--input-schema" in bad.stderr and "INTT" in bad.stderr, bad.stderr


def test_json_numbers_keep_their_text_or_are_refused_before_any_call(tmp_path, cli):
    if SPARK_VERSION < (4, 0):  # PySpark 3.5 reads a fractional JSON number as a double: refused
        _json_numbers_spark_35_would_change_are_refused_before_any_call(tmp_path, cli)
        return
    src = tmp_path / "in.json"
    records = ['{"id": 9007199254740993, "price": 1.10, "big": 123456789012345678901234567890, '
               '"e": 1e2, "at": "2024-03-01T10:00:00+05:30", "zip": "007", "ok": true}',
               '{"id": -5, "price": 2.5, "big": 1, "e": 0.1000000000000000055511151231257827, '
               '"at": "2024-03-01T10:00:00Z", "zip": "+44", "ok": false}']
    src.write_text("\n".join(records) + "\n")
    out = tmp_path / "out.json"
    with EchoServer() as server:
        done = cli("enrich", str(src), str(out), "--url", server.url + "/j/{id}/{price}/{big}/{e}/{zip}",
                   "--schema", "seen STRING", "--master", "local[1]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(server.paths) == sorted([
        "/j/9007199254740993/1.10/123456789012345678901234567890/1e2/007",
        "/j/-5/2.5/1/0.1000000000000000055511151231257827/+44"])
    text = "".join(p.read_text() for p in out.glob("part-*"))
    assert '"id":9007199254740993' in text and '"price":"1.10"' in text and '"at":"2024-03-01T10:00:00+05:30"' in text
    assert '"big":"123456789012345678901234567890"' in text and '"e":"1e2"' in text and '"ok":true' in text
    rows = {r["id"]: r for r in read_json_lines(out)}
    assert rows[9007199254740993]["zip"] == "007" and rows[-5]["e"] == "0.1000000000000000055511151231257827"


def _json_numbers_spark_35_would_change_are_refused_before_any_call(tmp_path, cli):
    src = tmp_path / "in.json"
    src.write_text('{"id": 1, "price": 1.10, "big": 123456789012345678901234567890}\n'
                   '{"id": 2, "price": 2.5, "big": 1}\n')
    ints = tmp_path / "ints.json"
    ints.write_text('{"id": 1, "big": 123456789012345678901234567890}\n{"id": 2, "big": 1}\n')
    with EchoServer() as server:
        url = server.url + "/j/{id}/{price}"
        refused = cli("enrich", str(src), str(tmp_path / "o1.json"), "--url", url,
                      "--schema", "seen STRING", "--master", "local[1]")
        declared = cli("enrich", str(src), str(tmp_path / "o2.json"), "--url", url, "--schema", "seen STRING",
                       "--input-schema", "id BIGINT, price STRING, big STRING", "--master", "local[1]")
        assert server.paths == []  # nothing was called: 1.10 would have reached the service as 1.1
        as_double = cli("enrich", str(src), str(tmp_path / "o3.json"), "--url", url, "--schema", "seen STRING",
                        "--input-schema", "id BIGINT, price DOUBLE, big STRING", "--master", "local[1]")
        whole = cli("enrich", str(ints), str(tmp_path / "o4.json"), "--url", server.url + "/i/{big}",
                    "--schema", "seen STRING", "--master", "local[1]")
    for done in (refused, declared):
        assert done.returncode == 2, done.stderr[-3000:]
        assert "price" in done.stderr and "--input-schema" in done.stderr and "1.1" in done.stderr, done.stderr
        assert "big" not in done.stderr.split("hold numbers")[0]  # integers are copied as written
    assert as_double.returncode == 0, as_double.stderr[-3000:]  # what the user declared: doubles
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert sorted(p for p in server.paths if p.startswith("/i/")) == ["/i/1", "/i/123456789012345678901234567890"]
    assert sorted(p for p in server.paths if p.startswith("/j/")) == ["/j/1/1.1", "/j/2/2.5"]


def test_compressed_bom_long_header_and_any_column_name(tmp_path, cli):
    long_name = "L" * (200 << 10)  # a header field over Python's csv limit of 128 KiB
    src = tmp_path / "in.csv.gz"
    with gzip.open(src, "wt", encoding="utf-8", newline="") as handle:
        handle.write("\ufefforder-id,customer id," + long_name + "\n" + "".join(
            f"o-{i},c {i},x{i}\n" for i in range(5)))
    jsrc = tmp_path / "in.json.gz"
    with gzip.open(jsrc, "wt", encoding="utf-8") as handle:
        handle.write("\ufeff" + "".join(json.dumps({"order-id": f"j-{i}"}) + "\n" for i in range(3)))
    with EchoServer() as server:
        done = cli("enrich", str(src), str(tmp_path / "out.parquet"), "--url",
                   server.url + "/o/{order-id}?c={customer id}", "--schema", "seen STRING",
                   "--master", "local[1]")
        jdone = cli("enrich", str(jsrc), str(tmp_path / "jout.json"), "--url", server.url + "/o/{order-id}",
                    "--schema", "seen STRING", "--master", "local[1]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names[:3] == ["order-id", "customer id", long_name]
    assert sorted(server.paths[:5]) == [f"/o/o-{i}?c=c {i}" for i in range(5)]
    assert jdone.returncode == 0, jdone.stderr[-3000:]
    assert sorted(r["seen"] for r in read_json_lines(tmp_path / "jout.json")) == [f"/o/j-{i}" for i in range(3)]


def test_every_files_header_is_dropped_and_differing_headers_are_refused(tmp_path, cli):
    same = tmp_path / "same"
    same.mkdir()
    (same / "a.csv").write_text("id,zip\n1,007\n")
    # a data line that reads like the header is data: only each file's first line is its header
    (same / "b.csv").write_text("id,zip\n2,01234\nid,zip\n")
    with EchoServer() as server:
        done = cli("enrich", str(same), str(tmp_path / "out.json"), "--url", server.url + "/z/{id}/{zip}",
                   "--schema", "seen STRING", "--master", "local[2]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(server.paths) == ["/z/1/007", "/z/2/01234", "/z/id/zip"]
    differ = tmp_path / "differ"
    differ.mkdir()
    (differ / "a.csv").write_text("id,zip\n1,007\n")
    (differ / "b.csv").write_text("zip,id\n01234,2\n")
    refused = aiospark("enrich", str(differ), str(tmp_path / "o.json"), "--url", "http://127.0.0.1:9/z/{id}",
                       "--schema", "seen STRING", env=no_spark_env())
    assert refused.returncode == 2, refused.stderr
    assert "headers differ" in refused.stderr and "b.csv" in refused.stderr and "Traceback" not in refused.stderr


def test_timeout_bounds_each_request_and_the_row(tmp_path, cli):
    src = tmp_path / "in.csv"
    src.write_text("id\nslow\n")
    with EchoServer(delay=12.0) as server:  # slower than HttpLookup's own default of 10 s per request
        done = cli("enrich", str(src), str(tmp_path / "out.json"), "--url", server.url + "/s/{id}",
                   "--schema", "seen STRING", "--timeout", "120", "--master", "local[1]")
        calls_slow = len(server.paths)
        short = cli("enrich", str(src), str(tmp_path / "short.json"), "--url", server.url + "/s/{id}",
                    "--schema", "seen STRING", "--timeout", "3", "--retries", "0", "--master", "local[1]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert calls_slow == 1  # one request answered in 12 s, never cut at 10 s and retried
    assert [r["seen"] for r in read_json_lines(tmp_path / "out.json")] == ["/s/slow"]
    assert short.returncode == 1 and "timed out" in short.stderr and "Traceback" not in short.stderr, short.stderr
