"""Thread <-> event-loop plumbing shared by the Spark adapters (no Spark import here).

One event loop per Python process runs in a daemon thread (:mod:`.worker_loop`); each Spark task
feeds it from its own thread through a :class:`.bridge.PartitionBridge`.
"""
from .bridge import run_partition
from .worker_loop import WorkerLoop, worker_loop

__all__ = ["WorkerLoop", "run_partition", "worker_loop"]
