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
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.bench_lib import cores, workloads
from bench.bench_lib.kubeapi import Api, ApiError, Endpoint, gather_bounded
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
KCM_ARGS = ("--kube-api-qps=5000", "--kube-api-burst=5000")
"""kube-controller-manager's client rate for the workloads that start it (the PV binder for
SchedulingWaitForFirstConsumer, the resourceclaim controller for SchedulingWithResourceClaimTemplate):
scheduler_perf gives its in-process controllers a client of 5000 QPS / 5000 burst
(test/integration/scheduler_perf/util.go, ``mustSetupCluster``). At kube-controller-manager's default
(20 QPS, burst 30, per controller with ``--use-service-account-credentials``) the resourceclaim
controller's two writes per Pod (the claim, the Pod's ``resourceClaimStatuses``) paced both schedulers
at about 10 Pods/s. ``BENCH_KCM_ARGS`` adds flags (last wins)."""


class BenchBed(bed.Testbed):
    """The e2e :class:`bed.Testbed` with extra kube-apiserver flags (``apiserver_args``) and, per
    process name, an argv prefix (``prefixes``: ``taskset -c`` / ``env GOMAXPROCS=``, issue 32's
    pinning; :func:`bench.bench_lib.cores.pin_prefix`)."""

    __test__ = False
    apiserver_args: Sequence[str] = APISERVER_ARGS

    def __init__(self, directory: Path, prefixes: dict[str, list[str]] | None = None) -> None:
        super().__init__(directory)
        self.prefixes: dict[str, list[str]] = dict(prefixes or {})

    def _spawn(self, name: str, argv: list[str], port: int | None = None, *, restart: bool = False) -> int:
        if name == bed.APISERVER:
            # BENCH_APISERVER_ARGS: more flags, last wins (e.g. "--profiling=true" for /debug/pprof)
            argv = [*argv, *self.apiserver_args, *shlex.split(os.environ.get("BENCH_APISERVER_ARGS", ""))]
        elif name == bed.KUBE_CONTROLLER_MANAGER:
            argv = [*argv, *KCM_ARGS, *shlex.split(os.environ.get("BENCH_KCM_ARGS", ""))]
        return super()._spawn(name, [*self.prefixes.get(name, []), *argv], port, restart=restart)


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
    """CPU time the scheduler process used from ready to the last binding (robust to other load on
    the machine)."""
    mode: str = "live"
    """``live`` (Pods created while the scheduler runs) or ``backlog`` (created before it starts)."""
    round: int = 0
    init_pods: int = 0
    """Init Pods created already bound before the measured ones."""
    extra_pods: int = 0
    """Never-bound Pods (unschedulable / gated) created among the measured ones."""
    ready_seconds: float = 0.0
    """Process start -> first ``/readyz`` 200."""
    startup_cpu_seconds: float = 0.0
    """CPU time of the scheduler process from its start to ready."""
    start_to_bound_seconds: float = 0.0
    """Process start -> last binding (backlog)."""
    drain_seconds: float = 0.0
    """First binding -> last binding (backlog)."""
    prepare_seconds: float = 0.0
    """Backlog, workloads with :attr:`Workload.prepared`: the last creation -> every measured Pod
    prepared by its controller (the scheduler starts after it)."""
    label: str = ""
    """``py@1``: the scheduler and the CPUs it was pinned to (:func:`cores.label`); the kind if not."""
    cores: int = 0
    """CPUs the scheduler was pinned to (0: not pinned)."""
    cpus_allowed: str = ""
    """The scheduler's ``Cpus_allowed_list`` (over all its threads) read after ready."""
    critical_cpu_seconds: float = 0.0
    """Critical-path CPU from ready to the last binding: py, its main (asyncio loop) thread's; kube,
    :func:`cores.kube_critical` from its CPU profile (0: no profile taken)."""
    control_cpu_seconds: float = 0.0
    """CPU time of the control plane (etcd, kube-apiserver, kube-controller-manager) from ready to the
    last binding: what serving this scheduler's requests and watches cost the API server (0: not
    measured)."""
    cpu_parts: dict[str, float] = field(default_factory=dict)
    """kube-scheduler: share of its profiled CPU per :data:`cores.PROFILE_PARTS` (``--kube-profile``)."""

    @property
    def pods_per_second(self) -> float:
        """Live: bound Pods / (first creation -> last binding); backlog: the drain rate, bound Pods /
        (first binding -> last binding)."""
        return self.bound / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        lat = [max(0.0, x) * 1000 for x in self.latencies]
        d = asdict(self)
        del d["latencies"]
        d.update(pods_per_second=round(self.pods_per_second, 1), p50_ms=round(percentile(lat, 50), 1),
                 cpu_ms_per_pod=round(self.cpu_seconds * 1000 / self.bound, 2) if self.bound else 0.0,
                 critical_ms_per_pod=round(self.critical_cpu_seconds * 1000 / self.bound, 2) if self.bound else 0.0,
                 control_ms_per_pod=round(self.control_cpu_seconds * 1000 / self.bound, 2) if self.bound else 0.0,
                 p90_ms=round(percentile(lat, 90), 1), p99_ms=round(percentile(lat, 99), 1))
        return d


