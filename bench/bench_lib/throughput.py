"""Live throughput / latency / memory benchmark on the e2e test bed (etcd + kube-apiserver).

For each scheduler under test (``py``: ``python -m py_scheduler.cli run``; ``kube``: upstream
kube-scheduler v1.37 from the bed; ``blind``: :mod:`bench.bench_lib.blind`), on the same nodes and
with the same client QPS / burst:

1. a fresh namespace; a watch on its Pods from the bench (binding time = when the watch first sees
   ``spec.nodeName`` set, ``time.perf_counter`` in this process);
2. M Pods of the workload created ``--create-concurrency`` at a time (creation time = when the create
   call returns, same clock);
3. wait until all are bound (or the timeout), then: pods/s from the first creation to the last
   binding, p50 / p90 / p99 of creation -> binding;
4. stop the scheduler, force-delete the Pods (grace period 0).

``--rss``: 5000 nodes and 30000 Pods bound by the bench itself (created with ``spec.nodeName``, the
object a Binding would leave), then each scheduler is started, syncs its cache, schedules a few Pods,
and its peak RSS (``VmHWM`` of ``/proc/<pid>/status``) is read.

The bed lives in ``/dev/shm`` (etcd on tmpfs: no fsync on every write, for every scheduler alike) and
kube-apiserver gets ``--max-requests-inflight`` / ``--max-mutating-requests-inflight`` raised (a
``Testbed`` subclass adds them; the bed itself is unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.bench_lib import workloads
from bench.bench_lib.kubeapi import Api, ApiError, Endpoint
from bench.bench_lib.workloads import Workload

REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "tests" / "e2e" / "testbed"
if str(TESTBED) not in sys.path:
    sys.path.insert(0, str(TESTBED))

import bed  # noqa: E402  (the e2e test bed: build + process management)

Obj = dict[str, Any]

SCHEDULER_NAMES = {"py": "py-scheduler", "kube": "default-scheduler", "blind": "blind-binder",
                   "blindev": "blind-binder"}
"""``blindev``: the blind binder that also records each Pod's ``Scheduled`` Event (the API server's
ceiling for the two writes an upstream-faithful scheduler makes per Pod)."""
APISERVER_ARGS = ("--max-requests-inflight=3000", "--max-mutating-requests-inflight=1500")


class BenchBed(bed.Testbed):
    """The e2e :class:`bed.Testbed` with extra kube-apiserver flags (``apiserver_args``)."""

    __test__ = False
    apiserver_args: Sequence[str] = APISERVER_ARGS

    def _spawn(self, name: str, argv: list[str], port: int | None = None, *, restart: bool = False) -> int:
        if name == bed.APISERVER:
            argv = [*argv, *self.apiserver_args]
        return super()._spawn(name, argv, port, restart=restart)


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); 0.0 for none."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))]


@dataclass(slots=True)
class RunResult:
    """One scheduler's run: times in seconds (latencies reported in ms by :meth:`summary`)."""

    scheduler: str
    workload: str
    nodes: int
    pods: int
    bound: int = 0
    seconds: float = 0.0
    create_seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    timed_out: bool = False
    rss_kib: int = 0
    cpu_seconds: float = 0.0
    """CPU time the scheduler process used during the run (robust to other load on the machine)."""

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        lat = [max(0.0, x) * 1000 for x in self.latencies]
        d = asdict(self)
        del d["latencies"]
        d.update(pods_per_second=round(self.pods_per_second, 1), p50_ms=round(percentile(lat, 50), 1),
                 cpu_ms_per_pod=round(self.cpu_seconds * 1000 / self.bound, 2) if self.bound else 0.0,
                 p90_ms=round(percentile(lat, 90), 1), p99_ms=round(percentile(lat, 99), 1))
        return d


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid`` (``/proc/<pid>/stat``); 0.0 if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def vm_hwm_kib(pid: int) -> int:
    """Peak resident set size (``VmHWM``) of ``pid`` in KiB; 0 if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


# -- schedulers --------------------------------------------------------------------------------------

class Scheduler:
    """A scheduler process under test."""

    kind = ""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        raise NotImplementedError


class _Child(Scheduler):
    """A child process we started (py-scheduler, blind binder)."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv = argv
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def _popen(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"\n===== {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.to_thread(self.proc.wait, 20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait, 10)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}; log tail:\n{tail}")


