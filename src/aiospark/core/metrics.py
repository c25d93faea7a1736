"""What every run reports: call counters and a latency histogram, cheap enough to update per call.

:class:`OperatorMetrics` is a bag of plain ``int`` counters (``__slots__``; the operator may just
do ``m.calls += 1``) plus a fixed log-spaced latency histogram: bucket bounds are
``10 µs * 1.1**k`` up to about 10 minutes, so a quantile read back from it is within 5% (relative)
of the exact one. Metrics of many tasks merge into job metrics (:meth:`OperatorMetrics.merge`)
and travel as JSON (:meth:`to_dict` / :meth:`from_dict`), e.g. from Spark workers to the driver.

Example::

    m = OperatorMetrics()
    m.calls += 1
    m.record_latency(0.012)
    m.successes += 1
    print(m)   # calls=1 ok=1 retries=0 timeouts=0 failed=0 error_rows=0 inflight_peak=0 p50=12.0ms ...

    job = OperatorMetrics()
    for d in per_task_dicts:
        job.merge(OperatorMetrics.from_dict(d))
"""
from __future__ import annotations

import math
import numbers
from bisect import bisect_left as _bisect_left
from bisect import bisect_right as _bisect
from collections.abc import Iterable
from typing import Any, cast

__all__ = ["OperatorMetrics"]

#: Lower bound of the first regular bucket (seconds); faster samples share one underflow bucket.
HISTOGRAM_MIN = 1e-5
#: Ratio between consecutive bucket bounds: a bucket's geometric middle is within
#: sqrt(1.1) - 1 = 4.9% of any value in it.
HISTOGRAM_FACTOR = 1.1
#: Regular buckets: 10 µs * 1.1**189 = 11 min; slower samples share one overflow bucket.
HISTOGRAM_BUCKETS = 189
_OVERFLOW = HISTOGRAM_BUCKETS + 1
_SIZE = HISTOGRAM_BUCKETS + 2   # [0] underflow, [1..N] regular, [N+1] overflow
# _UPPER[k] is the upper bound of bucket k, so bucket = bisect_right(_UPPER, seconds): bucket 0 is
# [0, 10 µs), bucket k is [10 µs * 1.1**(k-1), 10 µs * 1.1**k), the last one is open-ended.
_UPPER = [HISTOGRAM_MIN * HISTOGRAM_FACTOR ** k for k in range(HISTOGRAM_BUCKETS + 1)]

COUNTERS = ("calls", "successes", "retries", "timeouts", "failures", "error_rows", "rate_limited", "left_behind")
FORMAT_VERSION = 1


def _bucket_bounds(i: int) -> tuple[float, float]:
    if i == 0:
        return 0.0, HISTOGRAM_MIN
    if i == _OVERFLOW:
        return HISTOGRAM_MIN * HISTOGRAM_FACTOR ** HISTOGRAM_BUCKETS, math.inf
    return HISTOGRAM_MIN * HISTOGRAM_FACTOR ** (i - 1), HISTOGRAM_MIN * HISTOGRAM_FACTOR ** i


