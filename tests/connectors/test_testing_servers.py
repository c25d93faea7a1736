import os

import psutil
import pytest

from tests.support import servers
from tests.support.servers import PostgresServer, RedisServer, ServerNotAvailable


def test_redis_server_starts_and_cleans_up():
    srv = RedisServer()
    with srv:
        pid, tmp = srv._proc.pid, srv._tmp
        assert srv.url == f"redis://127.0.0.1:{srv.port}/0"
        c = srv.client()
        assert c.ping() and c.config_get("bind")["bind"] == "127.0.0.1"
        assert c.config_get("save")["save"] == "" and c.config_get("appendonly")["appendonly"] == "no"
        c.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not os.path.exists(tmp)
    srv.stop()  # idempotent


def test_redis_missing_binary_is_a_clear_error():
    with pytest.raises(ServerNotAvailable, match="apt-get install -y redis-server"):
        RedisServer(binary="/nonexistent/redis-server").start()


def test_postgres_missing_binaries_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(servers.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(servers.shutil, "which", lambda name: None)
    monkeypatch.delenv("AIOSPARK_PG_BIN", raising=False)
    with pytest.raises(ServerNotAvailable, match="apt-get install -y postgresql"):
        PostgresServer(bin_dir="/nonexistent").start()


def test_postgres_server_listens_on_loopback_and_cleans_up():
    srv = PostgresServer(user="tester", database="testdb")
    with srv:
        pid, tmp = srv._proc.pid, srv._tmp
        assert srv.dsn == f"postgresql://tester:{srv.password}@127.0.0.1:{srv.port}/testdb"
        assert srv.password not in repr(srv)
        assert srv.execute("SHOW listen_addresses").strip() == "127.0.0.1"
        assert srv.execute("SELECT current_user, current_database()").strip() == "tester|testdb"
        children = psutil.Process(pid).children(recursive=True)
        conns = [c for c in psutil.Process(pid).net_connections() if c.status == "LISTEN"]
        assert conns and all(c.laddr.ip == "127.0.0.1" for c in conns)
    assert not os.path.exists(tmp)
    for p in [pid] + [c.pid for c in children]:
        assert not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE
