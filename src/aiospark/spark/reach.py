"""Can the executors reach this process? Checked when an entry point is defined.

Budgets (without Redis), metrics and progress live in the process that defines the operator: its
tasks talk to the driver's collector over HTTP (:mod:`aiospark.spark.endpoint`). A classic session
advertises where Spark's own driver listens, which every executor reaches. A Spark Connect client
is not the driver: its executors belong to the server, and the collector listens on this
machine's 127.0.0.1, which executors reach only when the Connect server runs on this machine.

So, for a Connect session whose server (the ``sc://`` host) is not this machine and no
``AIOSPARK_METRICS_HOST`` (an address of this machine the cluster reaches, see
:mod:`aiospark.spark.endpoint`):

* ``budget=aiospark.Budget(...)`` without ``redis=`` is refused (ValueError naming both fixes):
  every row would fail with ``BudgetUnavailable``;
* metrics and ``progress=`` are announced with an :class:`UnreachableDriverWarning` (the job itself
  works; its counters would read 0), once per server host (and ``progress=``) and process.

Example::

    check_reach(df.sparkSession, budget=budget, what="unordered_wait")   # before any call is made
"""
from __future__ import annotations

import ipaddress
import socket
import threading
import warnings
from typing import Any

from .endpoint import configured_host

__all__ = ["UnreachableDriverWarning", "check_reach", "remote_connect_host"]


class UnreachableDriverWarning(UserWarning):
    """A Spark Connect server elsewhere cannot reach this client's metrics and progress."""


_warned: set[tuple[str, bool]] = set()
_warned_lock = threading.Lock()


def remote_connect_host(session: Any) -> str | None:
    """The ``sc://`` host of a Spark Connect ``session`` whose server is not on this machine;
    None for a classic session or a server on this machine (a loopback address, ``localhost``,
    this machine's own name)."""
    if session is None or not type(session).__module__.startswith("pyspark.sql.connect"):
        return None
    client = getattr(session, "client", None)
    host = getattr(client, "host", None)
    if not isinstance(host, str) or not host:
        return None
    bare = host.strip("[]").lower()
    if bare in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return None
    try:
        if ipaddress.ip_address(bare).is_loopback:
            return None
    except ValueError:
        pass
    if bare in {socket.gethostname().lower(), socket.getfqdn().lower()}:
        return None
    return host


def check_reach(session: Any, *, budget: Any = None, metrics: bool = True, progress: bool = False,
                what: str = "aiospark") -> None:
    """Refuse a driver-held budget, and announce metrics/progress that would read 0, when
    ``session`` is a Connect session whose executors cannot reach this process (module doc)."""
    host = remote_connect_host(session)
    if host is None or configured_host() is not None:
        return
    reach = ("set AIOSPARK_METRICS_HOST to an address of this machine that the cluster's executors reach "
             "(host or host:port; AIOSPARK_METRICS_BIND for the local side of a tunnel or NAT)")
    if budget is not None and getattr(budget, "_ledger", None) is not None:
        raise ValueError(
            f"{what}(budget=...): the Spark Connect server at {host} runs its tasks on other machines, which "
            f"cannot reach this client's budget ledger (every row would fail with BudgetUnavailable). Keep the "
            f"budget in Redis: aiospark.Budget({budget.limit:g}, redis='redis://host:6379/0', name='...'), or "
            f"{reach}")
    if not (metrics or progress):
        return
    with _warned_lock:
        if (host, progress) in _warned:
            return
        _warned.add((host, progress))
    warnings.warn(
        f"{what}: the Spark Connect server at {host} runs its tasks on other machines, which cannot reach this "
        f"client: metrics{' and progress' if progress else ''} will read 0 (the tasks log theirs instead). To "
        f"see them, {reach}", UnreachableDriverWarning, stacklevel=3)
