"""Where the demo's CPU time went: per process group, read from ``/proc`` (Linux; elsewhere ``None``).

``aiospark demo`` runs the service, the Spark JVM, Spark's Python workers and the driver on one
machine. On a 2-core laptop they compete for the CPUs, and a call then waits for a CPU as much as
for the service; these figures let the demo say so with numbers instead of guessing.

Example::

    before = cpu_snapshot(os.getpid(), service_pid)
    ...                                           # run the job
    used = cpu_delta(before, cpu_snapshot(os.getpid(), service_pid))
    used["python workers"]                        # CPU seconds of Spark's Python workers meanwhile
"""
from __future__ import annotations

import os

GROUPS = ("service", "python workers", "spark jvm", "driver", "rest of the machine", "idle")


def _read_stat(pid: str) -> tuple | None:
    """(ppid, comm, cpu seconds) of one process, or None if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    comm = raw[raw.find("(") + 1:raw.rfind(")")]
    fields = raw[raw.rfind(")") + 2:].split()  # comm may hold spaces and parentheses: split after it
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / ticks


def _machine() -> tuple | None:
    """(busy, idle) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    busy = sum(values[:8]) - idle  # user..steal; guest time is already inside user
    return busy / ticks, idle / ticks


def cpu_snapshot(driver_pid: int, service_pid: int) -> dict[str, float] | None:
    """CPU seconds used so far by each group of :data:`GROUPS`; ``None`` without ``/proc``.

    Spark's JVM and its Python workers are the driver's descendants; "rest of the machine" is every
    other process (other users' jobs included), so the shares always add up to the CPUs' time.
    """
    machine = _machine()
    if machine is None:
        return None
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _read_stat(name)
            if stat is not None:
                procs[int(name)] = stat
    children: dict[int, list] = {}
    for pid, (ppid, _comm, _cpu) in procs.items():
        children.setdefault(ppid, []).append(pid)
    groups = dict.fromkeys(GROUPS, 0.0)
    stack = [driver_pid]
    while stack:  # the driver's process tree: the JVM, pyspark's daemon, its workers, the service
        pid = stack.pop()
        stack.extend(children.get(pid, ()))
        if pid not in procs:
            continue
        _ppid, comm, cpu = procs[pid]
        if pid == driver_pid:
            groups["driver"] += cpu
        elif pid == service_pid:
            groups["service"] += cpu
        elif comm == "java":
            groups["spark jvm"] += cpu
        else:
            groups["python workers"] += cpu
    busy, idle = machine
    groups["rest of the machine"] = busy - sum(groups.values())
    groups["idle"] = idle
    return groups


def cpu_delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    """``after - before`` per group (never below zero: a worker that exited takes its seconds along)."""
    if before is None or after is None:
        return None
    return {k: max(0.0, after[k] - before[k]) for k in GROUPS}


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
