"""Counting a server's client connections the way the server (or the kernel) sees them."""

from __future__ import annotations

import os
import time


def postgres_clients(dsn: str) -> int:
    """Client backends connected to the server of ``dsn`` (this probe's own session not counted)."""
    import asyncio

    import asyncpg

    async def probe() -> int:
        con = await asyncpg.connect(dsn)
        try:
            return await con.fetchval("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                                      "'client backend' AND pid <> pg_backend_pid()")
        finally:
            await con.close()

    return asyncio.run(probe())


def redis_clients(port: int, password: str | None = None) -> int:
    """Entries of Redis's CLIENT LIST, this probe's own connection not counted."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, password=password)
    try:
        return len(client.client_list()) - 1
    finally:
        client.close()


def _tcp_table():
    """Every socket of /proc/net/tcp{,6}: (local port, remote port, state, inode)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            yield (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[3],
                   fields[9])


def tcp_established(port: int) -> int:
    """Established TCP sockets whose local port is ``port`` (a server's accepted connections),
    read from /proc/net/tcp{,6}."""
    return sum(1 for local, _, state, _ in _tcp_table() if state == "01" and local == port)


def wait_until(probe, predicate, deadline: float = 60.0, step: float = 0.25):
    """Poll ``probe()`` until ``predicate(value)``; return the last value (generous deadline: the
    point is the final state, not how fast it is reached)."""
    end = time.monotonic() + deadline
    value = probe()
    while not predicate(value) and time.monotonic() < end:
        time.sleep(step)
        value = probe()
    return value


def python_workers() -> int:
    """PySpark Python worker processes alive on this machine: forks of a ``pyspark.daemon``
    (whose parent is also one); each may hold one client per source configuration."""
    daemons, parents = set(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if b"pyspark.daemon" in cmd:
            daemons.add(int(entry))
            parents[int(entry)] = ppid
    return sum(1 for pid, ppid in parents.items() if ppid in daemons)


def tcp_clients_by_process(port: int) -> dict[str, int]:
    """Established client sockets connected to ``port``, counted per owning process
    (``"<pid> <ppid> <command line>"``): what an assertion shows when a count is over its bound."""
    inodes = {inode for _, remote, state, inode in _tcp_table() if state == "01" and remote == port}
    owners: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            held = sum(1 for fd in os.listdir(f"/proc/{entry}/fd") if _link(f"/proc/{entry}/fd/{fd}")[8:-1] in inodes)
            if not held:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:80]
            with open(f"/proc/{entry}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        owners[f"{entry} {ppid} {cmd}"] = held
    return owners


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the descriptor closed meanwhile
        return ""
