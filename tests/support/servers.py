"""Real Redis and PostgreSQL servers on 127.0.0.1, in temporary directories, for tests.

Example::

    with RedisServer() as redis_srv, PostgresServer() as pg:
        lookup = RedisLookup("user:{id}", "name STRING", url=redis_srv.url)
        pg.execute("CREATE TABLE items (id int primary key, name text)")
        items = PostgresLookup("items", "id", "name STRING", dsn=pg.dsn)

Both start in a few seconds on a free port, keep all files in a temporary
directory, and are stopped (and the directory removed) on ``stop()``, on context
exit, when garbage-collected, at interpreter exit, and -- when started from the
main thread -- by the kernel if this process dies (``PR_SET_PDEATHSIG``).

PostgreSQL refuses to run as root: when running as root, ``initdb`` and
``postgres`` run as the ``postgres`` system user (setuid in the child, like
``runuser -u postgres --``) in a temporary directory owned by that user. The
server listens on 127.0.0.1 only, with its unix socket in the temporary directory;
it is stopped with SIGQUIT, which is what ``pg_ctl stop -m immediate`` sends.
"""

from __future__ import annotations

import ctypes
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from typing import Any

__all__ = ["PostgresServer", "RedisServer", "ServerNotAvailable", "free_port"]

HOST = "127.0.0.1"


class ServerNotAvailable(RuntimeError):
    """The server binary is missing or the server did not start."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


try:
    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _LIBC = None


def _death_signal(sig: int) -> Any:
    """preexec_fn asking the kernel to send ``sig`` to the child when we die (Linux)."""
    if _LIBC is None or threading.current_thread() is not threading.main_thread():
        return None  # PDEATHSIG fires when the *thread* that forked exits: main thread only

    def preexec() -> None:
        _LIBC.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


def _stop_process(proc: subprocess.Popen | None, sig: int, tmpdir: str | None) -> None:
    if proc is not None and proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        except ProcessLookupError:
            pass
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _make_tmpdir(prefix: str) -> str:
    """A new temp dir recording our pid; first removes such dirs whose owner died (SIGKILL)."""
    base = tempfile.gettempdir()
    for old in glob.glob(os.path.join(base, "aiospark-redis-*")) + glob.glob(
            os.path.join(base, "aiospark-pg-*")):
        try:
            with open(os.path.join(old, "owner.pid")) as f:
                pid = int(f.read().strip())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except (OSError, ValueError):
            pass
    path = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(path, "owner.pid"), "w") as f:
        f.write(str(os.getpid()))
    return path


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


class _Server:
    _proc: subprocess.Popen | None = None
    _tmp: str | None = None
    _finalizer: Any = None
    host = HOST
    port = 0

    def _track(self, sig: int) -> None:
        self._finalizer = weakref.finalize(self, _stop_process, self._proc, sig, self._tmp)

    def stop(self) -> None:
        """Stop the server and delete its temporary directory (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()
        self._finalizer = self._proc = self._tmp = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Any:
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisServer(_Server):
    """``redis-server`` on 127.0.0.1:<free port> with no persistence.

    Attributes: ``host``, ``port``, ``password`` (None unless given), ``url``
    (``redis://127.0.0.1:<port>/0``, without the password).
    """

    def __init__(self, *, password: str | None = None, binary: str | None = None,
                 startup_timeout: float = 10.0) -> None:
        self.password = password
        self.binary = binary
        self.startup_timeout = startup_timeout

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, password={'***' if self.password else None})"

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> RedisServer:
        if self.running:
            return self
        binary = self.binary or shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.access(binary, os.X_OK):
            raise ServerNotAvailable("redis-server not found; install redis-server: "
                                     "apt-get install -y redis-server")
        last = ""
        for _attempt in range(3):
            self._tmp = _make_tmpdir("aiospark-redis-")
            self.port = free_port()
            conf = os.path.join(self._tmp, "redis.conf")
            lines = [f"port {self.port}", f"bind {HOST}", 'save ""', "appendonly no",
                     f"dir {self._tmp}", f"logfile {os.path.join(self._tmp, 'redis.log')}",
                     "daemonize no", "protected-mode yes", "databases 16"]
            if self.password:
                lines.append(f"requirepass {self.password}")
            with open(os.open(conf, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write("\n".join(lines) + "\n")
            with open(os.path.join(self._tmp, "stdout.log"), "wb") as out:
                self._proc = subprocess.Popen(
                    [binary, conf], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    cwd=self._tmp, preexec_fn=_death_signal(signal.SIGTERM))
            self._track(signal.SIGTERM)
            ok, last = self._wait_ready()
            if ok:
                return self
            self.stop()
            if "in use" not in last:
                break
        raise ServerNotAvailable(f"redis-server did not start: {last}")

    def _wait_ready(self) -> tuple[bool, str]:
        import redis

        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                assert self._tmp is not None
                return False, (_tail(os.path.join(self._tmp, "redis.log"))
                               or _tail(os.path.join(self._tmp, "stdout.log")))
            try:
                client = redis.Redis(host=HOST, port=self.port, password=self.password,
                                     socket_connect_timeout=0.5, socket_timeout=0.5)
                try:
                    if client.ping():
                        return True, ""
                finally:
                    client.close()
            except redis.RedisError:
                time.sleep(0.02)
        return False, f"not answering PING after {self.startup_timeout}s"

    def client(self, **kwargs: Any) -> Any:
        """A synchronous ``redis.Redis`` client (decode_responses=True) for seeding data."""
        import redis

        return redis.Redis(host=HOST, port=self.port, password=self.password,
                           decode_responses=True, **kwargs)


def _pg_bin_dir(explicit: str | None) -> str:
    candidates = [explicit, os.environ.get("AIOSPARK_PG_BIN")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
                         reverse=True)
    found = shutil.which("initdb")
    candidates.append(os.path.dirname(found) if found else None)
    for d in candidates:
        if d and all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "postgres")):
            return d
    raise ServerNotAvailable("PostgreSQL server binaries (initdb, postgres) not found; install "
                             "postgresql: apt-get install -y postgresql")


