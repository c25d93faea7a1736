"""Command line of the fault-injecting test service.

Run it as ``python -m tests.support.service --latency 0.02 --error-rate 0.05``:
it prints ``http://127.0.0.1:PORT`` on the first stdout line and
``control http://127.0.0.1:PORT2`` (uncounted control port) on the second,
then serves until SIGTERM/SIGINT (or stdin EOF with ``--exit-on-stdin-eof``).
Every :class:`~tests.support.service_config.ServiceConfig` field is a flag
(``--max-concurrency 50``, ``--burst-429 100,10``, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from .service_config import LATENCY_DISTS, LOOPBACK_HOST, ServiceConfig
from .service_server import ServiceCore

__all__ = ["main"]


def _burst(text: str) -> tuple:
    try:
        every_n, length = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected EVERY_N,LENGTH, e.g. 100,10") from None
    return (every_n, length)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.service",
        description="Fault-injecting HTTP service on 127.0.0.1. Prints its URL on the first "
                    "stdout line (the uncounted control URL on the second) and serves until killed.",
    )
    types: dict[str, Any] = {"latency_dist": str, "host": str, "burst_429": _burst, "max_concurrency": int,
                             "overload_status": int, "seed": int, "port": int}
    for f in fields(ServiceConfig):
        kwargs: dict[str, Any] = {"type": types.get(f.name, float), "default": None,
                                  "help": f"(default {f.default!r})"}
        if f.name == "latency_dist":
            kwargs["choices"] = LATENCY_DISTS
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, **kwargs)
    parser.add_argument("--config-json", help="ServiceConfig fields as a JSON object (flags override it)")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="exit when stdin closes (used by FaultService(process=True))")
    return parser


def _raise_fd_limit(target: int = 65536) -> None:
    """Allow many concurrent connections: lift the soft open-files limit towards the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = target if hard == resource.RLIM_INFINITY else min(target, hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass


async def _serve(config: ServiceConfig, exit_on_stdin_eof: bool) -> None:
    _raise_fd_limit()
    core = ServiceCore(config)
    await core.start()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    if exit_on_stdin_eof:
        def watch_stdin() -> None:
            try:
                while os.read(0, 65536):  # raw fd: a buffered read would block interpreter exit
                    pass
            except (OSError, ValueError):
                pass
            loop.call_soon_threadsafe(done.set)

        threading.Thread(target=watch_stdin, daemon=True).start()
    sys.stdout.write(f"http://{LOOPBACK_HOST}:{core.port}\ncontrol http://{LOOPBACK_HOST}:{core.control_port}\n")
    sys.stdout.flush()
    try:
        await done.wait()
    finally:
        await core.close()


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: ``python -m tests.support.service [--latency 0.02 ...]``."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        base = json.loads(args.config_json) if args.config_json else {}
        flags = {f.name: getattr(args, f.name) for f in fields(ServiceConfig) if getattr(args, f.name) is not None}
        config = ServiceConfig.from_dict({**base, **flags})
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    loop = asyncio.new_event_loop()  # this process's one loop, for its whole life
    try:
        loop.run_until_complete(_serve(config, args.exit_on_stdin_eof))
    finally:
        loop.close()
    return 0