class OperatorMetrics:
    """Counters and a latency histogram of one operator (one task), or of many merged.

    Counters (plain ints, increment them directly or through ``record_*``):

    * ``calls`` -- attempts started (retries included)
    * ``successes`` -- attempts that returned a result
    * ``retries`` -- attempts scheduled again after a failure or a retried result
    * ``timeouts`` -- elements whose overall timeout fired
    * ``failures`` -- final failures (after retries)
    * ``error_rows`` -- final failures turned into output rows by ``on_error``
    * ``rate_limited`` -- calls that had to wait for the rate limit before starting
    * ``left_behind`` -- timed-out calls that ignored their cancel for the whole grace period and
      were left running (:mod:`aiospark.core.unwinding`); their elements count in ``timeouts``
    * ``inflight_peak`` -- the most calls in flight at once (``record_inflight``)
    * ``usage`` -- what the calls reported with :func:`~aiospark.core.usage.record_usage` (e.g. LLM tokens), by name

    Latency (seconds per attempt) goes to :meth:`record_latency`; read it back with
    :meth:`quantile`, :meth:`summary` or ``str()``.
    """

    __slots__ = COUNTERS + ("inflight_peak", "usage", "pending_latencies", "_counts", "_count", "_sum", "_min",
                            "_max")

    def __init__(self) -> None:
        self.calls = self.successes = self.retries = self.timeouts = 0
        self.failures = self.error_rows = self.rate_limited = self.left_behind = self.inflight_peak = 0
        self.usage: dict[str, float] = {}
        self._counts: list[int] = [0] * _SIZE
        self._count = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = 0.0
        #: latencies noted by the operator's calls and not yet in the histogram: appending a float
        #: costs a tenth of a ``record_latency`` call; :meth:`fold_latencies` adds them in bulk
        self.pending_latencies: list[float] = []

    # ------------------------------------------------------------------ recording (hot path)
    def record_latency(self, seconds: float) -> None:
        """Add one attempt's latency in seconds (O(log buckets), in C)."""
        if not seconds >= 0.0:  # negative or NaN: a caller bug, do not poison the histogram
            raise ValueError(f"latency must be seconds >= 0, got {seconds!r}")
        self._counts[_bisect(_UPPER, seconds)] += 1
        self._count += 1
        self._sum += seconds
        if seconds < self._min:
            self._min = seconds
        if seconds > self._max:
            self._max = seconds

    def record_latencies(self, seconds: list[float]) -> None:
        """Add many latencies at once (what the operator does: it buffers them per call).

        Sorted first (C), then each bucket the batch spans gets its count from one bisection:
        a batch that falls in one bucket (calls that all complete at once, or a fixed latency)
        costs one sort and two lookups instead of one bisection per latency.
        """
        if not seconds:
            return
        ordered = sorted(seconds)
        low, high, total = ordered[0], ordered[-1], sum(ordered)
        if not low >= 0.0 or total != total:  # a negative or NaN latency: a caller bug
            raise ValueError(f"latencies must be seconds >= 0, got min {low!r}, sum {total!r}")
        counts = self._counts
        first, last = _bisect(_UPPER, low), _bisect(_UPPER, high)
        start = 0
        for bucket in range(first, last):  # values below _UPPER[bucket] lie in this bucket or earlier
            end = _bisect_left(ordered, _UPPER[bucket], start)
            counts[bucket] += end - start
            start = end
        counts[last] += len(ordered) - start
        self._count += len(ordered)
        self._sum += total
        if low < self._min:
            self._min = low
        if high > self._max:
            self._max = high

    def fold_latencies(self) -> None:
        """Move :attr:`pending_latencies` into the histogram (on the thread that appends them)."""
        pending = self.pending_latencies
        if pending:
            taken = pending[:]
            del pending[:len(taken)]
            self.record_latencies(taken)

    def _settled(self) -> OperatorMetrics:
        """These metrics with the pending latencies in the histogram, for a reader: ``self`` when
        none are pending, else a copy, so that a reader on another thread (the Spark task's, while
        the loop's calls run) never writes what the loop writes."""
        if not self.pending_latencies:
            return self
        view = OperatorMetrics()
        view._add(self)
        view.record_latencies(self.pending_latencies[:])
        return view

    def record_call(self) -> None:
        self.calls += 1

    def record_success(self, seconds: float | None = None) -> None:
        """A successful attempt, with its latency when given."""
        self.successes += 1
        if seconds is not None:
            self.record_latency(seconds)

    def record_retry(self) -> None:
        self.retries += 1

    def record_timeout(self) -> None:
        self.timeouts += 1

    def record_failure(self) -> None:
        self.failures += 1

    def record_error_row(self) -> None:
        self.error_rows += 1

    def record_rate_limited(self) -> None:
        self.rate_limited += 1

    def record_inflight(self, inflight: int) -> None:
        """Note the current number of calls in flight (keeps the peak)."""
        if inflight > self.inflight_peak:
            self.inflight_peak = inflight

    # ------------------------------------------------------------------ reading
    @property
    def latency_count(self) -> int:
        """How many latencies were recorded."""
        return self._count + len(self.pending_latencies)

    @property
    def latency_mean(self) -> float | None:
        m = self._settled()
        return m._sum / m._count if m._count else None

    @property
    def latency_min(self) -> float | None:
        m = self._settled()
        return m._min if m._count else None

    @property
    def latency_max(self) -> float | None:
        m = self._settled()
        return m._max if m._count else None

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0..1) of the recorded latencies in seconds; ``None`` if there are none.

        Nearest-rank on the histogram: the geometric middle of the bucket holding the
        ``ceil(q * n)``-th smallest latency, clamped to the exact min/max (within 5% relative
        for latencies from 10 µs to about 11 minutes; ``q=0``/``q=1`` are the exact min/max).
        """
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be a number between 0 and 1 (e.g. 0.99), got {q!r}")
        if self.pending_latencies:
            return self._settled().quantile(q)
        n = self._count
        if not n:
            return None
        if q == 0.0:
            return self._min
        if q == 1.0:
            return self._max
        rank = max(1, math.ceil(q * n))
        seen = 0
        counts = self._counts
        for i in range(_SIZE):
            seen += counts[i]
            if seen >= rank:
                if i == _OVERFLOW:
                    return self._max
                lo, hi = _bucket_bounds(i)
                estimate = math.sqrt(lo * hi) if i else hi
                return min(max(estimate, self._min), self._max)
        return self._max  # pragma: no cover - counts always add up to n

    def summary(self) -> dict[str, Any]:
        """Counters plus latency in milliseconds: ``p50_ms``, ``p95_ms``, ``p99_ms``, ``mean_ms``,
        ``max_ms`` (``None`` when nothing was recorded) and ``latency_count``."""
        if self.pending_latencies:
            return self._settled().summary()
        out: dict[str, Any] = {name: getattr(self, name) for name in COUNTERS}
        out["inflight_peak"] = self.inflight_peak
        out["usage"] = dict(self.usage)
        out["latency_count"] = self._count
        for key, value in (("p50_ms", self.quantile(0.5)), ("p95_ms", self.quantile(0.95)),
                           ("p99_ms", self.quantile(0.99)), ("mean_ms", self.latency_mean),
                           ("max_ms", self.latency_max)):
            out[key] = None if value is None else value * 1000.0
        return out

    def __str__(self) -> str:
        if self.pending_latencies:
            return str(self._settled())
        p = [_fmt_ms(self.quantile(q)) for q in (0.5, 0.95, 0.99)]
        return (f"calls={self.calls} ok={self.successes} retries={self.retries} "
                f"timeouts={self.timeouts} failed={self.failures} error_rows={self.error_rows} "
                f"inflight_peak={self.inflight_peak} p50={p[0]} p95={p[1]} p99={p[2]}"
                + (f" left_behind={self.left_behind}" if self.left_behind else "")
                + "".join(f" {name}={_fmt_amount(amount)}" for name, amount in sorted(self.usage.items())))

    def __repr__(self) -> str:
        return f"<OperatorMetrics {self} rate_limited={self.rate_limited}>"

    # ------------------------------------------------------------------ combining / transport
    def merge(self, other: OperatorMetrics) -> OperatorMetrics:
        """Add ``other`` into this one (sums counters and histograms, max of peaks); returns self."""
        if not isinstance(other, OperatorMetrics):
            raise TypeError(f"can only merge OperatorMetrics, got {type(other).__name__}")
        return self._add(other._settled())

    def _add(self, other: OperatorMetrics) -> OperatorMetrics:
        """:meth:`merge` without ``other``'s pending latencies."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.inflight_peak > self.inflight_peak:
            self.inflight_peak = other.inflight_peak
        for name, amount in other.usage.items():
            self.usage[name] = self.usage.get(name, 0) + amount
        if other._count:
            counts = self._counts
            for i, c in enumerate(other._counts):
                if c:
                    counts[i] += c
            self._count += other._count
            self._sum += other._sum
            self._min = min(self._min, other._min)
            self._max = max(self._max, other._max)
        return self

    @classmethod
    def merged(cls, parts: Iterable[OperatorMetrics]) -> OperatorMetrics:
        """A new object holding the sum of ``parts``."""
        total = cls()
        for part in parts:
            total.merge(part)
        return total

    def copy(self) -> OperatorMetrics:
        return OperatorMetrics().merge(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (counters, peak, sparse histogram); :meth:`from_dict` inverts it."""
        if self.pending_latencies:
            return self._settled().to_dict()
        counts = self._counts[:]  # one copy: count and counts agree even while the loop thread records
        count = sum(counts)
        return {
            "version": FORMAT_VERSION,
            **{name: getattr(self, name) for name in COUNTERS},
            "inflight_peak": self.inflight_peak,
            "usage": dict(self.usage),
            "latency": {
                "min_seconds": HISTOGRAM_MIN, "factor": HISTOGRAM_FACTOR, "buckets": HISTOGRAM_BUCKETS,
                "count": count, "sum": self._sum,
                "min": self._min if count else None, "max": self._max if count else None,
                "counts": [[i, c] for i, c in enumerate(counts) if c],
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OperatorMetrics:
        """Rebuild metrics from :meth:`to_dict` output (e.g. after ``json.loads``)."""
        if not isinstance(data, dict):
            raise TypeError(f"from_dict needs the dict made by OperatorMetrics.to_dict(), got {type(data).__name__}")
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported OperatorMetrics format version {data.get('version')!r} "
                             f"(this aiospark reads version {FORMAT_VERSION})")
        m = cls()
        try:
            for name in COUNTERS + ("inflight_peak",):
                value = data[name]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"{name} must be an int >= 0, got {value!r}")
                setattr(m, name, value)
            usage = data.get("usage", {})  # absent in metrics written before usage existed
            if not isinstance(usage, dict):
                raise ValueError(f"usage must be a dict of name -> amount, got {usage!r}")
            for name, amount in usage.items():
                m.usage[str(name)] = check_amount(name, amount)
            lat = data["latency"]
            if (lat["min_seconds"], lat["factor"], lat["buckets"]) != (
                    HISTOGRAM_MIN, HISTOGRAM_FACTOR, HISTOGRAM_BUCKETS):
                raise ValueError("histogram layout differs from this aiospark's "
                                 f"({HISTOGRAM_MIN}, {HISTOGRAM_FACTOR}, {HISTOGRAM_BUCKETS})")
            total = 0
            for i, c in lat["counts"]:
                if not (isinstance(i, int) and 0 <= i < _SIZE and isinstance(c, int) and c > 0):
                    raise ValueError(f"bad histogram bucket {[i, c]!r}")
                m._counts[i] += c
                total += c
            if total != lat["count"]:
                raise ValueError(f"histogram counts add up to {total}, but count is {lat['count']}")
            m._count = total
            m._sum = float(lat["sum"])
            if total:
                m._min, m._max = float(lat["min"]), float(lat["max"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an OperatorMetrics.to_dict() result: {exc!r}") from None
        return m

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, OperatorMetrics):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        other = OperatorMetrics.from_dict(state)
        for name in self.__slots__:
            setattr(self, name, getattr(other, name))


def check_amount(name: Any, amount: Any) -> float:
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real) or not 0 <= float(amount) < math.inf:
        raise ValueError(f"usage {name!r} must be a finite number >= 0, got {amount!r}")
    return cast(float, amount)  # kept as given (an int stays an int in the totals)


def _fmt_amount(amount: float) -> str:
    return str(int(amount)) if float(amount).is_integer() else f"{amount:.3g}"


def _fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    ms = seconds * 1000.0
    if ms < 10:
        return f"{ms:.2f}ms"
    if ms < 100:
        return f"{ms:.1f}ms"
    return f"{ms:.0f}ms"
