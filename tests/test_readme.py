"""Every python block of the README runs as written, against real servers on 127.0.0.1.

Each block is a complete program; it runs in a namespace of its own (nothing carries over from the
block before), on the test run's Spark session (``aiospark.local_session`` returns the running one).
The only changes are the ones in ``SUBSTITUTIONS`` -- the README's ports and paths become the local
servers' and a temp dir, its 100,000 rows a few thousand -- and each must still match the README, so
an edited block cannot silently stop being tested. Every block has a check of what it did.
"""
from __future__ import annotations

import ast
import re
import select
import shlex
import subprocess
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aiospark.app.demo_openai import chat_answer, count_tokens
from aiospark.app.demo_service import DemoService, item
from tests.support.servers import RedisServer

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
PY_BLOCKS: list[str] = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
LLM_COMMAND = re.search(r"`(python -m aiospark\.app\.demo_service --openai[^`]*)`", TEXT)


@contextmanager
def readme_llm_endpoint():
    """The LLM section's endpoint, started by the command the README prints (its port made free)."""
    assert LLM_COMMAND, "the README no longer says how to start the demo OpenAI endpoint"
    argv = shlex.split(LLM_COMMAND.group(1).replace("--port 11434", "--port 0"))
    assert argv[0] == "python" and "--port" in argv
    proc = subprocess.Popen([sys.executable, *argv[1:]], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        url = proc.stdout.readline().strip() if ready else ""
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), (url, proc.poll())
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()


@pytest.fixture(scope="module")
def servers():
    """The servers the blocks call: the demo's HTTP service (5 ms per call), a Redis server and the
    demo OpenAI endpoint as the README starts it."""
    with DemoService(latency=0.005, jitter=0.001) as http, RedisServer() as redis_server, \
            readme_llm_endpoint() as llm:
        yield {"http": http, "redis": redis_server, "llm": llm}


def substitutions(servers, tmp: Path) -> list[tuple[str, str]]:
    """README text -> what the test runs instead (each must occur in the README)."""
    return [
        ("http://127.0.0.1:8080/", servers["http"].url + "/"),
        ("redis://127.0.0.1:6379/0", servers["redis"].url),
        ("http://127.0.0.1:11434/v1", servers["llm"]),
        ("--port 11434", "--port 0"),                      # the endpoint's command: any free port
        ("spark.range(100_000)", "spark.range(3_000)"),   # a few seconds instead of a minute
        ('"/tmp/enriched"', repr(str(tmp / "enriched"))),
        ('"/tmp/geo"', repr(str(tmp / "geo"))),
        ('"/tmp/journals/enrich-v1"', repr(str(tmp / "journal"))),
        ('"/tmp/journals/tickets-batch"', repr(str(tmp / "batch-journal"))),
    ]


def parquet_rows(path: Path) -> list[dict]:
    return pq.read_table(str(path)).to_pylist()


# -- one check per block, found by a line only that block has -------------------------------------
def check_ten_lines(out: str, tmp: Path) -> None:
    rows = parquet_rows(tmp / "enriched")
    assert len(rows) == 3_000
    assert all(r["name"] == item(str(r["id"]))["name"] for r in rows)


def check_wait(out: str, tmp: Path) -> None:
    ordered = out.index("|  a|  1.5|")
    assert out.index("| bb|  3.0|") > ordered  # ordered_wait: input order
    assert out.count("|  a|  1.5|") == 2 and out.count("| bb|  3.0|") == 2  # and the unordered one


def check_udf(out: str, tmp: Path) -> None:
    assert "|10.0.0.1|     NL|" in out
    assert re.search(r"\|  c\|\n\+---\+\n\| NL\|", out), out  # the SQL line


def check_lookup(out: str, tmp: Path) -> None:
    # the join (left: order 2 has no customer) and the same rows from SQL
    assert len(re.findall(r"\|\s*1\|\s*c1\|\s*Ada\|\s*1\|", out)) == 2, out
    assert len(re.findall(r"\|\s*2\|\s*null\|\s*null\|\s*null\|", out, flags=re.I)) == 2, out  # NULL on 4.x


def check_metrics(out: str, tmp: Path) -> None:
    line = next(text for text in out.splitlines() if text.startswith("geo: "))
    assert re.match(r"geo: \d+ tasks, calls=2000 ok=2000 retries=0 timeouts=0 failed=0 ", line), line
    assert len(parquet_rows(tmp / "geo")) == 2_000


def check_beyond_flink(out: str, tmp: Path) -> None:
    assert "[Row(id=13, _error='ValueError: the service refuses id 13')]" in out, out
    keyed = re.search(r"\[Row\(account=3, seq=3\), Row\(account=3, seq=13\), Row\(account=3, seq=23\), "
                      r"Row\(account=3, seq=33\), Row\(account=3, seq=43\)\]", out)
    assert keyed, out
    assert "[Row(sum(score)=49950.0)]" in out, out  # the columnar lane: every row, each id / 10


