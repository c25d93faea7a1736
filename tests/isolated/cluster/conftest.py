"""A real standalone Spark cluster (master + worker JVMs on 127.0.0.1) and a classic session on it.

The master and the worker run as child processes, each in a process group of its own (the worker's
executors and their Python workers join the worker's group). Teardown always stops the session and
then kills both groups, whatever happened. As a second line of defence each daemon gets
``PR_SET_PDEATHSIG``: should this pytest process die without a teardown, the kernel sends the daemons
SIGTERM.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT = 90.0
_PR_SET_PDEATHSIG = 1


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _java_home() -> str | None:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    return str(Path(os.path.realpath(java)).parents[1]) if java else None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except Exception:
        pass


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


class Daemon:
    """One Spark daemon (``spark-class <main class> ...``) with its log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path):
        self.name = name
        self.log = log
        spark_class = Path(env["SPARK_HOME"]) / "bin" / "spark-class"
        self._log_file = open(log, "wb")
        self.proc = subprocess.Popen([str(spark_class), *args], env=env, cwd=str(log.parent),
                                     stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=_die_with_parent)

    def wait_for(self, needle: str, deadline: float) -> None:
        while True:
            if needle in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before it was ready:\n"
                                   f"{_tail(self.log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready within {START_TIMEOUT}s (no {needle!r} in its "
                                   f"log):\n{_tail(self.log)}")
            time.sleep(0.25)

    def kill(self) -> None:
        """SIGTERM the whole process group, then SIGKILL whatever is left of it."""
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + grace
            while time.monotonic() < end and _group_alive(pgid):
                self.proc.poll()  # reap the leader
                time.sleep(0.1)
            if not _group_alive(pgid):
                break
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log_file.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies count as gone: look for a member of the group that is still running
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Start a standalone master and two workers (1 core, 1g each); yield the master URL and the daemons
    (``worker``: the first one, whose work directory is ``work_dir``)."""
    import pyspark

    base = tmp_path_factory.mktemp("cluster")
    conf_dir = base / "conf"  # empty: no stray spark-defaults / spark-env
    work_dir = base / "work"
    conf_dir.mkdir()
    work_dir.mkdir()
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": os.path.dirname(pyspark.__file__),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    })
    java_home = _java_home()
    if java_home:
        env["JAVA_HOME"] = java_home

    port, ui_port = _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    daemons: list[Daemon] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT
        master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(ui_port)], env, base / "master.log")
        daemons.append(master)
        master.wait_for("I have been elected leader", deadline)
        workers = []
        for n in (1, 2):  # two workers, a core each: the executors of one job on two "hosts"
            folder = work_dir if n == 1 else base / f"work{n}"
            folder.mkdir(exist_ok=True)
            worker = Daemon(f"worker{n}", ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                                           "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
                                           "--work-dir", str(folder)], env, base / f"worker{n}.log")
            daemons.append(worker)
            workers.append(worker)
        for worker in workers:
            worker.wait_for("Successfully registered with master", deadline)
        worker = workers[0]
        yield {"url": master_url, "master": master, "worker": worker, "workers": workers, "work_dir": work_dir}
    finally:
        for daemon in reversed(daemons):  # worker first: it takes its executors down with it
            daemon.kill()


@pytest.fixture(scope="module")
def cluster_spark(cluster):
    """A classic session whose executors run on the standalone worker."""
    import aiospark

    session = aiospark.local_session(cluster["url"], app_name="aiospark-cluster-tests", conf={
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.executorEnv.PYTHONPATH": str(ROOT),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100",
    })
    try:
        assert session.sparkContext.master == cluster["url"]
        _wait_for_executor(session, cluster)
        yield session
    finally:
        session.stop()


def _wait_for_executor(session, cluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    tracker = session.sparkContext._jsc.sc().statusTracker()
    while len(tracker.getExecutorInfos()) < 3:  # the driver plus an executor on each worker
        if time.monotonic() > deadline:
            raise RuntimeError(f"not an executor on each worker within {START_TIMEOUT}s; worker logs:\n"
                               + "\n".join(_tail(w.log) for w in cluster["workers"]))
        time.sleep(0.25)
