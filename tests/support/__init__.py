"""Test infrastructure (not shipped in the wheel): real servers on 127.0.0.1 for tests and benchmarks.

* :mod:`tests.support.service` -- a fault-injecting HTTP service (``FaultService``);
* :mod:`tests.support.servers` -- Redis and PostgreSQL servers in temporary directories.

Import it with the repository root on ``sys.path`` (pytest's rootdir, or ``python -m benchmarks.x``
from the root).
"""