class PostgresServer(_Server):
    """A throw-away PostgreSQL cluster on 127.0.0.1:<free port>.

    Creates ``user`` (LOGIN, with ``password``, random unless given) owning
    ``database``. Attributes: ``host``, ``port``, ``user``, ``password``,
    ``database``, ``dsn`` (``postgresql://user:password@127.0.0.1:port/database``).
    """

    def __init__(self, *, user: str = "aiospark", password: str | None = None,
                 database: str = "aiospark", bin_dir: str | None = None,
                 startup_timeout: float = 30.0) -> None:
        for what, name in (("user", user), ("database", database)):
            if not name.isidentifier():
                raise ValueError(f"{what} must be a plain identifier, got {name!r}")
        self.user, self.database = user, database
        self.password = password or secrets.token_hex(12)
        self.bin_dir = bin_dir
        self.startup_timeout = startup_timeout

    def __repr__(self) -> str:
        return f"PostgresServer(port={self.port}, user={self.user!r}, database={self.database!r})"

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{HOST}:{self.port}/{self.database}"

    def _child_kwargs(self) -> dict:
        kwargs: dict[str, Any] = {"cwd": self._tmp, "stdin": subprocess.DEVNULL,
                                  "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                          "HOME": self._tmp, "LC_ALL": "C", "LANG": "C"}}
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise ServerNotAvailable("running as root needs the 'postgres' system user "
                                         "(apt-get install -y postgresql creates it)") from None
            kwargs.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        return kwargs

    def start(self) -> PostgresServer:
        if self.running:
            return self
        bins = _pg_bin_dir(self.bin_dir)
        self._tmp = _make_tmpdir("aiospark-pg-")
        self._track(signal.SIGQUIT)
        kwargs = self._child_kwargs()
        if "user" in kwargs:
            os.chown(self._tmp, kwargs["user"], kwargs["group"])
        data = os.path.join(self._tmp, "data")
        init = subprocess.run(
            [os.path.join(bins, "initdb"), "-D", data, "-U", "postgres", "-E", "UTF8", "--locale=C",
             "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"],
            capture_output=True, text=True, timeout=120, **kwargs)
        if init.returncode != 0:
            self.stop()
            raise ServerNotAvailable(f"initdb failed: {(init.stderr or init.stdout).strip()[-800:]}")
        last = ""
        for _attempt in range(3):
            self.port = free_port()
            log = os.path.join(self._tmp, "postgres.log")
            with open(log, "ab") as out:
                self._proc = subprocess.Popen(
                    [os.path.join(bins, "postgres"), "-D", data, "-p", str(self.port),
                     "-c", f"listen_addresses={HOST}", "-c", f"unix_socket_directories={self._tmp}",
                     "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                     "-c", "max_connections=200", "-c", "shared_buffers=32MB"],
                    stdout=out, stderr=subprocess.STDOUT,
                    preexec_fn=_death_signal(signal.SIGQUIT), **kwargs)
            self._finalizer.detach()
            self._track(signal.SIGQUIT)
            ok, last = self._wait_ready(data, log)
            if ok:
                break
            _stop_process(self._proc, signal.SIGQUIT, None)
            if "in use" not in last and "could not" not in last:
                self.stop()
                raise ServerNotAvailable(f"postgres did not start: {last}")
        else:
            self.stop()
            raise ServerNotAvailable(f"postgres did not start: {last}")
        pw_sql = self.password.replace("'", "''")
        self._psql(superuser=True, commands=[
            f"CREATE ROLE \"{self.user}\" LOGIN PASSWORD '{pw_sql}'",
            f"CREATE DATABASE \"{self.database}\" OWNER \"{self.user}\""])
        return self

    def _wait_ready(self, data: str, log: str) -> tuple[bool, str]:
        pidfile = os.path.join(data, "postmaster.pid")
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False, _tail(log)
            try:
                with open(pidfile) as f:
                    lines = f.read().splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready":
                    return True, ""
            except OSError:
                pass
            time.sleep(0.02)
        return False, f"not ready after {self.startup_timeout}s: {_tail(log)}"

    def _psql(self, commands: list[str], superuser: bool = False) -> str:
        psql = os.path.join(_pg_bin_dir(self.bin_dir), "psql")
        if not os.access(psql, os.X_OK):
            psql = shutil.which("psql") or psql
        if superuser:
            target = ["-h", str(self._tmp), "-U", "postgres", "-d", "postgres"]
        else:
            target = ["-h", HOST, "-U", self.user, "-d", self.database]
        args = [psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-p", str(self.port), *target]
        for c in commands:
            args += ["-c", c]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PGPASSWORD": self.password,
               "PGCONNECT_TIMEOUT": "10", "LC_ALL": "C"}
        res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60,
                             stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise RuntimeError(f"psql failed: {res.stderr.strip().replace(self.password, '***')}")
        return res.stdout

    def execute(self, sql: str, *, superuser: bool = False) -> str:
        """Run SQL with psql as ``user`` (or the ``postgres`` superuser); return its output."""
        if not self.running:
            raise RuntimeError("PostgresServer is not running: call start() or use 'with'")
        return self._psql([sql], superuser=superuser)
