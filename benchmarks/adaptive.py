"""Adaptive concurrency against a service with a real concurrency limit, in both ways services fail.

Run:  python benchmarks/adaptive.py [--rows 20000] [--limit 40] [--latency 0.02] [--runs 3]

A service (a separate process on 127.0.0.1, ``tests.support.service.LimitedService``) serves at
most ``--limit`` requests at once, ``--latency`` seconds each, and either

* ``reject``: answers 429 at once to whatever is beyond that, or
* ``queue``: queues it, first come first served (latency grows, nothing fails).

Two Spark tasks (``local[2]``, two partitions) share it, each with its own limit: a fixed
``capacity=400``, or ``AdaptiveConcurrency(max_limit=400)``. Every variant retries 429s with
exponential back-off, so all rows get through. "of capacity" is rows/s divided by what the service
can do, ``limit / latency``, with rows/s over the job's wall time (Spark's task start included)
and over the service's busy time (its first request to its last answer); "p50" is the service's
response time (arrival to answer, queueing included). The limit of each adaptive task over time goes to a plot
(``--plot``, default ``docs/img/adaptive_limit.png``).
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import sys
import tempfile
import time

import aiospark
from aiospark import AdaptiveConcurrency, AsyncFunction, Metrics, RetryStrategy
from aiospark.connectors import is_retryable

# Run as a file (`python benchmarks/x.py`), the repository root is not on sys.path; the test
# servers live in tests/support, so put the root there (`python -m benchmarks.x` needs nothing).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.support.service import LimitedService  # noqa: E402


class Fetch(AsyncFunction):
    def __init__(self, url):
        self.url = url

    async def open(self):
        import aiohttp

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def async_invoke(self, row):
        async with self.session.get(f"{self.url}/item/{row['id']}") as response:
            if response.status in (429, 503) or response.status >= 500:
                raise Overloaded(response.status)
            await response.read()
            return [{"id": row["id"]}]

    async def close(self):
        await self.session.close()


class Overloaded(Exception):
    retryable = True

    def __init__(self, status):
        super().__init__(f"HTTP {status}")
        self.status = status


class TracedConcurrency(AdaptiveConcurrency):
    """AdaptiveConcurrency that writes ``monotonic_time limit`` lines to a file in ``trace_dir``
    whenever its limit may change (once per round trip, on a cut, when a baseline probe begins),
    for the plot. Benchmark only."""

    def __init__(self, max_limit, trace_dir, label, **kwargs):
        super().__init__(max_limit, **kwargs)
        self.trace_dir, self.label = trace_dir, label
        self.lines, self.flushed = [], 0.0

    def _record(self):
        now = time.monotonic()
        self.lines.append(f"{now:.4f} {self._limit:.2f}\n")
        if now - self.flushed > 0.2:  # Spark kills idle workers: keep the file nearly current
            with open(os.path.join(self.trace_dir, f"{self.label}-{os.getpid()}-{id(self)}.txt"), "a") as f:
                f.writelines(self.lines)
            self.lines.clear()
            self.flushed = now

    def _close_window(self, now):
        super()._close_window(now)
        self._record()

    def _probe(self, now):
        probes = self.probes
        super()._probe(now)
        if self.probes > probes:  # a baseline probe began: the limit dropped for a round trip
            self._record()

    def on_overload(self, latency_seconds=None):
        cut = super().on_overload(latency_seconds)
        if cut:
            self._record()
        return cut


def run_one(spark, fetch, rows, capacity, retry):
    metrics = Metrics("bench")
    df = aiospark.unordered_wait(spark.range(0, rows, 1, 2), fetch, "id LONG", capacity=capacity,
                                 retry=retry, timeout=60, metrics=metrics)
    t0 = time.perf_counter()
    assert df.count() == rows
    return time.perf_counter() - t0, metrics.total


def read_traces(trace_dir, label, t0):
    traces = []
    for path in sorted(glob.glob(os.path.join(trace_dir, f"{label}-*.txt"))):
        with open(path) as f:
            points = [tuple(map(float, line.split())) for line in f if line.strip()]
        traces.append([(t - t0, limit) for t, limit in points])
    return traces


def plot(traces, args, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, mode in zip(axes, ("reject", "queue")):
        for task, points in enumerate(traces.get(mode, [])):
            if points:
                ax.step([t for t, _ in points], [v for _, v in points], where="post", label=f"task {task + 1}")
        total = _sum_traces(traces.get(mode, []))
        if total:
            ax.step([t for t, _ in total], [v for _, v in total], where="post", color="black", lw=1.2,
                    label="both tasks")
        ax.axhline(args.limit, color="red", ls="--", lw=1, label=f"service limit ({args.limit})")
        what = "answers 429 beyond" if mode == "reject" else "queues beyond"
        ax.set_title(f"service {what} {args.limit} at once, {args.latency * 1000:.0f} ms each")
        ax.set_xlabel("seconds since the job started")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[0].set_ylabel("AdaptiveConcurrency limit (calls in flight)")
    axes[0].set_ylim(0, max(args.limit * 3, 10))
    fig.suptitle("AdaptiveConcurrency(max_limit=400), two Spark tasks sharing one service", fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)


def _sum_traces(traces):
    """The sum of step functions: total limit of all tasks over time."""
    events = sorted((t, i, v) for i, points in enumerate(traces) for t, v in points)
    current, total = {}, []
    for t, i, v in events:
        current[i] = v
        if len(current) == len(traces):
            total.append((t, sum(current.values())))
    return total


def _mean(points):
    """Time-weighted mean of a step function [(t, value), ...]; None when it has < 2 points."""
    if len(points) < 2:
        return None
    area = sum((t2 - t1) * v for (t1, v), (t2, _) in zip(points, points[1:]))
    return area / (points[-1][0] - points[0][0])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="reject,queue")
    parser.add_argument("--variants", default="400,adaptive")
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "img", "adaptive_limit.png"))
    args = parser.parse_args(argv)
    spark = aiospark.local_session("local[2]")
    retry = RetryStrategy.exponential_backoff(30, 0.01, 1.0, jitter=0.3, exception_predicate=is_retryable)
    capacity_bound = args.limit / args.latency
    results, traces = [], {}
    trace_dir = tempfile.mkdtemp(prefix="aiospark-adaptive-")
    try:
        for mode in args.modes.split(","):
            with LimitedService(args.limit, args.latency, mode) as service:
                fetch = Fetch(service.url)
                run_one(spark, fetch, 400, 10, retry)  # warm up: workers, connections
                unloaded = service.stats()["p50"]
                for run in range(1, args.runs + 1):
                    for variant in args.variants.split(","):
                        label = f"{mode}-{run}"
                        if variant == "adaptive":
                            capacity = TracedConcurrency(400, trace_dir, label)
                        else:
                            capacity = int(variant)
                        service.reset_stats()
                        t0 = time.monotonic()
                        seconds, total = run_one(spark, fetch, args.rows, capacity, retry)
                        stats = service.stats()
                        mean_limit = None
                        if variant == "adaptive":
                            run_traces = read_traces(trace_dir, label, t0)
                            mean_limit = _mean(_sum_traces(run_traces))
                            if run == args.runs:
                                traces[mode] = run_traces
                        rate = args.rows / seconds
                        busy = stats["last_answer"] - stats["first_arrival"]
                        results.append(dict(mode=mode, run=run, variant=variant, rate=rate,
                                            frac=rate / capacity_bound, requests=stats["requests"],
                                            served_frac=args.rows / busy / capacity_bound,
                                            rejected=stats["rejected"] / max(1, stats["requests"]),
                                            p50=stats["p50"], unloaded=unloaded,
                                            peak=total.inflight_peak, peak_served=stats["peak_serving"],
                                            mean_limit=mean_limit))
                        r = results[-1]
                        print(f"  {mode} run {run} {variant:>8}: {r['frac']:.2f} of capacity "
                              f"({r['served_frac']:.2f} from the first request to the last answer), "
                              f"{r['rejected'] * 100:.1f}% rejected, p50 {r['p50'] * 1000:.0f} ms", flush=True)
    finally:
        spark.stop()
    if traces:
        plot(traces, args, args.plot)
    shutil.rmtree(trace_dir, ignore_errors=True)
    print(f"\ncommand: python {' '.join(sys.argv)}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (at the end); service: {args.limit} requests at "
          f"once, {args.latency * 1000:.0f} ms each (capacity {capacity_bound:,.0f} rows/s); {args.rows} rows, "
          f"2 tasks; unloaded p50 {results[0]['unloaded'] * 1000:.1f} ms\n")
    print("| service beyond its limit | run | capacity | rows/s (job) | of capacity (job) "
          "| of capacity (first request to last answer) | requests | rejected "
          "| service p50 | peak in flight per task / served at once | mean limit, both tasks |")
    print("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        what = "answers 429" if r["mode"] == "reject" else "queues"
        name = "AdaptiveConcurrency(400)" if r["variant"] == "adaptive" else f"fixed {r['variant']}"
        mean = "-" if r["mean_limit"] is None else f"{r['mean_limit']:.0f}"
        print(f"| {what} | {r['run']} | {name} | {r['rate']:,.0f} | {r['frac']:.2f} | {r['served_frac']:.2f} "
              f"| {r['requests']:,} "
              f"| {r['rejected'] * 100:.1f} % | {r['p50'] * 1000:.0f} ms | {r['peak']} / {r['peak_served']} "
              f"| {mean} |")
    if traces:
        print(f"\nplot of the limit over time (last run): {os.path.relpath(args.plot, ROOT)}")


if __name__ == "__main__":
    main()