class PyScheduler(_Child):
    kind = "py"

    def __init__(self, tb: BenchBed, qps: float, burst: int, verbosity: int, port: int) -> None:
        cfg = {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"qps": qps, "burst": burst},
            "leaderElection": {"leaderElect": False},
        }
        cfg_path = tb.dir / "py-scheduler.bench.yaml"
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
        self.port = port
        # BENCH_PY_WRAP: interpreter arguments put before "-m py_scheduler.cli", e.g. a profiler:
        # "-m cProfile -o /tmp/py.prof" or "-m pyinstrument -o /tmp/py.txt".
        prefix = shlex.split(os.environ.get("BENCH_PY_WRAP", ""))
        super().__init__([sys.executable, *prefix, "-m", "py_scheduler.cli", "run", "--kubeconfig", str(tb.kubeconfig),
                          "--config", str(cfg_path), "--no-leader-elect",
                          "--metrics-bind-address", f"127.0.0.1:{port}", "--plain-http",  # readiness poll only
                          "--v", str(verbosity)],
                         tb.logs_dir / "py-scheduler-bench.log")

    async def start(self) -> None:
        self._popen()
        deadline = time.monotonic() + 120
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                self.check_alive()
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with s.get(f"http://127.0.0.1:{self.port}/readyz") as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.2)
        raise TimeoutError("py-scheduler not ready after 120 s")


class BlindBinder(_Child):
    kind = "blind"

    def __init__(self, tb: BenchBed, endpoint: Endpoint, qps: float, burst: int, events: bool = False) -> None:
        if events:
            self.kind = "blindev"
        super().__init__([sys.executable, "-m", "bench.bench_lib.blind", *endpoint.argv(),
                          "--scheduler-name", SCHEDULER_NAMES["blind"], "--qps", str(qps), "--burst", str(burst),
                          *(["--events"] if events else [])],
                         tb.logs_dir / "blind-binder.log")

    async def start(self) -> None:
        self._popen()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.check_alive()
            if "\nready\n" in self.log.read_text(errors="replace").rsplit("=====", 1)[-1]:
                return
            await asyncio.sleep(0.1)
        raise TimeoutError("blind binder not ready after 60 s")


class KubeScheduler(Scheduler):
    kind = "kube"

    def __init__(self, tb: BenchBed, qps: float, burst: int, verbosity: int) -> None:
        self.tb = tb
        self.config = {"clientConnection": {"kubeconfig": str(tb.dir / "kube-scheduler.kubeconfig"),
                                            "qps": qps, "burst": burst}}
        self.verbosity = verbosity

    async def start(self) -> None:
        await asyncio.to_thread(self.tb.start_kube_scheduler, config=self.config, verbosity=self.verbosity,
                                restart=False, timeout=180)

    async def stop(self) -> None:
        await asyncio.to_thread(self.tb.stop_kube_scheduler)

    @property
    def pid(self) -> int | None:
        return self.tb.pid(bed.KUBE_SCHEDULER)


# -- cluster set-up ----------------------------------------------------------------------------------

async def ensure_nodes(api: Api, n: int) -> None:
    """Create benchmark nodes ``node-00000`` .. ``node-<n-1>`` (existing ones kept)."""
    await api.create_many(lambda _: "/api/v1/nodes", (workloads.make_node(i) for i in range(n)),
                          concurrency=32, exist_ok=True)


async def ensure_namespace(api: Api, ns: str) -> None:
    try:
        await api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": ns}})
    except ApiError as exc:
        if exc.status != 409:
            raise


async def delete_pods(api: Api, ns: str, timeout: float = 300.0) -> None:
    """Force-delete every Pod of ``ns`` (grace period 0) and wait until none is left."""
    await api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "DeleteOptions",
                                                                  "gracePeriodSeconds": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = await api.request("GET", f"/api/v1/namespaces/{ns}/pods", params={"limit": "1"})
        if not left.get("items"):
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"pods of {ns} not gone after {timeout} s")