def check_llm(out: str, tmp: Path) -> None:
    prompt = sum(count_tokens(f"review number {i}") for i in range(500))
    line = next((text for text in out.splitlines() if text.startswith("500 {")), None)
    assert line, out
    usage = ast.literal_eval(line[len("500 "):])  # the endpoint's counts (other keys may come along)
    assert (usage["prompt_tokens"], usage["total_tokens"]) == (prompt, prompt), line
    assert re.search(r"\|\s*id\|\s*mood\|", out), out
    shown = re.findall(r"^\|\s*(\d+)\|(.*)\|$", out, flags=re.M)  # show() cuts at 20 characters
    assert len(shown) == 3 and all(chat_answer(f"review number {i}", 8)[:17] in mood for i, mood in shown), out


def check_http_client(out: str, tmp: Path) -> None:
    assert "200 True" in out, out


def check_structured(out: str, tmp: Path) -> None:
    shown = re.findall(r"^\|\s*(\d+)\|\s*(\S[^|]*?)\s*\|\s*(-?\d+|null|NULL)\|$", out, flags=re.M)
    assert [int(i) for i, _, _ in shown] == [0, 1, 2], out          # ordered, each with a label
    assert re.search(r"^\|\s*judged\|\n\+-+\+\n\|\s*200\|$", out, flags=re.M), out  # from SQL


def check_durable(out: str, tmp: Path) -> None:
    # the first run spends its budget exactly; the rerun (same journal) calls only the rest
    assert "budget 500: 500 calls, 500 rows done" in out, out
    assert "budget 2000: 1500 calls, 2000 rows done" in out, out


def check_idempotency(out: str, tmp: Path) -> None:
    # the same key for a row run after run, one per row, none shared with another function
    assert "same keys: True distinct: 100 shared with refund: 0" in out, out


def check_batch_lane(out: str, tmp: Path) -> None:
    # every row answered by a batch, each request submitted once, no live request
    assert "submitted 1000 in 1 batch(es)" in out, out
    assert "submitted again 0" in out, out
    assert "answered 1000 by batches 1000" in out, out


CHECKS: dict[str, Callable[[str, Path], None]] = {
    "class Geo(aiospark.AsyncFunction)": check_ten_lines,
    "async def price(row)": check_wait,
    "async def country(ip)": check_udf,
    "aiospark.lookup_join(orders, customers": check_lookup,
    'Metrics("geo")': check_metrics,
    "async def score_many(rows)": check_beyond_flink,
    "OpenAIEmbeddings(": check_llm,
    "print(out.count(), out.first().name.startswith": check_http_client,
    "response_format=": check_structured,
    "aiospark.Journal(\"/tmp/journals/enrich-v1\"": check_durable,
    '"Idempotency-Key": key': check_idempotency,
    "aiospark.submit_batches(": check_batch_lane,
}


def check_for(block: str) -> Callable[[str, Path], None]:
    found = [check for marker, check in CHECKS.items() if marker in block]
    assert len(found) == 1, f"a README block without exactly one check in tests/test_readme.py:\n{block[:300]}"
    return found[0]


def test_every_block_has_one_check_and_every_check_a_block():
    assert len(PY_BLOCKS) == len(CHECKS)
    assert {check_for(block) for block in PY_BLOCKS} == set(CHECKS.values())


def test_substitutions_match_the_readme(servers, tmp_path):
    for readme_text, _ in substitutions(servers, tmp_path):
        assert readme_text in TEXT, f"README no longer contains {readme_text!r}: update SUBSTITUTIONS"


@pytest.mark.parametrize("index", range(len(PY_BLOCKS)), ids=[f"block{i + 1}" for i in range(len(PY_BLOCKS))])
def test_block_runs(index, spark, servers, tmp_path, capsys):
    code = PY_BLOCKS[index]
    for readme_text, local in substitutions(servers, tmp_path):
        code = code.replace(readme_text, local)
    namespace = {"__name__": f"readme_block_{index + 1}"}  # not importable: workers get it by value
    # dont_inherit: the block runs as a script of its own would, not under this file's
    # `from __future__ import annotations` (a pydantic model's annotations must resolve)
    exec(compile(code, f"{README} (python block {index + 1})", "exec", dont_inherit=True), namespace)
    check_for(PY_BLOCKS[index])(capsys.readouterr().out, tmp_path)


def test_readme_names_every_entry_point_and_the_demo():
    for name in ("ordered_wait", "unordered_wait", "async_udf", "lookup_join", "lookup_udf", "aiospark demo"):
        assert name in TEXT


def test_the_two_commands_are_the_ones_ci_runs():
    """The README's test command installs the ``test`` extra and runs ``python -m pytest``, like .ci/run."""
    first = re.search(r"## The two commands\n+```bash\n(.*?)```", TEXT, flags=re.S)
    assert first, "the README lost its two commands"
    commands = [line.split("#")[0].strip() for line in first.group(1).strip().splitlines()]
    assert commands == ["pip install -e . && aiospark demo", 'pip install -e ".[test]" && python -m pytest']
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".[test]" in ci and "-m pytest" in ci
