"""Configuration of the fault-injecting test service (see :mod:`tests.support.service`).

:class:`ServiceConfig` is a frozen, validated dataclass.  It is shared by the
in-thread and the out-of-process mode and travels to the child process (and
over ``POST /config``) as JSON via :meth:`ServiceConfig.to_dict` /
:meth:`ServiceConfig.from_dict`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["ServiceConfig", "LOOPBACK_HOST", "LATENCY_DISTS", "FAULT_RATE_FIELDS"]

#: The only address the service may bind: traffic must stay on this machine.
LOOPBACK_HOST = "127.0.0.1"
#: Accepted values of :attr:`ServiceConfig.latency_dist`.
LATENCY_DISTS = ("fixed", "uniform", "lognormal")
#: Fault fractions drawn from one random number per request (their sum must be <= 1).
FAULT_RATE_FIELDS = ("error_rate", "hang_rate", "reset_rate", "slow_body_rate", "rate_429")
#: Fields that cannot change on a running service.
_STATIC_FIELDS = ("host", "port")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class ServiceConfig:
    """Behaviour of a :class:`~tests.support.service.FaultService`.

    Latency (applied to ``/item``, ``/batch`` and ``/echo``):

    * ``latency`` -- seconds per request (the median for ``"lognormal"``).
    * ``latency_dist`` -- ``"fixed"`` (default), ``"uniform"`` (``latency +/- jitter``)
      or ``"lognormal"`` (``latency * exp(sigma * N(0, 1))``).
    * ``slow_fraction`` / ``slow_latency`` -- this fraction of requests takes
      ``slow_latency`` seconds instead (head-of-line blocking tests).

    Faults (fractions of ``/item`` and ``/batch`` requests, one draw per request,
    so they are mutually exclusive and must sum to at most 1):

    * ``error_rate`` -- answer 500 or 503 (half each) after the latency.
    * ``hang_rate`` -- never answer; the connection is held until the client
      gives up or the service stops.
    * ``reset_rate`` -- after the latency, abort the TCP connection without a response.
    * ``slow_body_rate`` -- after the latency send the headers, then dribble
      the body over ``slow_body_seconds``.
    * ``rate_429`` -- answer 429 at once with ``Retry-After: <retry_after>``.
    * ``burst_429=(every_n, length)`` -- additionally, of every ``every_n``
      consecutive ``/item``/``/batch`` requests the last ``length`` get 429
      (counted from start or the last ``seed`` change, not from ``reset_stats``).

    Capacity: ``max_concurrency`` -- when that many requests are already being
    served, further ones are rejected at once with ``overload_status`` (503 or 429).

    ``seed`` makes the fault and latency draws reproducible; ``port=0`` picks a
    free port; ``host`` must be ``"127.0.0.1"``.

    Example::

        cfg = ServiceConfig(latency=0.02, error_rate=0.1, seed=7)
        cfg2 = cfg.replace(error_rate=0.0)      # validated copy
    """

    latency: float = 0.02
    latency_dist: str = "fixed"
    jitter: float = 0.0
    sigma: float = 0.5
    slow_fraction: float = 0.0
    slow_latency: float = 2.0
    error_rate: float = 0.0
    hang_rate: float = 0.0
    reset_rate: float = 0.0
    slow_body_rate: float = 0.0
    slow_body_seconds: float = 1.0
    rate_429: float = 0.0
    retry_after: float = 1.0
    burst_429: tuple[int, int] | None = None
    max_concurrency: int | None = None
    overload_status: int = 503
    seed: int | None = None
    host: str = LOOPBACK_HOST
    port: int = 0

    def __post_init__(self) -> None:
        # -- addresses -----------------------------------------------------
        if self.host != LOOPBACK_HOST:
            raise ValueError(
                f"host={self.host!r} is not allowed: the test service only listens on "
                f"loopback; use host={LOOPBACK_HOST!r} (the default)"
            )
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 0 <= self.port <= 65535:
            raise ValueError(f"port={self.port!r} must be an int in [0, 65535] (0 picks a free port)")

        # -- latency -------------------------------------------------------
        for name in ("latency", "jitter", "sigma", "slow_latency", "slow_body_seconds", "retry_after"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}={value!r} must be a finite number of seconds >= 0")
        if self.latency_dist not in LATENCY_DISTS:
            raise ValueError(f"latency_dist={self.latency_dist!r} must be one of {', '.join(map(repr, LATENCY_DISTS))}")
        if self.latency_dist == "uniform" and self.jitter > self.latency:
            raise ValueError(
                f"jitter={self.jitter} exceeds latency={self.latency}: with latency_dist='uniform' "
                "the latency would go negative; lower jitter or raise latency"
            )

        # -- fractions -------------------------------------------------------
        for name in ("slow_fraction",) + FAULT_RATE_FIELDS:
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r} must be a fraction in [0, 1] (e.g. 0.05 for 5% of requests)")
        total = sum(getattr(self, name) for name in FAULT_RATE_FIELDS)
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"fault rates sum to {total:g} > 1 ({', '.join(FAULT_RATE_FIELDS)} are exclusive "
                "outcomes of one draw per request); lower some of them"
            )

        # -- bursts / capacity / seed ----------------------------------------
        if self.burst_429 is not None:
            burst = self.burst_429
            if (
                not isinstance(burst, (tuple, list))
                or len(burst) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in burst)
                or not 1 <= burst[1] <= burst[0]
            ):
                raise ValueError(
                    f"burst_429={burst!r} must be None or (every_n, length) with ints "
                    "1 <= length <= every_n, e.g. (100, 10): 10 of every 100 requests get 429"
                )
            object.__setattr__(self, "burst_429", (int(burst[0]), int(burst[1])))
        if self.max_concurrency is not None and (
            not isinstance(self.max_concurrency, int)
            or isinstance(self.max_concurrency, bool)
            or self.max_concurrency < 1
        ):
            raise ValueError(f"max_concurrency={self.max_concurrency!r} must be None (unlimited) or an int >= 1")
        if self.overload_status not in (429, 503):
            raise ValueError(f"overload_status={self.overload_status!r} must be 503 or 429")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ValueError(f"seed={self.seed!r} must be None or an int")

    # ------------------------------------------------------------------
    def replace(self, **changes: Any) -> ServiceConfig:
        """Return a validated copy with ``changes`` applied (unknown names raise ``TypeError``)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise TypeError(f"unknown ServiceConfig field(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    def runtime_replace(self, **changes: Any) -> ServiceConfig:
        """Like :meth:`replace` but refuses to change ``host``/``port`` (fixed once listening)."""
        for name in _STATIC_FIELDS:
            if name in changes and changes[name] != getattr(self, name):
                raise ValueError(f"{name} cannot change on a running service; start a new FaultService instead")
        return self.replace(**changes)

    def to_dict(self) -> dict:
        """JSON-compatible dict of all fields (``burst_429`` becomes a list)."""
        data = dataclasses.asdict(self)
        if data["burst_429"] is not None:
            data["burst_429"] = list(data["burst_429"])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServiceConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``TypeError``."""
        return cls().replace(**dict(data))
