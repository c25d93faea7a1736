"""A journal on this machine's disk, for tasks that may run on other machines: warned about.

A local path (or ``file://``) works when every task runs on the host that made the ``Journal``:
a ``local[...]`` or ``local-cluster[...]`` master (its executors are separate processes, on this
host: no warning), or a Spark Connect server on this host with one. On a cluster (a
``spark://``, ``yarn``, ``k8s://``, ... master) or through a Spark Connect server on another host,
each executor writes the path on its own disk: the outcomes are still correct, but a rerun whose
task lands on another host finds nothing and calls those rows again, and the driver's
writability check proved nothing about the executors' disks.

It is a warning (:class:`JournalLocationWarning`), not a refusal: the path may well be a mount
every host shares (NFS, a FUSE-mounted bucket, ``/dbfs``), which nothing here can tell apart
from a private disk, and refusing would break exactly those setups. The warning names the fix.

Example::

    check_location(journal, df.sparkSession)    # on the driver, where the entry point is defined
"""
from __future__ import annotations

import warnings
from typing import Any

from ..journal.api import Journal

__all__ = ["JournalLocationWarning", "check_location"]

LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0")


class JournalLocationWarning(UserWarning):
    """A journal at a local path, for tasks that may run on other hosts."""


def check_location(journal: Journal | None, session: Any, what: str) -> None:
    """Warn when ``journal`` is a local path and ``session``'s tasks may run on another host."""
    if journal is None:
        return
    loc = journal.store.loc
    if not loc.is_local:
        return
    where = _elsewhere(session) if session is not None else None
    if where is None:
        return
    warnings.warn(JournalLocationWarning(
        f"{what}: aiospark.Journal({loc.shown!r}) is a path on this machine, and {where}: each host would "
        "keep its own journal, so a task that runs on another host than before calls its rows again. Use a "
        "directory every host mounts (NFS, a mounted bucket), an object store (s3://, gs://, abfs://, hdfs://) "
        "or redis://; silence this warning (warnings.filterwarnings) if the path is such a shared mount"),
        stacklevel=4)


def _elsewhere(session: Any) -> str | None:
    """Where tasks run when that may be another host (a phrase for the warning), else None."""
    host = None
    if type(session).__module__.startswith("pyspark.sql.connect"):  # a classic session's .client raises
        host = getattr(getattr(session, "client", None), "host", None)
    if host is not None and str(host).lower() not in LOOPBACK:
        return f"the tasks run on the executors of the Spark Connect server at {host}"
    try:
        if host is None:
            master = session.sparkContext.master
        else:
            master = session.conf.get("spark.master", None)
    except Exception:  # a Connect server that does not say: only its host is known, and it is this one
        return None
    if not master or str(master).startswith("local"):
        return None  # local[...] and local-cluster[...] (executor processes on this host): one filesystem
    return f"this session's master is {master}: its executors may run on other hosts"
