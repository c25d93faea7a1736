"""The README's ``spark-submit`` command runs ``aiospark enrich`` under a real ``spark-submit``.

The command is taken from the README as written; only the Parquet paths, the service's port and the
master (``local[1]``, one core for a small job) change, and ``spark-submit`` / ``python`` are the
ones of this interpreter (pyspark's own ``bin/spark-submit``).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest

from aiospark.app.demo_service import DemoService, item

README = Path(__file__).resolve().parents[2] / "README.md"
SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"


def readme_command() -> str:
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S) if "spark-submit" in b]
    assert len(blocks) == 1, "the README should show one spark-submit command"
    return blocks[0].replace("\\\n", " ").strip()


def test_launcher_runs_as_a_plain_file():
    """What spark-submit does with its application: ``python <file>`` outside any package."""
    import aiospark.app.spark_submit as launcher

    done = subprocess.run([sys.executable, launcher.PATH, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "enrich" in done.stdout and "demo" in done.stdout


@pytest.mark.timeout(600)
def test_readme_spark_submit_command(tmp_path):
    keys = [str(i) for i in range(300)]
    pq.write_table(pa.table({"id": keys}), tmp_path / "in.parquet")
    command = readme_command()
    for readme_text, local in (("spark-submit ", shlex.quote(str(SPARK_SUBMIT)) + " "),
                               ("$(python ", f"$({shlex.quote(sys.executable)} "),
                               ("'local[2]'", "'local[1]'")):
        assert readme_text in command, f"README's spark-submit command changed: {command}"
        command = command.replace(readme_text, local, 1)
    with DemoService(latency=0.005, jitter=0.001) as service:
        assert "http://127.0.0.1:8080/" in command
        command = command.replace("http://127.0.0.1:8080/", service.url + "/")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)  # what the README asks for
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=540)
        served = service.stats()["requests"]
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert "300 rows" in done.stdout, done.stdout
    rows = pq.read_table(str(tmp_path / "out.parquet")).to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(keys)
    assert all(r["name"] == item(r["id"])["name"] for r in rows)
    assert served == len(keys)