def descendants(pid: int) -> list[int]:
    """The live processes under ``pid`` (``/proc/<pid>/task/<tid>/children``, recursively): py-scheduler's
    node shard workers."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            kids = [int(k) for k in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
        for k in kids:
            out.append(k)
            out.extend(descendants(k))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid`` and its live descendants (``/proc/<pid>/stat``;
    py-scheduler's node shard workers are processes of their own); 0.0 if unreadable."""
    total = 0.0
    for p in (pid, *descendants(pid)):
        try:
            total += cores.stat_cpu_seconds(Path(f"/proc/{p}/stat").read_text(), os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError):
            continue
    return total


def main_thread_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``'s main thread (TID = PID): py-scheduler's asyncio loop, which runs every
    scheduling cycle; 0.0 if unreadable."""
    return cores.thread_cpu_seconds(pid).get(pid, 0.0)


def vm_hwm_kib(pid: int) -> int:
    """Peak resident set size (``VmHWM``) of ``pid`` plus that of each live descendant (the Filter
    shard workers' replicas), in KiB; 0 if unreadable."""
    total = 0
    for p in (pid, *descendants(pid)):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total


# -- schedulers --------------------------------------------------------------------------------------

class Scheduler:
    """A scheduler process under test."""

    kind = ""
    started_at: float = 0.0
    """``time.perf_counter()`` just before the process was started."""
    ready_at: float = 0.0
    """``time.perf_counter()`` at its first ``/readyz`` 200 (blind binder: its ``ready`` line)."""

    @property
    def ready_seconds(self) -> float:
        """Start -> ready, seconds."""
        return self.ready_at - self.started_at if self.ready_at else 0.0

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        raise NotImplementedError


class _Child(Scheduler):
    """A child process we started (py-scheduler, blind binder)."""

    def __init__(self, argv: list[str], log: Path, prefix: Sequence[str] = ()) -> None:
        self.argv = [*prefix, *argv]
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

    def __init__(self, tb: BenchBed, qps: float, burst: int, verbosity: int, port: int,
                 prefix: Sequence[str] = ()) -> None:
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
        wrap = shlex.split(os.environ.get("BENCH_PY_WRAP", ""))
        # BENCH_PY_ARGS: options added to ``py-scheduler run``, e.g. "--no-request-process"
        extra = shlex.split(os.environ.get("BENCH_PY_ARGS", ""))
        super().__init__([sys.executable, *wrap, "-m", "py_scheduler.cli", "run", *extra,
                          "--kubeconfig", str(tb.kubeconfig),
                          "--config", str(cfg_path), "--no-leader-elect",
                          "--metrics-bind-address", f"127.0.0.1:{port}", "--plain-http",  # readiness poll only
                          "--v", str(verbosity)],
                         tb.logs_dir / "py-scheduler-bench.log", prefix)

    async def start(self) -> None:
        self.started_at = time.perf_counter()
        self._popen()
        self.ready_at = await poll_ready(f"http://127.0.0.1:{self.port}/readyz", 300.0, self.check_alive)


class BlindBinder(_Child):
    kind = "blind"

    def __init__(self, tb: BenchBed, endpoint: Endpoint, qps: float, burst: int, events: bool = False,
                 prefix: Sequence[str] = ()) -> None:
        if events:
            self.kind = "blindev"
        super().__init__([sys.executable, "-m", "bench.bench_lib.blind", *endpoint.argv(),
                          "--scheduler-name", SCHEDULER_NAMES["blind"], "--qps", str(qps), "--burst", str(burst),
                          *(["--events"] if events else [])],
                         tb.logs_dir / "blind-binder.log", prefix)

    async def start(self) -> None:
        self.started_at = time.perf_counter()
        self._popen()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.check_alive()
            if "\nready\n" in self.log.read_text(errors="replace").rsplit("=====", 1)[-1]:
                self.ready_at = time.perf_counter()
                return
            await asyncio.sleep(0.05)
        raise TimeoutError("blind binder not ready after 60 s")


class KubeScheduler(Scheduler):
    kind = "kube"

    def __init__(self, tb: BenchBed, qps: float, burst: int, verbosity: int, prefix: Sequence[str] = ()) -> None:
        self.tb = tb
        self.prefix = list(prefix)
        # No leader election, as py-scheduler's --no-leader-elect: time to ready is the informers' sync.
        connection: dict[str, Any] = {"kubeconfig": str(tb.dir / "kube-scheduler.kubeconfig"), "qps": qps,
                                      "burst": burst}
        # BENCH_KUBE_CONTENT_TYPE: kube-scheduler's clientConnection.contentType (its default is
        # protobuf; "application/json" makes it speak to the API server as py-scheduler does)
        if os.environ.get("BENCH_KUBE_CONTENT_TYPE"):
            connection["contentType"] = os.environ["BENCH_KUBE_CONTENT_TYPE"]
        self.config = {"clientConnection": connection, "leaderElection": {"leaderElect": False}}
        self.verbosity = verbosity

    async def start(self) -> None:
        port = self.tb._port(bed.KUBE_SCHEDULER)  # recorded: the bed starts it on this port
        self.port = port
        self.tb.prefixes[bed.KUBE_SCHEDULER] = self.prefix
        self.started_at = time.perf_counter()
        poller = asyncio.create_task(poll_ready(f"https://127.0.0.1:{port}/readyz", 300.0))
        try:
            await asyncio.to_thread(self.tb.start_kube_scheduler, config=self.config, verbosity=self.verbosity,
                                    restart=False, timeout=300, wait_leading=False)
            healthy_at = time.perf_counter()
            try:
                self.ready_at = await asyncio.wait_for(poller, 60)
            except TimeoutError:  # the bed moved it to another port (a clash): healthy is the nearest figure
                print("  kube-scheduler /readyz not seen; time to ready = time to healthy", file=sys.stderr)
                self.ready_at = healthy_at
        finally:
            poller.cancel()

    async def stop(self) -> None:
        await asyncio.to_thread(self.tb.stop_kube_scheduler)

    @property
    def pid(self) -> int | None:
        return self.tb.pid(bed.KUBE_SCHEDULER)


async def poll_ready(url: str, timeout: float, check: Callable[[], None] | None = None) -> float:
    """Poll ``url`` every 20 ms until it answers 200; return ``time.perf_counter()`` then.

    HTTPS is not verified (kube-scheduler serves a self-signed certificate; ``/readyz`` is in its
    ``--authorization-always-allow-paths``). ``check()`` runs before each attempt (raise to give up).

    Raises:
        TimeoutError: no 200 within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
        while time.monotonic() < deadline:
            if check is not None:
                check()
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return time.perf_counter()
            await asyncio.sleep(0.02)
    raise TimeoutError(f"{url} not ready after {timeout} s")


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
    """Force-delete every Pod of ``ns`` (grace period 0) and wait until none is left.

    A collection DELETE of ~20000 Pods can outlast the API server's request timeout (60 s): it
    answers 504 and stops partway, so the DELETE is sent again until the namespace is empty.

    Raises:
        TimeoutError: Pods still left after ``timeout`` seconds.
        ApiError: any other failure of the DELETE or the LIST.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await api.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
                              {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 504:
                raise
            continue
        settle = min(deadline, time.monotonic() + 30.0)
        while time.monotonic() < settle:
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


async def churn(api: Api, ns: str, scheduler_name: str, stop: asyncio.Event, interval: float = 1.0) -> int:
    """SchedulingWithMixedChurn's ``churn`` op (mode ``recreate``, ``number: 1``): every ``interval``
    seconds delete the previous node / Pod / Service and create the next set
    (:func:`workloads.churn_objects`) until ``stop`` is set; the last set is deleted too. Returns
    how many sets were created."""
    k = 0
    prev: list[tuple[str, Obj]] = []

    async def drop(objs: list[tuple[str, Obj]]) -> None:
        for path, obj in objs:
            with contextlib.suppress(ApiError):
                await api.request("DELETE", f"{path}/{obj['metadata']['name']}",
                                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})

    while not stop.is_set():
        await drop(prev)
        prev = workloads.churn_objects(k, ns, scheduler_name)
        for path, obj in prev:
            await api.request("POST", path, obj)
        k += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
    await drop(prev)
    return k


async def run_once(api: Api, sched: Scheduler, kind: str, ns: str, workload: Workload, n_nodes: int, n_pods: int,
                   n_init: int, *, backlog: bool, timeout: float, create_concurrency: int,
                   round_no: int = 0, arm: Arm | None = None, kube_profile: float = 0.0,
                   control_pids: Sequence[int] = ()) -> RunResult:
    """One scheduler's run of ``workload`` in namespace ``ns``; starts ``sched``, never stops it.

    1. ``n_init`` init Pods created already bound (upstream's ``createPods`` of ``initPods``, here
       without scheduling them);
    2. a watch on ``ns`` from the current resourceVersion (binding time = when it first shows
       ``spec.nodeName`` of a measured Pod, ``time.perf_counter`` in this process);
    3. ``backlog``: the ``n_pods`` measured Pods (and the workload's never-bound extra Pods among
       them) are created, then, once the workload's controller has prepared each of them
       (:attr:`Workload.prepared`, ``prepare_seconds``), the scheduler starts; otherwise the
       scheduler starts first;
    4. SchedulingWithMixedChurn's churn runs from ready to the last binding;
    5. wait until every measured Pod is bound (or ``timeout`` seconds).

    Figures: live = first creation -> last binding and creation -> binding latencies; backlog = the
    drain (first -> last binding), start -> last binding, and queue -> binding latencies counted
    from ready (when the scheduler's informers have every Pod queued). CPU per Pod counts from
    ready; the start-up CPU is kept apart. Critical-path CPU (issue 32) from ready too: py, the main
    thread's (:func:`main_thread_cpu_seconds`); kube, with ``kube_profile`` > 0, a CPU profile of that
    many seconds from ready split by :func:`cores.profile_shares`. Control-plane CPU per Pod: the
    ``control_pids``' CPU over the same span (with SchedulingWithMixedChurn it includes the churn's
    requests). The scheduler's
    ``Cpus_allowed_list`` is read after ready and logged.
    """
    res = RunResult(kind, workload.name, n_nodes, n_pods, mode="backlog" if backlog else "live", round=round_no)
    if arm is not None:
        res.label, res.cores = arm.label, len(arm.cpus or ())
    sched_name = SCHEDULER_NAMES[kind]
    await ensure_namespace(api, ns)
    await create_pod_objects(api, workload, ns, range(n_init + n_pods), n_nodes, create_concurrency)
    for obj in workload.namespace_objects(ns) if workload.namespace_objects is not None else ():
        await api.request("POST", collection_path(obj), obj)
    if n_init:
        res.init_pods = await api.create_many(
            lambda _: f"/api/v1/namespaces/{ns}/pods",
            workloads.init_pods(workload, n_nodes, n_init, ns, sched_name, uids=False),
            concurrency=create_concurrency)
    listed = await api.request("GET", f"/api/v1/namespaces/{ns}/pods", params={"limit": "1"})
    measured: set[str] = set()
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    all_bound = asyncio.Event()
    prepared: set[str] = set()
    all_prepared = asyncio.Event()

    async def watcher() -> None:
        rv = listed["metadata"]["resourceVersion"]
        while True:
            try:
                async for ev in api.watch(f"/api/v1/namespaces/{ns}/pods", rv):
                    obj = ev.get("object") or {}
                    meta = obj.get("metadata") or {}
                    rv = meta.get("resourceVersion", rv)
                    name = meta.get("name")
                    if workload.prepared is not None and name in measured and name not in prepared \
                            and workload.prepared(obj):
                        prepared.add(name)
                        if len(prepared) >= n_pods:
                            all_prepared.set()
                    if ev.get("type") in ("ADDED", "MODIFIED") and name in measured and name not in bound \
                            and (obj.get("spec") or {}).get("nodeName"):
                        bound[name] = time.perf_counter()
                        if len(bound) >= n_pods:
                            all_bound.set()
            except (aiohttp.ClientError, ApiError) as exc:
                print(f"  watch restarted: {exc}", file=sys.stderr)

    def pods() -> Iterator[Obj]:
        for i in range(n_pods):
            pod = workload.pod(n_init + i, ns, sched_name, None)
            measured.add(pod["metadata"]["name"])
            yield pod
            if workload.extra is not None:
                while res.extra_pods < (i + 1) * workload.extra_ratio:
                    yield workload.extra(res.extra_pods, ns, sched_name, None)
                    res.extra_pods += 1

    def on_created(obj: Obj, t: float) -> None:
        created[obj["metadata"]["name"]] = t

    async def create() -> None:
        t0 = time.perf_counter()
        await api.create_many(lambda _: f"/api/v1/namespaces/{ns}/pods", pods(), concurrency=create_concurrency,
                              on_created=on_created)
        res.create_seconds = time.perf_counter() - t0

    wt = asyncio.create_task(watcher())
    stop_churn = asyncio.Event()
    churn_task: asyncio.Task[int] | None = None
    profile_task: asyncio.Task[dict[str, float]] | None = None
    try:
        if backlog:
            await create()
            if workload.prepared is not None:
                t0 = time.perf_counter()
                try:
                    await asyncio.wait_for(all_prepared.wait(), timeout)
                except TimeoutError:  # the round still runs, marked: its scheduler met unprepared Pods
                    res.timed_out = True
                    print(f"  {len(prepared)} of {n_pods} Pods prepared after {timeout:.0f} s; starting anyway",
                          file=sys.stderr, flush=True)
                res.prepare_seconds = time.perf_counter() - t0
        await sched.start()
        pid = sched.pid
        cpu_ready = cpu_seconds(pid) if pid else 0.0
        main_ready = main_thread_cpu_seconds(pid) if pid else 0.0
        control_ready = sum(cpu_seconds(p) for p in control_pids)
        res.ready_seconds = sched.ready_seconds
        res.startup_cpu_seconds = cpu_ready
        if pid:
            res.cpus_allowed = " / ".join(sorted(set(cores.cpus_allowed(pid).values())))
            print(cores.describe_pinning(res.label or kind, pid), file=sys.stderr, flush=True)
        if kind == "kube" and kube_profile > 0 and isinstance(sched, KubeScheduler):
            tag = f"{res.label or kind}-r{round_no}"
            profile_task = asyncio.create_task(kube_cpu_profile(sched, kube_profile, tag))
        if workload.churn:
            churn_task = asyncio.create_task(churn(api, ns, sched_name, stop_churn))
        if not backlog:
            await create()
        try:
            await asyncio.wait_for(all_bound.wait(), timeout)
        except TimeoutError:
            res.timed_out = True
        res.cpu_seconds = (cpu_seconds(pid) - cpu_ready) if pid else 0.0
        res.control_cpu_seconds = sum(cpu_seconds(p) for p in control_pids) - control_ready
        if pid and kind != "kube":
            res.critical_cpu_seconds = main_thread_cpu_seconds(pid) - main_ready
        res.rss_kib = vm_hwm_kib(pid) if pid else 0
        if profile_task is not None and pid:
            res.cpu_parts = await profile_task
            res.critical_cpu_seconds = cores.kube_critical(res.cpu_seconds, res.cpu_parts, _parallel_cpus(pid))
    finally:
        if profile_task is not None and not profile_task.done():
            profile_task.cancel()
        stop_churn.set()
        if churn_task is not None:
            await churn_task
        wt.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await wt
    res.bound = len(bound)
    if bound:
        last = max(bound.values())
        if backlog:
            res.drain_seconds = res.seconds = last - min(bound.values())
            res.start_to_bound_seconds = last - sched.started_at
            res.latencies = [t - sched.ready_at for t in bound.values()]
        elif created:
            res.seconds = last - min(created.values())
            res.latencies = [bound[n] - created[n] for n in bound if n in created]
    return res


def _parallel_cpus(pid: int) -> int:
    """How many CPUs a Go process can run on at once: its affinity, capped by its GOMAXPROCS."""
    try:
        n = len(os.sched_getaffinity(pid))
    except OSError:
        n = os.cpu_count() or 1
    gmp = cores.environ_value(pid, "GOMAXPROCS")
    return min(n, int(gmp)) if gmp and gmp.isdigit() and int(gmp) > 0 else n


async def kube_cpu_profile(sched: KubeScheduler, seconds: float, tag: str) -> dict[str, float]:
    """A ``seconds``-long CPU profile of the running kube-scheduler (``/debug/pprof/profile``, the
    bed's admin client certificate: system:masters passes its delegated authorization), kept as
    ``logs/kube-scheduler-<tag>.pprof`` in the bed and split by ``go tool pprof -traces`` and
    :func:`cores.profile_shares`. ``{}`` (and a line on stderr) if it cannot be taken."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate
    ctx.load_cert_chain(str(sched.tb.admin_cert), str(sched.tb.admin_key))
    url = f"https://127.0.0.1:{sched.tb._port(bed.KUBE_SCHEDULER)}/debug/pprof/profile"
    out = sched.tb.logs_dir / f"kube-scheduler-{tag}.pprof"
    go = shutil.which("go")
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s, \
                s.get(url, params={"seconds": str(max(1, round(seconds)))},
                      timeout=aiohttp.ClientTimeout(total=seconds + 60)) as r:
            body = await r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
        out.write_bytes(body)
        if go is None:
            raise RuntimeError("no go on PATH for go tool pprof")
        done = await asyncio.to_thread(subprocess.run, [go, "tool", "pprof", "-traces", str(out)],
                                       capture_output=True, text=True, timeout=300, check=True)
    except (aiohttp.ClientError, OSError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"  kube-scheduler CPU profile not taken: {exc}", file=sys.stderr, flush=True)
        return {}
    shares = cores.profile_shares(cores.parse_pprof_traces(done.stdout))
    print(f"[profile] kube-scheduler {tag}: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
          + f" ({out})", file=sys.stderr, flush=True)
    return shares


def run_sizes(workload: Workload, n_nodes: int, wanted_pods: int, wanted_init: int | None) -> tuple[int, int]:
    """(measured Pods, init Pods) for ``workload`` on ``n_nodes``: the workload's default init count
    unless ``wanted_init``; GPU workloads keep init Pods to half the GPUs and measured Pods to what is
    left (as bench/cycle)."""
    n_init = workload.default_init(n_nodes) if wanted_init is None else wanted_init
    if not workload.gpus:
        return workloads.max_pods(workload, n_nodes, wanted_pods), n_init
    cap = workloads.max_pods(workload, n_nodes, 10**9)
    n_init = min(n_init, cap // 2)
    return min(wanted_pods, cap - n_init), n_init


async def ensure_setup(api: Api, workload: Workload, n_nodes: int) -> None:
    """Create the workload's cluster objects (PriorityClasses...) and per-node objects (CSINodes);
    existing ones are kept."""
    for path, obj in workload.setup:
        try:
            await api.request("POST", path, obj)
        except ApiError as exc:
            if exc.status != 409:
                raise
    if workload.node_object is not None:
        factory = workload.node_object
        await api.create_many(lambda o: collection_path(o), (factory(i) for i in range(n_nodes)), concurrency=32,
                              exist_ok=True)


COLLECTIONS = {"StorageClass": "storageclasses", "PriorityClass": "priorityclasses",
               "ResourceSlice": "resourceslices", "DeviceClass": "deviceclasses",
               "ResourceClaimTemplate": "resourceclaimtemplates",
               "PersistentVolumeClaim": "persistentvolumeclaims", "PersistentVolume": "persistentvolumes",
               "CSINode": "csinodes", "Pod": "pods", "Service": "services", "Node": "nodes"}


def collection_path(obj: Obj) -> str:
    """The collection an object is POSTed to (the kinds the benchmarks create)."""
    group_version = obj["apiVersion"]
    base = f"/api/{group_version}" if group_version == "v1" else f"/apis/{group_version}"
    ns = obj["metadata"].get("namespace")
    plural = COLLECTIONS[obj["kind"]]
    return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"


async def create_with_status(api: Api, obj: Obj) -> None:
    """POST ``obj``, then write its ``status`` through the ``/status`` subresource (the API server
    resets statuses on create; upstream's ``CreatePodWithPersistentVolume`` does the same)."""
    path = collection_path(obj)
    current = await api.request("POST", path, obj)
    if not obj.get("status"):
        return
    item = f"{path}/{obj['metadata']['name']}"
    for _ in range(10):  # kube-controller-manager's PV binder may write the status first (WFFC)
        current["status"] = obj["status"]
        try:
            await api.request("PUT", f"{item}/status", current)
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
        current = await api.request("GET", item)
    raise ApiError(409, f"status of {item} kept conflicting")


async def create_pod_objects(api: Api, workload: Workload, namespace: str, indices: range, n_nodes: int,
                             concurrency: int) -> int:
    """Create what Pods ``indices`` of ``workload`` need first (their PVC and PV, in that order, as
    upstream); returns how many objects."""
    if not workload.volumes:
        return 0
    sem = asyncio.Semaphore(concurrency)
    count = 0

    async def one(i: int) -> None:
        nonlocal count
        async with sem:
            for obj in workloads.pod_objects(workload, i, namespace, n_nodes):
                await create_with_status(api, obj)
                count += 1

    await gather_bounded(one(i) for i in indices)
    return count


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
    backlog: bool = False
    init: int | None = None
    """Init Pods per run (None: the workload's default, :meth:`Workload.default_init`)."""
    pinning: cores.Pinning = field(default_factory=cores.Pinning)
    """CPUs of the control plane, the scheduler under test and the bench (issue 32; none by default)."""
    kube_profile: float = 0.0
    """Seconds of kube-scheduler CPU profile from ready (0: none; its critical-path CPU stays 0)."""
    configs: tuple[tuple[str, int], ...] = ()
    """The cores matrix (``("py", 1), ("kube", 2)``...): each scheduler pinned to the first N CPUs of
    ``pinning.scheduler`` (kube-scheduler with ``GOMAXPROCS=N``) instead of ``schedulers``."""


@dataclass(frozen=True, slots=True)
class Arm:
    """One scheduler configuration of a round: ``kind`` on ``cpus`` (None: unpinned), kube-scheduler
    with ``GOMAXPROCS=gomaxprocs`` when set; ``label`` names it in results (``py@1``)."""

    kind: str
    cpus: tuple[int, ...] | None = None
    gomaxprocs: int | None = None
    label: str = ""


def arms(opts: Options) -> tuple[list[Arm], list[str]]:
    """The configurations each round runs, and the matrix ones left out (more CPUs than
    ``--pin-scheduler`` lists)."""
    pin = opts.pinning
    if not opts.configs:
        n = len(pin.scheduler or ())
        return [Arm(k, pin.scheduler, pin.kube_gomaxprocs if k == "kube" else None, cores.label(k, n))
                for k in opts.schedulers], []
    pool = pin.scheduler or ()
    out: list[Arm] = []
    skipped: list[str] = []
    for kind, n in opts.configs:
        if n > len(pool):
            skipped.append(f"{cores.label(kind, n)} (--pin-scheduler lists {len(pool)} CPU(s))")
        else:
            out.append(Arm(kind, pool[:n], n if kind == "kube" else None, cores.label(kind, n)))
    return out, skipped


@contextlib.contextmanager
def bench_bed(opts: Options) -> Iterator[BenchBed]:
    """A running bed (etcd + kube-apiserver, no scheduler) in /dev/shm; stopped and removed after."""
    root = Path(opts.bed_dir) if opts.bed_dir else Path(tempfile.mkdtemp(
        prefix="py-scheduler-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    control = opts.pinning.control or (ORIGINAL_CPUS if opts.pinning.active else None)
    tb = BenchBed(root, {name: cores.pin_prefix(control) for name in CONTROL_PLANE})
    try:
        tb.up(with_kube_scheduler=False, progress=lambda m: print(f"[bed] {m}", file=sys.stderr, flush=True))
        log_control_pinning(tb)
        yield tb
    finally:
        tb.down()
        if not opts.keep and not opts.bed_dir:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"[bed] kept {root}", file=sys.stderr)


ORIGINAL_CPUS: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0)))
"""The CPUs this process could use at start: what an unpinned child gets once the bench pins itself."""
CONTROL_PLANE = (bed.ETCD, bed.APISERVER, bed.KUBE_CONTROLLER_MANAGER)