async def measure(api: Api, ns: str, workload: Workload, n_nodes: int, n_pods: int, scheduler: str,
                  timeout: float, create_concurrency: int, first_index: int = 0) -> RunResult:
    """Create ``n_pods`` Pods of ``workload`` for ``scheduler`` in ``ns`` and time their binding."""
    res = RunResult(scheduler, workload.name, n_nodes, n_pods)
    await ensure_namespace(api, ns)
    listed = await api.request("GET", f"/api/v1/namespaces/{ns}/pods")
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    all_bound = asyncio.Event()

    async def watcher() -> None:
        rv = listed["metadata"]["resourceVersion"]
        while True:
            try:
                async for ev in api.watch(f"/api/v1/namespaces/{ns}/pods", rv):
                    obj = ev.get("object") or {}
                    meta = obj.get("metadata") or {}
                    rv = meta.get("resourceVersion", rv)
                    name = meta.get("name")
                    if ev.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName") \
                            and name not in bound:
                        bound[name] = time.perf_counter()
                        if len(bound) >= n_pods:
                            all_bound.set()
            except (aiohttp.ClientError, ApiError) as exc:
                print(f"  watch restarted: {exc}", file=sys.stderr)

    wt = asyncio.create_task(watcher())
    await asyncio.sleep(0.2)  # let the watch open before the first create
    sched_name = SCHEDULER_NAMES[scheduler]
    pods = (workload.pod(first_index + i, ns, sched_name, None) for i in range(n_pods))
    t0 = time.perf_counter()

    def on_created(obj: Obj, t: float) -> None:
        created[obj["metadata"]["name"]] = t

    await api.create_many(lambda p: f"/api/v1/namespaces/{ns}/pods", pods, concurrency=create_concurrency,
                          on_created=on_created)
    res.create_seconds = time.perf_counter() - t0
    try:
        await asyncio.wait_for(all_bound.wait(), timeout)
    except TimeoutError:
        res.timed_out = True
    wt.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await wt
    res.bound = len(bound)
    if created and bound:
        first = min(created.values())
        res.seconds = max(bound.values()) - first
        res.latencies = [bound[n] - created[n] for n in bound if n in created]
    return res


# -- the benchmark ---------------------------------------------------------------------------------

@dataclass(slots=True)
class Options:
    nodes: int = 1000
    pods: int = 5000
    workload: str = "SchedulingBasic"
    schedulers: tuple[str, ...] = ("py", "kube", "blind")
    qps: float = 5000.0
    burst: int = 5000
    verbosity: int = 1
    timeout: float = 900.0
    create_concurrency: int = 32
    repeat: int = 1
    rss: bool = False
    rss_nodes: int = 5000
    rss_pods: int = 30000
    keep: bool = False
    bed_dir: str | None = None


