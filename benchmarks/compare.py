"""aiospark against the usual ways of calling a service from PySpark, on the same data and service.

Run from the repository root::

    python -m benchmarks.compare --scenario c100                 # HTTP, 20 ms, capacity 100
    python -m benchmarks.compare --scenario all --transport sleep
    python -m benchmarks.compare --quick --scenario all           # smoke run (~2 min)
    python -m benchmarks.compare --plot docs/img/capacity.png     # throughput vs capacity
    python -m benchmarks.compare --scenario all --repeat 3        # medians of 3 interleaved runs

Every variant turns ``spark.range(rows)`` (``tasks`` partitions, ``local[tasks]``) into the looked-up
``name`` of each id (``GET /item/{id}`` on a FaultService in a child process on 127.0.0.1):

* ``naive UDF``          -- plain ``@udf``, one blocking urllib call per row (run on a sample);
* ``thread pool``        -- ``mapInPandas`` + ``ThreadPoolExecutor(capacity)``, keep-alive per thread;
* ``per-batch gather``   -- ``mapInPandas`` + ``asyncio.run(gather(...))`` per Arrow batch, aiohttp,
  ``Semaphore(capacity)``;
* ``Arrow UDF threads``  -- ``udf(useArrow=True)`` with ``spark.sql.execution.pythonUDF.arrow.concurrency.level``
  = capacity (Spark's own thread pool per Arrow batch), when this PySpark has it;
* ``aiospark unordered`` / ``ordered`` (an ``AsyncFunction`` with an aiohttp session opened in
  ``open()``) and ``aiospark async_udf`` (a lazily created module-level session per worker);
* ``bare asyncio``       -- the same aiohttp calls at the same concurrency, no Spark, in ``tasks``
  processes: the physical reference.

``--transport sleep`` replaces the HTTP call by ``await asyncio.sleep(latency)`` /
``time.sleep(latency)``: the frameworks' own overhead against Little's law, without the ~100-150 µs
of CPU that an aiohttp request costs client + server on this machine.

Columns: rows/s (wall time of the action), efficiency = rows/s / (tasks x capacity / mean latency)
(Little's law), the ratio to aiospark unordered, the peak RSS of one Python worker (sampled every
100 ms with psutil from the driver), and CPU per row of the Python workers, of the JVM and (HTTP) of
the service. Every run checks that each id got its name (count and total length of the names).

Fairness: every variant gets its own fresh pool of Python workers (PySpark keys worker pools by the
function's environment, so ``sc.environment`` gets a per-variant tag), warmed up by a small run of the
same job before timing; with ``--repeat N`` the variants are timed round-robin N times and the median
is reported with the min-max, so a burst of load from other processes hits all of them alike.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import platform
import shlex
import signal
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POOL_ENV = "AIOSPARK_BENCH_POOL"
ARROW_CONCURRENCY_CONF = "spark.sql.execution.pythonUDF.arrow.concurrency.level"
BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"

VARIANT_TITLES = {
    "bare": "bare asyncio (no Spark)",
    "naive": "naive UDF (sample)",
    "threads": "thread pool mapInPandas",
    "gather": "per-batch gather mapInPandas",
    "arrow_threads": "Arrow UDF concurrency.level",
    "unordered": "aiospark unordered_wait",
    "ordered": "aiospark ordered_wait",
    "async_udf": "aiospark async_udf",
}
ALL_VARIANTS = ["bare", "naive", "threads", "gather", "arrow_threads", "unordered", "ordered", "async_udf"]
LOOPS = ("asyncio", "uvloop")


def split_variant(variant: str) -> tuple[str, str | None]:
    """``"unordered@uvloop"`` -> ``("unordered", "uvloop")``: an aiospark variant on a chosen worker loop."""
    base, _, loop = variant.partition("@")
    return base, (loop or None)


def title(variant: str) -> str:
    base, loop = split_variant(variant)
    return VARIANT_TITLES[base] + (f" ({loop})" if loop else "")


# ----------------------------------------------------------------------------------------- scenarios
@dataclass
class Scenario:
    name: str
    title: str
    latency: float = 0.02
    capacity: int = 100
    dist: str = "fixed"
    sigma: float = 1.0
    slow_fraction: float = 0.0
    slow_latency: float = 2.0
    batch: int | None = None          # spark.sql.execution.arrow.maxRecordsPerBatch (None = Spark's 10,000)
    noop: bool = False
    variants: list[str] = field(default_factory=lambda: list(ALL_VARIANTS))
    rows: dict[str, int] = field(default_factory=dict)   # transport -> rows
    naive_rows: int = 400

    @property
    def mean_latency(self) -> float:
        base = self.latency * math.exp(self.sigma ** 2 / 2) if self.dist == "lognormal" else self.latency
        return (1 - self.slow_fraction) * base + self.slow_fraction * self.slow_latency

    def bound(self, tasks: int) -> float | None:
        return None if self.noop else tasks * self.capacity / self.mean_latency


def scenarios() -> dict[str, Scenario]:
    return {
        "c100": Scenario("c100", "20 ms fixed latency, capacity 100", 0.02, 100,
                         rows={"http": 30_000, "sleep": 60_000}),
        "c1000": Scenario("c1000", "20 ms fixed latency, capacity 1000", 0.02, 1000,
                          rows={"http": 30_000, "sleep": 300_000}),
        # p99 of a lognormal = median * exp(2.326 sigma): sigma 1.0 -> 10.2 x median = 205 ms
        "tail": Scenario("tail", "heavy tail: lognormal latency, median 20 ms, sigma 1.0 (p99 205 ms), "
                                 "capacity 100, Arrow batches of 1000", 0.02, 100, dist="lognormal", sigma=1.0,
                         batch=1000, variants=["bare", "threads", "gather", "unordered", "ordered"],
                         rows={"http": 30_000, "sleep": 60_000}),
        "noop": Scenario("noop", "no-op: the function returns at once (no I/O), capacity 100", 0.0, 100, noop=True,
                         rows={"http": 400_000, "sleep": 400_000}, naive_rows=400_000),
        "hol": Scenario("hol", "head-of-line: 20 ms, but 0.1% of calls take 2 s; capacity 100", 0.02, 100,
                        slow_fraction=0.001, slow_latency=2.0,
                        variants=["bare", "gather", "unordered", "ordered", "async_udf"],
                        rows={"http": 20_000, "sleep": 20_000}),
    }


QUICK_ROWS = {"c100": 6_000, "c1000": 20_000, "tail": 6_000, "noop": 100_000, "hol": 4_000}


# ------------------------------------------------------------------------------------ measurements
@dataclass
class Result:
    variant: str
    rows: int = 0
    seconds: float = 0.0
    worker_rss: int | None = None     # bytes, peak of one Python worker
    worker_cpu: float | None = None   # seconds, all Python workers of the variant
    jvm_cpu: float | None = None      # seconds
    service_cpu: float | None = None  # seconds
    error: str | None = None

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


class Summary:
    """The runs of one variant: median rows/s, min-max, peak RSS over all runs, median CPU per row."""

    def __init__(self, variant: str, runs: list[Result]):
        self.variant = variant
        self.runs = runs
        self.ok = [r for r in runs if r.error is None and r.seconds > 0]
        rates = sorted(r.rate for r in self.ok)
        self.rate = statistics.median(rates) if rates else 0.0
        self.low = rates[0] if rates else 0.0
        self.high = rates[-1] if rates else 0.0
        self.rows = self.ok[0].rows if self.ok else 0
        self.rss = max((r.worker_rss or 0 for r in self.ok), default=0) or None

    def per_row(self, attr: str) -> float | None:
        """Median over runs of ``attr`` seconds per row, in µs."""
        values = [getattr(r, attr) / r.rows * 1e6 for r in self.ok if getattr(r, attr) is not None and r.rows]
        return statistics.median(values) if values else None


def _is_pyspark_python(proc: psutil.Process) -> bool:
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return False
    return "pyspark.daemon" in cmd or "pyspark.worker" in cmd


class WorkerSampler:
    """Samples, from the driver, the RSS and CPU time of the Python workers of one pool (by env tag)."""

    def __init__(self, pool: str, interval: float = 0.1):
        self.pool = pool
        self.interval = interval
        self.me = psutil.Process()
        self._known: dict[int, tuple[bool, bool, psutil.Process]] = {}  # pid -> (ours, is_worker, proc)
        self.peak_rss = 0
        self.cpu_base: dict[int, float] = {}
        self.cpu_last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _ours(self) -> list[tuple[psutil.Process, bool]]:
        found = []
        try:
            children = self.me.children(recursive=True)
        except psutil.Error:
            return found
        for proc in children:
            info = self._known.get(proc.pid)
            if info is None or info[2].create_time() != proc.create_time():
                ours = is_worker = False
                if _is_pyspark_python(proc):
                    try:
                        ours = proc.environ().get(POOL_ENV) == self.pool
                        is_worker = _is_pyspark_python(proc.parent())
                    except (psutil.Error, OSError, AttributeError):
                        pass
                info = self._known[proc.pid] = (ours, is_worker, proc)
            if info[0]:
                found.append((info[2], info[1]))
        return found

    def daemons(self) -> list[psutil.Process]:
        return [p for p, is_worker in self._ours() if not is_worker]

    def sample(self) -> None:
        for proc, is_worker in self._ours():
            try:
                with proc.oneshot():
                    cpu = sum(proc.cpu_times()[:2])
                    rss = proc.memory_info().rss
            except psutil.Error:
                continue
            self.cpu_last[proc.pid] = cpu
            if is_worker:
                self.peak_rss = max(self.peak_rss, rss)

    def start(self) -> None:
        self.sample()
        self.cpu_base = dict(self.cpu_last)
        self.peak_rss = 0
        self.sample()

        def run() -> None:
            while not self._stop.wait(self.interval):
                self.sample()

        self._thread = threading.Thread(target=run, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    @property
    def cpu(self) -> float:
        return sum(last - self.cpu_base.get(pid, 0.0) for pid, last in self.cpu_last.items())


def _jvm() -> psutil.Process | None:
    for proc in psutil.Process().children():
        try:
            if "java" in proc.name():
                return proc
        except psutil.Error:
            pass
    return None


def _cpu(proc: psutil.Process | None) -> float | None:
    if proc is None:
        return None
    try:
        return sum(proc.cpu_times()[:2])
    except psutil.Error:
        return None


def name_chars(lo: int, hi: int) -> int:
    """sum(len(f"item-{i}") for i in range(lo, hi)), computed digit-range by digit-range."""
    total, digits, start = 0, 1, 0
    while start < hi:
        end = 10 ** digits
        a, b = max(lo, start), min(hi, end)
        if a < b:
            total += (b - a) * (5 + digits)
        start, digits = end, digits + 1
    return total


# ---------------------------------------------------------------------------------------- the runner
class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tasks = args.tasks
        self.spark = None
        self.service = None
        self.service_key: tuple | None = None
        self._pool_seq = 0

    # -- Spark ----------------------------------------------------------------------------------
    def session(self):
        if self.spark is None:
            # the workers import benchmarks._recipes by reference (module globals live per worker)
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
            import aiospark

            self.spark = aiospark.local_session(f"local[{self.tasks}]", app_name="aiospark-compare", conf={
                "spark.python.worker.reuse": "true",
                "spark.driver.memory": "2g",
            })
            self.spark.sparkContext.setLogLevel("ERROR")
        return self.spark

    def _new_pool(self, label: str) -> str:
        """A fresh pool of Python workers: PySpark keys its worker pools by the function's env vars."""
        self._pool_seq += 1
        pool = f"{label}-{self._pool_seq}"
        self._use_pool(pool)
        return pool

    def _use_pool(self, pool: str) -> None:
        """Route the next jobs to ``pool`` (and its AIOSPARK_LOOP, for ``variant@loop``)."""
        env = self.spark.sparkContext.environment
        env[POOL_ENV] = pool
        loop = split_variant(pool.rsplit("-", 1)[0])[1]
        if loop:
            env["AIOSPARK_LOOP"] = loop
        else:
            env.pop("AIOSPARK_LOOP", None)

    # -- the service ----------------------------------------------------------------------------
    def transport(self, sc: Scenario):
        from benchmarks._recipes import Transport

        kind = "noop" if sc.noop else self.args.transport
        base_url = ""
        if kind == "http":
            from tests.support.service import FaultService, ServiceConfig

            cfg = ServiceConfig(latency=sc.latency, latency_dist=sc.dist, sigma=sc.sigma,
                                slow_fraction=sc.slow_fraction, slow_latency=sc.slow_latency, seed=1)
            key = cfg.to_dict()
            key = tuple(sorted((k, str(v)) for k, v in key.items()))
            if self.service is None or self.service_key != key:
                self.stop_service()
                self.service = FaultService(cfg, process=True).start()
                self.service_key = key
            base_url = self.service.url
        return Transport(kind, base_url, sc.latency, sc.dist, sc.sigma, sc.slow_fraction, sc.slow_latency)

    def stop_service(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None

    def _service_cpu(self) -> float | None:
        if self.service is None:
            return None
        try:
            return float(self.service.stats(keys=False)["cpu_seconds"])
        except Exception:
            return None

    # -- variants -------------------------------------------------------------------------------
    def _job(self, variant: str, t: Any, capacity: int, rows: int) -> Callable[[], tuple[int, int]]:
        """Build the variant's DataFrame over ``range(rows)``; return the action (-> count, name chars)."""
        from pyspark.sql import functions as F

        import aiospark
        from benchmarks import _recipes as R

        spark = self.spark
        df = spark.range(0, rows, 1, self.tasks)
        schema = "id long, name string"
        variant = split_variant(variant)[0]

        def agg(out) -> Callable[[], tuple[int, int]]:
            def action() -> tuple[int, int]:
                row = out.agg(F.count("name").alias("n"), F.sum(F.length("name")).alias("chars")).collect()[0]
                return int(row["n"]), int(row["chars"] or 0)
            return action

        if variant == "naive":
            lookup = F.udf(R.NaiveLookup(t), "string")
            out = df.select(lookup("id").alias("name"))

            def collect() -> tuple[int, int]:
                names = [r["name"] for r in out.collect()]  # collect the values: the UDF must really run
                return sum(1 for n in names if n is not None), sum(len(n) for n in names if n)
            return collect
        if variant == "threads":
            return agg(df.mapInPandas(R.ThreadPoolRecipe(t, capacity), schema))
        if variant == "gather":
            return agg(df.mapInPandas(R.GatherRecipe(t, capacity), schema))
        if variant == "arrow_threads":
            lookup = F.udf(R.SyncLookup(t), "string", useArrow=True)
            return agg(df.select(lookup("id").alias("name")))
        if variant == "unordered":
            return agg(aiospark.unordered_wait(df, R.AioLookup(t, capacity), schema, capacity=capacity))
        if variant == "ordered":
            return agg(aiospark.ordered_wait(df, R.AioLookup(t, capacity), schema, capacity=capacity))
        if variant == "async_udf":
            lookup = aiospark.async_udf("string", capacity=capacity)(R.AsyncUdfLookup(t, capacity))
            return agg(df.select(lookup("id").alias("name")))
        raise ValueError(f"unknown variant {variant!r}")

    def prepare(self, variant: str, t: Any, capacity: int, rows: int, label: str) -> str | None:
        """A fresh worker pool for ``variant``, warmed up by a small run of the same job; returns its tag."""
        if variant == "bare":
            return None
        self.session()
        pool = self._new_pool(f"{label}-{variant}")
        warm_rows = min(rows, 64 if variant == "naive" and t.kind != "noop" else max(2_000, 2 * self.tasks * capacity))
        with self._conf(variant, capacity):
            self._job(variant, t, capacity, warm_rows)()  # starts and warms this pool's workers
        return pool

    @contextlib.contextmanager
    def _conf(self, variant: str, capacity: int):
        """Spark's Arrow-UDF thread pool is on (concurrency.level = capacity) only for its own variant."""
        if variant != "arrow_threads":
            yield
            return
        self.spark.conf.set(ARROW_CONCURRENCY_CONF, str(max(2, capacity)))  # Spark requires > 1
        try:
            yield
        finally:
            self.spark.conf.unset(ARROW_CONCURRENCY_CONF)

    def end_pool(self, pool: str | None) -> None:
        """SIGTERM the pool's daemon (its own process group; it takes its idle workers with it)."""
        if pool is None:
            return
        for daemon in WorkerSampler(pool).daemons():
            try:
                daemon.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass

    def run_once(self, variant: str, pool: str | None, t: Any, capacity: int, rows: int) -> Result:
        if variant == "bare":
            return self.run_bare(t, capacity, rows)
        self._use_pool(pool)
        sampler = WorkerSampler(pool)
        result = Result(variant)
        try:
            with self._conf(variant, capacity):
                action = self._job(variant, t, capacity, rows)
                jvm = _jvm()
                jvm0, svc0 = _cpu(jvm), self._service_cpu()
                sampler.start()
                t0 = time.perf_counter()
                count, chars = action()
                result.seconds = time.perf_counter() - t0
                sampler.stop()
                jvm1, svc1 = _cpu(jvm), self._service_cpu()
            expected = (rows, name_chars(0, rows))
            if (count, chars) != expected:
                raise AssertionError(f"wrong output: (count, name chars) = {(count, chars)}, expected {expected}")
            result.rows = rows
            result.worker_rss = sampler.peak_rss or None
            result.worker_cpu = sampler.cpu
            result.jvm_cpu = None if jvm0 is None or jvm1 is None else jvm1 - jvm0
            result.service_cpu = None if svc0 is None or svc1 is None else svc1 - svc0
        except Exception as exc:  # a failing variant is reported, the others still run
            sampler.stop()
            text = str(exc).strip().splitlines()
            result.error = f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
        return result

    def run_bare(self, t: Any, capacity: int, rows: int) -> Result:
        from benchmarks._recipes import bare_worker

        ctx = multiprocessing.get_context("spawn")
        ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        bounds = [rows * i // self.tasks for i in range(self.tasks + 1)]
        procs = [ctx.Process(target=bare_worker, args=(t, bounds[i], bounds[i + 1], capacity, ready, go, out,
                                                           self.args.bare_loop),
                             daemon=True) for i in range(self.tasks)]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=120)
        svc0 = self._service_cpu()
        go.set()
        got = [out.get(timeout=3600) for _ in procs]
        svc1 = self._service_cpu()
        for p in procs:
            p.join()
        result = Result("bare", rows=rows, seconds=max(g[0] for g in got), worker_cpu=sum(g[1] for g in got),
                        worker_rss=max(g[2] for g in got))
        result.service_cpu = None if svc0 is None or svc1 is None else svc1 - svc0
        chars = sum(g[3] for g in got)
        if chars != name_chars(0, rows):
            result.error = f"wrong output: name chars {chars}, expected {name_chars(0, rows)}"
        return result

    def run_variants(self, variants: list[str], t: Any, capacity: int, rows_of: Callable[[str], int], label: str,
                     repeat: int = 1) -> dict[str, list[Result]]:
        """Warm up every variant's own worker pool, then time them round-robin ``repeat`` times."""
        pools: dict[str, str | None] = {}
        results: dict[str, list[Result]] = {v: [] for v in variants}
        try:
            for variant in variants:
                try:
                    pools[variant] = self.prepare(variant, t, capacity, rows_of(variant), label)
                except Exception as exc:
                    text = str(exc).strip().splitlines()
                    results[variant].append(Result(variant, error=f"{type(exc).__name__}: {text[0] if text else ''}"))
            for r in range(repeat):
                for variant in variants:
                    if variant not in pools:
                        continue
                    res = self.run_once(variant, pools[variant], t, capacity, rows_of(variant))
                    results[variant].append(res)
                    status = f"{res.rate:,.0f} rows/s" if res.error is None else res.error
                    print(f"  [{label} #{r + 1}] {title(variant):<30} {rows_of(variant):>9,} rows  {status}",
                          file=sys.stderr, flush=True)
        finally:
            for pool in pools.values():
                self.end_pool(pool)
        return results

    # -- scenarios ------------------------------------------------------------------------------
    def scenario_rows(self, sc: Scenario) -> tuple[int, int]:
        args = self.args
        rows = args.rows or (QUICK_ROWS[sc.name] if args.quick else sc.rows[args.transport])
        naive = min(rows, args.naive_rows or (sc.naive_rows if not args.quick else min(sc.naive_rows, 100_000)))
        if args.quick and not sc.noop:
            naive = min(naive, 80)
        return rows, naive

    def run_scenario(self, sc: Scenario) -> dict[str, Summary]:
        spark = self.session()
        if sc.batch:
            spark.conf.set(BATCH_CONF, str(sc.batch))
        else:
            spark.conf.unset(BATCH_CONF)
        t = self.transport(sc)
        rows, naive_rows = self.scenario_rows(sc)
        variants = [v for v in self.args.variants if split_variant(v)[0] in sc.variants]
        if "arrow_threads" in variants and not arrow_concurrency_available():
            variants.remove("arrow_threads")
        load = os.getloadavg()
        runs = self.run_variants(variants, t, sc.capacity, lambda v: naive_rows if v == "naive" else rows, sc.name,
                                 self.args.repeat)
        summaries = {v: Summary(v, rs) for v, rs in runs.items()}
        print(self.table(sc, t, rows, summaries, load))
        sys.stdout.flush()
        return summaries

    def table(self, sc: Scenario, t: Any, rows: int, summaries: dict[str, Summary],
              load: tuple[float, ...]) -> str:
        tasks = self.tasks
        bound = sc.bound(tasks)
        unordered = summaries.get("unordered")
        ref = unordered.rate if unordered is not None and unordered.ok else None
        if ref is None:  # unordered ran only on a chosen loop
            alt = next((s for v, s in summaries.items() if split_variant(v)[0] == "unordered" and s.ok), None)
            ref = alt.rate if alt is not None else None
        transport = {"http": "HTTP GET /item/{id} (FaultService in a child process)",
                     "sleep": "asyncio.sleep / time.sleep (no I/O)",
                     "noop": "none (returns at once)"}[t.kind]
        repeat = self.args.repeat
        lines = [f"### {sc.name}: {sc.title}", "",
                 f"- transport: {transport}; {tasks} tasks (`local[{tasks}]`), {rows:,} rows"
                 + (f", Arrow batches of {sc.batch}" if sc.batch else "")
                 + (f"; rows/s = median of {repeat} interleaved runs (min-max in brackets)" if repeat > 1 else "")]
        if bound:
            lines.append(f"- Little's-law bound: {tasks} x {sc.capacity} / {sc.mean_latency * 1000:.1f} ms (mean "
                         f"latency) = {bound:,.0f} rows/s")
        lines.append(f"- load average before: {' '.join(f'{x:.2f}' for x in load)}; after: "
                     f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        lines.append("")
        cols = ["variant", "rows", "rows/s"]
        cols += ["rows/s per task"] if sc.noop else ["efficiency"]
        cols += ["vs aiospark unordered", "peak worker RSS (MiB)", "worker CPU (µs/row)", "JVM CPU (µs/row)"]
        if t.kind == "http":
            cols.append("service CPU (µs/req)")
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|")
        for s in summaries.values():
            name = title(s.variant)
            if not s.ok:
                error = s.runs[-1].error if s.runs else "did not run"
                lines.append(f"| {name} | failed: {str(error).replace('|', '/')} |" + " |" * (len(cols) - 2))
                continue
            fmt = lambda v: "—" if v is None else f"{v:,.0f}"  # noqa: E731
            rate = f"{s.rate:,.0f}" + (f" [{s.low:,.0f}-{s.high:,.0f}]" if len(s.ok) > 1 else "")
            cells = [name, f"{s.rows:,}", rate]
            cells.append(f"{s.rate / tasks:,.0f}" if sc.noop else f"{s.rate / bound:.3f}" if bound else "—")
            cells.append(f"{s.rate / ref:.2f}" if ref else "—")
            cells.append(f"{s.rss / 2**20:,.0f}" if s.rss else "—")
            cells += [fmt(s.per_row("worker_cpu")), fmt(s.per_row("jvm_cpu"))]
            if t.kind == "http":
                cells.append(fmt(s.per_row("service_cpu")))
            lines.append("| " + " | ".join(cells) + " |")
        errors = [(s.variant, r.error) for s in summaries.values() for r in s.runs if r.error and s.ok]
        for variant, error in errors:
            lines.append(f"\n(one run of {title(variant)} failed: {error})")
        lines.append("")
        return "\n".join(lines)

    # -- plot -----------------------------------------------------------------------------------
    def plot(self, path: str) -> None:
        from benchmarks._recipes import Transport

        capacities = [10, 50, 100, 200, 500, 1000]
        latency = 0.02
        if self.args.quick:
            capacities = [10, 100, 1000]
        t = Transport("sleep", "", latency)
        self.session().conf.unset(BATCH_CONF)
        load = os.getloadavg()
        data: dict[str, list[float]] = {"bare": [], "unordered": [], "threads": []}
        rows_used = []
        for cap in capacities:
            bound = self.tasks * cap / latency
            rows = int(min(300_000, max(8_000, bound * (1.0 if self.args.quick else 8.0))))
            rows -= rows % self.tasks
            rows_used.append(rows)
            runs = self.run_variants(list(data), t, cap, lambda v: rows, f"plot-c{cap}", self.args.repeat)
            for variant, results in runs.items():
                s = Summary(variant, results)
                data[variant].append(s.rate if s.ok else float("nan"))
        load_after = os.getloadavg()

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
        bounds = [self.tasks * c / latency for c in capacities]
        ax.plot(capacities, bounds, "k--", lw=1, label="Little's law: tasks × capacity / latency")
        ax.plot(capacities, data["bare"], "o:", color="0.45", label="bare asyncio, no Spark (reference)")
        ax.plot(capacities, data["unordered"], "o-", color="tab:blue", lw=2, label="aiospark unordered_wait")
        ax.plot(capacities, data["threads"], "s-", color="tab:orange", lw=2,
                label="mapInPandas + ThreadPoolExecutor(capacity)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(capacities)
        ax.set_xticklabels([str(c) for c in capacities])
        ax.set_xlabel("capacity (calls in flight per task)")
        ax.set_ylabel("rows/s (both tasks)")
        ax.set_title(f"Throughput vs capacity: {latency * 1000:.0f} ms sleep per row, {self.tasks} tasks, "
                     f"{os.cpu_count()} cores")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=9)
        fig.text(0.99, 0.01, f"python -m benchmarks.compare {' '.join(shlex.quote(a) for a in sys.argv[1:])}; "
                 f"aiospark loop {aiospark_loop()}; load avg {load[0]:.1f}",
                 ha="right", va="bottom", fontsize=7, color="0.4")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path)
        plt.close(fig)

        lines = [f"### capacity sweep (sleep transport, {latency * 1000:.0f} ms, {self.tasks} tasks) -> {path}", "",
                 f"- load average before: {' '.join(f'{x:.2f}' for x in load)}; after: "
                 f"{' '.join(f'{x:.2f}' for x in load_after)}", "",
                 "| capacity | rows | bound rows/s | bare asyncio | aiospark unordered | thread pool | "
                 "unordered / threads |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for i, cap in enumerate(capacities):
            u, th = data["unordered"][i], data["threads"][i]
            lines.append(f"| {cap} | {rows_used[i]:,} | {bounds[i]:,.0f} | {data['bare'][i]:,.0f} | {u:,.0f} | "
                         f"{th:,.0f} | {u / th:.2f} |")
        print("\n".join(lines) + "\n")

    def close(self) -> None:
        self.stop_service()
        if self.spark is not None:
            self.spark.stop()


def arrow_concurrency_available() -> bool:
    import pyspark.worker

    try:
        with open(pyspark.worker.__file__, encoding="utf-8") as f:
            return ARROW_CONCURRENCY_CONF in f.read()
    except OSError:
        return False


def aiospark_loop() -> str:
    """The event loop class aiospark's worker loop uses here (uvloop when installed, unless AIOSPARK_LOOP)."""
    try:
        import importlib

        wl = importlib.import_module("aiospark.runtime.worker_loop")  # the module, not the function
        factory = getattr(wl, "new_event_loop", None)
        if factory is None:
            return "asyncio"
        loop = factory()
        try:
            return type(loop).__module__.split(".")[0]
        finally:
            loop.close()
    except Exception as exc:  # pragma: no cover - informative only
        return f"unknown ({exc})"


def header(args: argparse.Namespace) -> str:
    import aiohttp
    import pyarrow
    import pyspark

    load = os.getloadavg()
    arrow_note = (f"`{ARROW_CONCURRENCY_CONF}` present (pyspark/worker.py: a ThreadPoolExecutor per Arrow batch "
                  "for `udf(useArrow=True)`)" if arrow_concurrency_available()
                  else f"`{ARROW_CONCURRENCY_CONF}` absent in this PySpark: that variant is skipped")
    return "\n".join([
        "## aiospark vs recipes" + (" (quick smoke run)" if args.quick else ""), "",
        f"- command: `python -m benchmarks.compare {' '.join(shlex.quote(a) for a in sys.argv[1:])}`",
        f"- machine: {os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}; Python "
        f"{platform.python_version()}, PySpark {pyspark.__version__}, pyarrow {pyarrow.__version__}, "
        f"aiohttp {aiohttp.__version__}",
        f"- load average before the run: {' '.join(f'{x:.2f}' for x in load)} (shared machine)",
        f"- transport: {args.transport}; event loops: aiospark workers {aiospark_loop()}, bare asyncio "
        f"{args.bare_loop}, per-batch gather asyncio.run (asyncio)",
        f"- Spark Arrow UDF concurrency: {arrow_note}",
        "",
    ])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="c100",
                        help="c100, c1000, tail, noop, hol, all, or a comma list (default c100)")
    parser.add_argument("--transport", choices=("http", "sleep"), default="http")
    parser.add_argument("--rows", type=int, default=None, help="rows per variant (default: per scenario)")
    parser.add_argument("--naive-rows", type=int, default=None, help="sample size of the naive UDF")
    parser.add_argument("--latency", type=float, default=None, help="override the scenario's latency (s)")
    parser.add_argument("--capacity", type=int, default=None, help="override the scenario's capacity")
    parser.add_argument("--tasks", type=int, default=2, help="Spark tasks = partitions = local[N] (default 2)")
    parser.add_argument("--variants", default=",".join(ALL_VARIANTS),
                        help="comma list of variants to run; unordered/ordered/async_udf may end in @asyncio or "
                             "@uvloop to run on that worker loop, side by side (e.g. unordered,unordered@uvloop)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time every variant N times, interleaved, and report the median (default 1)")
    parser.add_argument("--bare-loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="event loop of the bare-asyncio reference (default asyncio)")
    parser.add_argument("--aiospark-loop", choices=("default", "asyncio", "uvloop"), default="default",
                        help="event loop of aiospark's worker loop (sets AIOSPARK_LOOP for the workers; "
                             "default: leave aiospark's own default)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--plot", metavar="PNG", help="run the capacity sweep and save the plot (no scenarios "
                                                     "unless --scenario is also given)")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    def known(v: str) -> bool:
        base, loop = split_variant(v)
        aiospark_variant = base in ("unordered", "ordered", "async_udf")
        return base in ALL_VARIANTS and (loop is None or (loop in LOOPS and aiospark_variant))

    bad = [v for v in args.variants if not known(v)]
    if bad:
        parser.error(f"unknown variants {bad}; choose from {ALL_VARIANTS} (aiospark ones may end in @asyncio or "
                     "@uvloop to pick the worker loop)")
    args.scenario_given = any(a == "--scenario" or a.startswith("--scenario=") for a in (argv or sys.argv[1:]))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.aiospark_loop != "default":
        os.environ["AIOSPARK_LOOP"] = args.aiospark_loop  # inherited by the JVM, its daemons and workers
    warnings.filterwarnings("ignore", message="Cannot infer the eval type")  # udf() of a callable object
    table = scenarios()
    names = list(table) if args.scenario == "all" else [s.strip() for s in args.scenario.split(",") if s.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        print(f"unknown scenario(s) {unknown}: choose from {', '.join(table)} or all", file=sys.stderr)
        return 2
    if args.plot and not args.scenario_given:
        names = []
    print(header(args))
    sys.stdout.flush()
    bench = Bench(args)
    try:
        for name in names:
            sc = table[name]
            if args.latency is not None and not sc.noop:
                sc = replace(sc, latency=args.latency)
            if args.capacity is not None:
                sc = replace(sc, capacity=args.capacity)
            bench.run_scenario(sc)
        if args.plot:
            bench.plot(args.plot)
    finally:
        bench.close()
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
