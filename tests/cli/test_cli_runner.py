"""The in-process runner of the CLI tests (tests/cli/enrich_support.py ``run_cli``, the ``cli``
fixture): it gives the command's exit code, stdout and stderr as a process would, applies ``env``
and ``cwd`` for the run only, and leaves the test process (fds, streams, environment, working
directory, SIGINT handler, Spark session) as it found it."""
from __future__ import annotations

import os
import signal
import sys

from tests.cli.enrich_support import EchoServer


def _process_state():
    fds = [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)]
    return dict(env=dict(os.environ), cwd=os.getcwd(), fds=fds, streams=(sys.stdout, sys.stderr),
                sigint=signal.getsignal(signal.SIGINT))


def test_the_runner_reports_as_a_process_and_restores_the_test_process(spark, cli, tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("id\na\nb\n")
    before = _process_state()
    with EchoServer() as server:
        url = server.url + "/item/{id}"
        # absolute paths: the JVM's working directory does not follow cwd=
        done = cli("enrich", str(src), str(tmp_path / "out.json"), "--url", url, "--schema", "seen STRING",
                   "--header-env", "X-Key=RUNNER_KEY", env=dict(os.environ, RUNNER_KEY="key-1"), cwd=tmp_path)
        headers = list(server.headers)
        typo = cli("enrich", str(src), str(tmp_path / "typo.json"), "--url", url, "--schema", "nme STRING")
    assert done.returncode == 0, done.stderr
    assert f"enriched {src} (csv)" in done.stdout and "2 rows in" in done.stdout and "metrics: " in done.stdout
    assert "2 rows" in done.stderr and "enriched" not in done.stderr  # the progress line, on stderr
    assert len(headers) == 2 and all(h["X-Key"] == "key-1" for h in headers)  # env= reached the command
    assert typo.returncode == 1 and "['nme']" in typo.stderr and typo.stdout == "", typo.stderr
    # the failed run's Spark log is in this test's TMPDIR (tempfile's cached directory was not used)
    log = typo.stderr.split("Spark's log: ")[1].split(";")[0].split(")")[0]
    assert os.path.dirname(log) == os.environ["TMPDIR"] and os.path.isfile(log), typo.stderr
    usage = cli("enrich", "in.csv", cwd=tmp_path)  # argparse's SystemExit is an exit code
    assert usage.returncode == 2 and "usage: aiospark enrich" in usage.stderr, usage.stderr
    assert _process_state() == before and "RUNNER_KEY" not in os.environ
    assert spark.range(0, 5, 1, 2).count() == 5  # the session the runs used is still up