@contextlib.contextmanager
def bench_bed(opts: Options) -> Iterator[BenchBed]:
    """A running bed (etcd + kube-apiserver, no scheduler) in /dev/shm; stopped and removed after."""
    root = Path(opts.bed_dir) if opts.bed_dir else Path(tempfile.mkdtemp(
        prefix="py-scheduler-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    tb = BenchBed(root)
    try:
        tb.up(with_kube_scheduler=False, progress=lambda m: print(f"[bed] {m}", file=sys.stderr, flush=True))
        yield tb
    finally:
        tb.down()
        if not opts.keep and not opts.bed_dir:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"[bed] kept {root}", file=sys.stderr)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_scheduler(kind: str, tb: BenchBed, endpoint: Endpoint, opts: Options) -> Scheduler:
    if kind == "py":
        return PyScheduler(tb, opts.qps, opts.burst, opts.verbosity, _free_port())
    if kind == "kube":
        return KubeScheduler(tb, opts.qps, opts.burst, opts.verbosity)
    if kind in ("blind", "blindev"):
        return BlindBinder(tb, endpoint, opts.qps, opts.burst, events=kind == "blindev")
    raise ValueError(f"unknown scheduler {kind!r} (py, kube, blind, blindev)")


def endpoint_of(tb: BenchBed) -> Endpoint:
    return Endpoint(tb.server, str(tb.ca_file), str(tb.admin_cert), str(tb.admin_key))


async def run_throughput(opts: Options) -> list[RunResult]:
    """Throughput / latency runs (``opts.repeat`` rounds over ``opts.schedulers``) in one bed."""
    wl = workloads.get_workload(opts.workload)
    n_pods = workloads.max_pods(wl, opts.nodes, opts.pods)
    results: list[RunResult] = []
    with bench_bed(opts) as tb:
        endpoint = endpoint_of(tb)
        async with Api(endpoint, qps=1e6, burst=1_000_000) as api:
            t = time.perf_counter()
            await ensure_nodes(api, opts.nodes)
            print(f"[bench] {opts.nodes} nodes in {time.perf_counter() - t:.1f}s; {n_pods} {wl.name} pods per run",
                  file=sys.stderr, flush=True)
            for rnd in range(opts.repeat):
                for kind in opts.schedulers:
                    sched = make_scheduler(kind, tb, endpoint, opts)
                    ns = f"bench-{kind}-{rnd}"
                    await sched.start()
                    try:
                        pid = sched.pid
                        cpu0 = cpu_seconds(pid) if pid else 0.0
                        res = await measure(api, ns, wl, opts.nodes, n_pods, kind, opts.timeout,
                                            opts.create_concurrency)
                        res.cpu_seconds = (cpu_seconds(pid) - cpu0) if pid else 0.0
                        res.rss_kib = vm_hwm_kib(pid) if pid else 0
                    finally:
                        await sched.stop()
                    await delete_pods(api, ns)
                    results.append(res)
                    print(format_result(res), flush=True)
    return results


async def run_rss(opts: Options) -> list[RunResult]:
    """Peak RSS of each scheduler (py, kube) with ``rss_nodes`` nodes and ``rss_pods`` bound Pods."""
    wl = workloads.get_workload("SchedulingBasic")
    results: list[RunResult] = []
    with bench_bed(opts) as tb:
        endpoint = endpoint_of(tb)
        async with Api(endpoint, qps=1e6, burst=1_000_000) as api:
            t = time.perf_counter()
            await ensure_nodes(api, opts.rss_nodes)
            await ensure_namespace(api, "bench-rss")

            def bound_pods() -> Iterator[Obj]:
                for i in range(opts.rss_pods):
                    p = wl.pod(i, "bench-rss", "not-scheduled-by-anyone", None)
                    p["spec"]["nodeName"] = workloads.node_name(i % opts.rss_nodes)
                    yield p

            await api.create_many(lambda p: "/api/v1/namespaces/bench-rss/pods", bound_pods(), concurrency=48)
            print(f"[bench] {opts.rss_nodes} nodes + {opts.rss_pods} bound pods in {time.perf_counter() - t:.1f}s",
                  file=sys.stderr, flush=True)
            for kind in [k for k in opts.schedulers if k != "blind"]:
                sched = make_scheduler(kind, tb, endpoint, opts)
                ns = f"bench-rss-{kind}"
                await sched.start()
                try:
                    res = await measure(api, ns, wl, opts.rss_nodes, 50, kind, opts.timeout, 8,
                                        first_index=opts.rss_pods)
                    await asyncio.sleep(2)
                    pid = sched.pid
                    res.rss_kib = vm_hwm_kib(pid) if pid else 0
                finally:
                    await sched.stop()
                await delete_pods(api, ns)
                results.append(res)
                print(f"{kind:<6} peak RSS (VmHWM) {res.rss_kib / 1024:8.1f} MiB with {opts.rss_nodes} nodes, "
                      f"{opts.rss_pods} bound pods ({res.bound}/50 test pods bound)", flush=True)
    return results


def format_result(r: RunResult) -> str:
    s = r.summary()
    flag = "  TIMED OUT" if r.timed_out else ""
    return (f"{r.scheduler:<6} {r.workload:<20} nodes={r.nodes:<5} pods={r.bound}/{r.pods:<6} "
            f"{s['pods_per_second']:8.1f} pods/s  p50={s['p50_ms']:8.1f} ms  p90={s['p90_ms']:8.1f} ms  "
            f"p99={s['p99_ms']:8.1f} ms  cpu/pod={s['cpu_ms_per_pod']:5.2f} ms  (create {r.create_seconds:.1f}s, "
            f"RSS {r.rss_kib / 1024:.0f} MiB){flag}")


def ratios(results: Sequence[RunResult]) -> dict[str, float]:
    """Medians over repetitions per scheduler, then py/kube and py/blind for throughput and p99."""
    by: dict[str, list[RunResult]] = {}
    by_cpu: dict[str, float] = {}
    for r in results:
        by.setdefault(r.scheduler, []).append(r)
    for k, v in by.items():
        out_cpu = statistics.median(r.cpu_seconds * 1000 / r.bound for r in v if r.bound) if v else 0.0
        by_cpu[k] = out_cpu
    med = {k: (statistics.median(r.pods_per_second for r in v),
               statistics.median(percentile([x * 1000 for x in r.latencies], 99) for r in v)) for k, v in by.items()}
    out: dict[str, float] = {}
    for k, (tput, p99) in med.items():
        out[f"{k}_pods_per_second"] = round(tput, 1)
        out[f"{k}_p99_ms"] = round(p99, 1)
        out[f"{k}_cpu_ms_per_pod"] = round(by_cpu.get(k, 0.0), 2)
    if "py" in med:
        for other in ("kube", "blind", "blindev"):
            if other in med and med[other][0] > 0:
                out[f"py/{other}_throughput"] = round(med["py"][0] / med[other][0], 3)
            if other in med and med["py"][1] > 0:
                out[f"py/{other}_p99_latency"] = round(med["py"][1] / med[other][1], 3) if med[other][1] else 0.0
    return out