def log_control_pinning(tb: BenchBed) -> None:
    """Print the control plane's Cpus_allowed_list (the kernel's word on the pinning)."""
    for name in CONTROL_PLANE:
        pid = tb.pid(name)
        if pid:
            print(cores.describe_pinning(name, pid), file=sys.stderr, flush=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_scheduler(kind: str, tb: BenchBed, endpoint: Endpoint, opts: Options, arm: Arm | None = None) -> Scheduler:
    """The scheduler ``kind``, started under ``arm``'s pinning (unpinned children get the CPUs this
    process had at start when the bench pinned itself); without ``arm``, ``--pin-scheduler``'s (--rss)."""
    if arm is None:
        arm = Arm(kind, opts.pinning.scheduler, opts.pinning.kube_gomaxprocs if kind == "kube" else None)
    cpus = arm.cpus or (ORIGINAL_CPUS if opts.pinning.active else None)
    prefix = cores.pin_prefix(cpus, arm.gomaxprocs)
    if kind == "py":
        return PyScheduler(tb, opts.qps, opts.burst, opts.verbosity, _free_port(), prefix)
    if kind == "kube":
        return KubeScheduler(tb, opts.qps, opts.burst, opts.verbosity, prefix)
    if kind in ("blind", "blindev"):
        return BlindBinder(tb, endpoint, opts.qps, opts.burst, events=kind == "blindev", prefix=prefix)
    raise ValueError(f"unknown scheduler {kind!r} (py, kube, blind, blindev)")


def endpoint_of(tb: BenchBed) -> Endpoint:
    return Endpoint(tb.server, str(tb.ca_file), str(tb.admin_cert), str(tb.admin_key))


async def run_throughput(opts: Options) -> list[RunResult]:
    """Throughput / latency runs (``opts.repeat`` rounds over ``opts.schedulers``) in one bed."""
    """Throughput / latency runs (``opts.repeat`` rounds over ``opts.schedulers``, interleaved: py,
    kube, ... then again) in one bed; ``opts.backlog`` queues the measured Pods before each start."""
    wl = workloads.get_workload(opts.workload)
    n_pods, n_init = run_sizes(wl, opts.nodes, opts.pods, opts.init)
    results: list[RunResult] = []
    round_arms, skipped = arms(opts)
    for s in skipped:
        print(f"[bench] left out {s}", file=sys.stderr, flush=True)
    bench_cpus = opts.pinning.bench_cpus()
    if bench_cpus:
        os.sched_setaffinity(0, bench_cpus)  # this thread; threads made later inherit it
        print(f"[pin] bench pid {os.getpid()}: {cores.format_cpu_list(os.sched_getaffinity(0))}", file=sys.stderr)
    with bench_bed(opts) as tb:
        endpoint = endpoint_of(tb)
        async with Api(endpoint, qps=1e6, burst=1_000_000) as api:
            t = time.perf_counter()
            await ensure_nodes(api, opts.nodes)
            await ensure_setup(api, wl, opts.nodes)
            if wl.controller_manager:
                await asyncio.to_thread(tb.start_kube_controller_manager)
                log_control_pinning(tb)
            print(f"[bench] {opts.nodes} nodes in {time.perf_counter() - t:.1f}s; {n_init} init + {n_pods} "
                  f"{wl.name} pods per run ({'backlog' if opts.backlog else 'live'})", file=sys.stderr, flush=True)
            for rnd in range(opts.repeat):
                for arm in round_arms:
                    kind = arm.kind
                    sched = make_scheduler(kind, tb, endpoint, opts, arm)
                    ns = f"bench-{arm.label.replace('@', '-')}-{rnd}"
                    try:
                        res = await run_once(api, sched, kind, ns, wl, opts.nodes, n_pods, n_init,
                                             backlog=opts.backlog, timeout=opts.timeout,
                                             create_concurrency=opts.create_concurrency, round_no=rnd, arm=arm,
                                             kube_profile=opts.kube_profile,
                                             control_pids=[p for p in map(tb.pid, CONTROL_PLANE) if p])
                    finally:
                        await sched.stop()
                    await delete_pods(api, ns)
                    if wl.volumes:  # they stay Terminating (no PV protection controller): harmless, bound
                        await api.request("DELETE", "/api/v1/persistentvolumes",
                                          params={"labelSelector": f"bench-namespace={ns}"})
                    results.append(res)
                    print(format_result(res), flush=True)
    return results


async def run_rss(opts: Options) -> list[RunResult]:
    """Peak RSS and time to ready of each scheduler (py, kube) with ``rss_nodes`` nodes and ``rss_pods``
    bound Pods (created once, streamed from a generator), ``opts.repeat`` interleaved rounds; each
    run schedules 50 Pods after ready so the cache holds a scheduled Pod too."""
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
            for rnd in range(opts.repeat):
                for kind in [k for k in opts.schedulers if k not in ("blind", "blindev")]:
                    sched = make_scheduler(kind, tb, endpoint, opts)
                    ns = f"bench-rss-{kind}-{rnd}"
                    await sched.start()
                    try:
                        pid = sched.pid
                        cpu_ready = cpu_seconds(pid) if pid else 0.0
                        res = await measure(api, ns, wl, opts.rss_nodes, 50, kind, opts.timeout, 8,
                                            first_index=opts.rss_pods)
                        res.round = rnd
                        res.ready_seconds = sched.ready_seconds
                        res.startup_cpu_seconds = cpu_ready
                        res.rss_kib = vm_hwm_kib(pid) if pid else 0
                    finally:
                        await sched.stop()
                    await delete_pods(api, ns)
                    results.append(res)
                    print(f"{kind:<6} r{rnd} peak RSS (VmHWM) {res.rss_kib / 1024:8.1f} MiB, ready "
                          f"{res.ready_seconds:.2f} s after start (start-up CPU {res.startup_cpu_seconds:.2f} s) "
                          f"with {opts.rss_nodes} nodes, {opts.rss_pods} bound pods ({res.bound}/50 test pods bound)",
                          flush=True)
    return results


def format_result(r: RunResult) -> str:
    s = r.summary()
    flag = "  TIMED OUT" if r.timed_out else ""
    rate = "drain" if r.mode == "backlog" else "live"
    extra = (f"ready {r.ready_seconds:.2f}s (cpu {r.startup_cpu_seconds:.2f}s)  start->all bound "
             f"{r.start_to_bound_seconds:.2f}s  " if r.mode == "backlog" else f"ready {r.ready_seconds:.2f}s  ")
    prep = f", prepared +{r.prepare_seconds:.1f}s" if r.prepare_seconds else ""
    crit = f"  critical/pod={s['critical_ms_per_pod']:5.2f} ms" if r.critical_cpu_seconds else ""
    crit += f"  control/pod={s['control_ms_per_pod']:5.2f} ms" if r.control_cpu_seconds else ""
    return (f"{r.label or r.scheduler:<6} r{r.round} {r.workload:<26} nodes={r.nodes:<5} init={r.init_pods:<6} "
            f"pods={r.bound}/{r.pods:<6} {rate} {s['pods_per_second']:8.1f} pods/s  {extra}"
            f"p50={s['p50_ms']:8.1f} ms  p99={s['p99_ms']:8.1f} ms  cpu/pod={s['cpu_ms_per_pod']:5.2f} ms{crit}  "
            f"(create {r.create_seconds:.1f}s{prep}, RSS {r.rss_kib / 1024:.0f} MiB){flag}")


FIGURES: dict[str, Callable[[RunResult], float]] = {
    "pods_per_second": lambda r: r.pods_per_second,
    "p99_ms": lambda r: percentile([x * 1000 for x in r.latencies], 99),
    "cpu_ms_per_pod": lambda r: r.cpu_seconds * 1000 / r.bound if r.bound else 0.0,
    "ready_s": lambda r: r.ready_seconds,
    "startup_cpu_s": lambda r: r.startup_cpu_seconds,
    "start_to_bound_s": lambda r: r.start_to_bound_seconds,
    "rss_mib": lambda r: r.rss_kib / 1024,
}
"""The figures :func:`ratios` compares (``start_to_bound_s`` is 0 in live runs)."""


def ratios(results: Sequence[RunResult]) -> dict[str, Any]:
    """Per scheduler the median of each figure over the rounds (``<kind>_<figure>``); for py against
    each other scheduler the ratio of the medians (``py/<kind>_<figure>``) and the range of the
    per-round ratios (``py/<kind>_<figure>_range``: ``"min-max"``, rounds where both ran)."""
    by: dict[str, dict[int, RunResult]] = {}
    for r in results:
        by.setdefault(r.scheduler, {})[r.round] = r
    out: dict[str, Any] = {}
    med: dict[str, dict[str, float]] = {}
    for k, runs in by.items():
        med[k] = {f: statistics.median(fn(r) for r in runs.values()) for f, fn in FIGURES.items()}
        for f, v in med[k].items():
            out[f"{k}_{f}"] = round(v, 3)
    if "py" in by:
        for other in ("kube", "blind", "blindev"):
            if other not in by:
                continue
            for f, fn in FIGURES.items():
                if med[other][f] > 0:
                    out[f"py/{other}_{f}"] = round(med["py"][f] / med[other][f], 3)
                per_round = [fn(by["py"][rnd]) / fn(by[other][rnd]) for rnd in by["py"]
                             if rnd in by[other] and fn(by[other][rnd]) > 0]
                if per_round:
                    out[f"py/{other}_{f}_range"] = f"{min(per_round):.3f}-{max(per_round):.3f}"
    return out
