"""The fault scenarios' building blocks: a per-scenario environment, fault injectors, the run summary.

:class:`FaultEnv` owns one scenario's Nodes (labelled with a per-scenario group that its Pods select),
Pods and ``py-scheduler run`` replicas (one shared Lease, ``--v 4`` so the logs carry the attempt,
bind and node-delete lines the invariants read). Faults: :meth:`FaultEnv.kill` (SIGKILL),
:meth:`FaultEnv.freeze` / :meth:`FaultEnv.thaw` (SIGSTOP/SIGCONT), :func:`etcd_compact` (etcd's
gRPC-gateway ``/v3/kv/compaction`` at the current revision) and the bed's own
``restart_apiserver`` / ``restart_etcd``. :meth:`FaultEnv.check` runs :mod:`invariants` and records
the result in :data:`STATS`; :meth:`FaultEnv.leak_probe` proves the cache holds no stale resources
by asking for every Node whole.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import signal
import statistics
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.faults import invariants
from tests.e2e.helpers import PAUSE_IMAGE, Testbed, create_node, delete_node, unique_name, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess

GROUP_LABEL = "py-scheduler-e2e/faults"
PROFILE = "py-scheduler"
A100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960",
               "nvidia.com/gpu.count": "8"}


@dataclass(frozen=True)
class Scale:
    """Sizes of one run. Lease timings in seconds (``leaseDuration``/``renewDeadline``/``retryPeriod``)."""

    name: str
    burst: int
    kills: int
    hypothesis_pods: int
    hypothesis_snapshots: int
    lease: tuple[float, float, float]
    churn_rounds: int


def scale_for(profile: str) -> Scale:
    """``ci`` (default) or ``full`` (bench/faults)."""
    if profile == "full":
        return Scale("full", burst=120, kills=6, hypothesis_pods=300, hypothesis_snapshots=400,
                     lease=(15.0, 10.0, 2.0), churn_rounds=3)
    return Scale("ci", burst=30, kills=3, hypothesis_pods=40, hypothesis_snapshots=60,
                 lease=(6.0, 4.0, 1.0), churn_rounds=1)


@dataclass
class Stats:
    """What the suite did, printed at the end of the run."""

    scenarios: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    pods_scheduled: int = 0
    pods_pending: int = 0
    violations: list[str] = field(default_factory=list)
    failovers: list[float] = field(default_factory=list)
    in_flight_binds_to_deleted_nodes: int = 0
    bad_input: Counter[str] = field(default_factory=Counter)
    lease_seconds: float = 0.0

    def fault(self, name: str, n: int = 1) -> None:
        self.faults[name] += n

    def to_json(self) -> dict[str, Any]:
        fo = sorted(self.failovers)
        return {"scenarios": self.scenarios, "faults": dict(self.faults), "faults_total": sum(self.faults.values()),
                "pods_scheduled": self.pods_scheduled, "pods_pending_with_reason": self.pods_pending,
                "invariant_violations": len(self.violations), "violations": self.violations,
                "lease_duration_seconds": self.lease_seconds,
                "failover_seconds": {"n": len(fo), "median": statistics.median(fo) if fo else None,
                                     "max": fo[-1] if fo else None, "all": [round(x, 2) for x in fo]},
                "in_flight_binds_to_deleted_nodes": self.in_flight_binds_to_deleted_nodes,
                "bad_input": dict(self.bad_input)}

    def lines(self) -> list[str]:
        j = self.to_json()
        fo = j["failover_seconds"]
        faults = ", ".join(f"{k} x{v}" for k, v in sorted(self.faults.items())) or "none"
        out = [f"scenarios run:          {len(self.scenarios)}",
               f"faults injected:        {j['faults_total']} ({faults})",
               f"pods bound by us:       {self.pods_scheduled} (pending with a reason: {self.pods_pending})",
               f"invariant violations:   {len(self.violations)}"]
        if fo["n"]:
            out.append(f"leader failover:        median {fo['median']:.1f} s, max {fo['max']:.1f} s over {fo['n']} "
                       f"takeovers (SIGKILL/SIGSTOP of the leader -> standby leads; lease "
                       f"{self.lease_seconds:g} s): {', '.join(f'{x:.1f}' for x in fo['all'])}")
        if self.in_flight_binds_to_deleted_nodes:
            out.append(f"pods left on Nodes deleted after (or while) binding them (PodGC's job upstream): "
                       f"{self.in_flight_binds_to_deleted_nodes}")
        if self.bad_input:
            out.append("bad input:              " + ", ".join(f"{k} {v}" for k, v in sorted(self.bad_input.items())))
        out.extend(f"  VIOLATION: {v[:400]}" for v in self.violations[:20])
        return out


STATS = Stats()
"""The run's summary (module global: the conftest hook prints it)."""


# ------------------------------------------------------------------------------------------------
# etcd
# ------------------------------------------------------------------------------------------------

def _etcd_post(testbed: Testbed, path: str, body: dict[str, Any]) -> dict[str, Any]:
    url = f"http://127.0.0.1:{testbed.ports['etcd-client']}{path}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        out: dict[str, Any] = json.loads(r.read() or b"{}")
        return out


def etcd_revision(testbed: Testbed) -> int:
    """etcd's current revision (``/v3/kv/range`` response header)."""
    doc = _etcd_post(testbed, "/v3/kv/range", {"key": base64.b64encode(b"/registry/").decode(), "limit": 1,
                                               "count_only": True})
    return int(doc["header"]["revision"])


def etcd_compact(testbed: Testbed) -> int:
    """Compact etcd's history up to the current revision (physical); returns that revision.

    Every watch asking for an older resourceVersion then gets ``410 Gone``."""
    rev = etcd_revision(testbed)
    _etcd_post(testbed, "/v3/kv/compaction", {"revision": str(rev), "physical": True})
    return rev


# ------------------------------------------------------------------------------------------------
# The environment of one scenario
# ------------------------------------------------------------------------------------------------

class FaultEnv:
    """Nodes, Pods and replicas of one scenario; :meth:`close` removes them all."""

    def __init__(self, testbed: Testbed, api: client.ApiClient, scale: Scale, scenario: str) -> None:
        self.testbed = testbed
        self.api = api
        self.core = client.CoreV1Api(api)
        self.scale = scale
        self.scenario = scenario
        self.group = unique_name("flt")
        self.lease = unique_name("py-sched-faults")
        self.nodes: dict[str, dict[str, str]] = {}  # name -> allocatable
        self.all_nodes: set[str] = set()
        self.pods: set[str] = set()
        self.replicas: list[SchedulerProcess] = []
        self.killed: set[int] = set()
        self.frozen: set[int] = set()
        self.external_binds = 0
        self.rng = random.Random(int(os.environ.get("FAULTS_SEED", "1")))
        STATS.scenarios.append(scenario)
        STATS.lease_seconds = scale.lease[0]

    # -- replicas -------------------------------------------------------------------------------------
    def config_file(self, *, qps: float | None = None, burst: int | None = None) -> Path:
        """A KubeSchedulerConfiguration with this run's lease timings (and a client rate limit)."""
        ld, rd, rp = self.scale.lease
        cfg: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": True, "leaseDuration": f"{ld:g}s", "renewDeadline": f"{rd:g}s",
                               "retryPeriod": f"{rp:g}s"},
        }
        if qps is not None:
            cfg["clientConnection"] = {"qps": qps, "burst": burst if burst is not None else 1}
        path = Path(self.testbed.dir) / "logs" / f"{unique_name('faults-config')}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cfg, indent=2) + "\n")
        return path

    def replica(self, name: str, *, leader_elect: bool = True, qps: float | None = None,
                burst: int | None = None, verbosity: int = 4, extra_args: Sequence[str] = (),
                launcher: Sequence[str] = ("-m", "py_scheduler.cli")) -> SchedulerProcess:
        """Start one ``py-scheduler run`` on this scenario's Lease (not waited for); ``extra_args``:
        more CLI arguments for it; ``launcher``: the interpreter arguments that start the command line
        (``bench/bench_lib/soak_caps.py`` puts its own module in front of py-scheduler's)."""
        p = SchedulerProcess(Path(self.testbed.kubeconfig),
                             Path(self.testbed.dir) / "logs" / f"{unique_name(name)}.log",
                             lease_name=self.lease, leader_elect=leader_elect, verbosity=verbosity,
                             extra_args=["--config", str(self.config_file(qps=qps, burst=burst)), *extra_args],
                             launcher=launcher)
        p.start()
        self.replicas.append(p)
        return p

    async def lease_holder(self) -> str:
        try:
            lease = await client.CoordinationV1Api(self.api).read_namespaced_lease(self.lease, "kube-system")
        except ApiException:
            return ""
        return str(lease.spec.holder_identity or "")

    async def leader(self, timeout: float = 60.0) -> SchedulerProcess:
        """The live replica whose identity holds the Lease (and that logged becoming the leader)."""

        async def find() -> SchedulerProcess | None:
            holder = await self.lease_holder()
            for r in self.replicas:
                if r.alive() and r.pid not in self.frozen and holder and r.identity() == holder \
                        and "became the leader" in r.log():
                    return r
            return None

        return await wait_for(find, timeout=timeout, interval=0.05, what="a leading replica")

    def kill(self, p: SchedulerProcess) -> None:
        """SIGKILL (a crash)."""
        self.killed.add(p.pid)
        p.kill()
        STATS.fault("SIGKILL leader")

    def freeze(self, p: SchedulerProcess) -> int:
        """SIGSTOP; returns the log size at that moment (nothing is written while stopped)."""
        os.kill(p.pid, signal.SIGSTOP)
        self.frozen.add(p.pid)
        return p.log_path.stat().st_size

    def thaw(self, p: SchedulerProcess) -> int:
        """SIGCONT; returns the log size right before (what follows was written after the resume)."""
        size = p.log_path.stat().st_size
        os.kill(p.pid, signal.SIGCONT)
        self.frozen.discard(p.pid)
        return size

    # -- nodes ------------------------------------------------------------------------------------------
    async def node(self, allocatable: dict[str, str] | None = None, *, gpu: bool = False,
                   labels: dict[str, str] | None = None) -> str:
        """A Node of this scenario's group (4 CPU / 8Gi / 110 pods; ``gpu``: 8 x A100 40GB, 8 CPU / 32Gi)."""
        name = unique_name("flt-gpu" if gpu else "flt-node")
        alloc = dict(allocatable or ({"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"} if gpu
                                     else {"cpu": "4", "memory": "8Gi", "pods": "110"}))
        lab = {GROUP_LABEL: self.group, **(A100_LABELS if gpu else {}), **(labels or {})}
        self.nodes[name] = alloc
        self.all_nodes.add(name)
        await create_node(self.api, name, alloc, labels=lab)
        if gpu:
            await self.core.patch_node(name, {"metadata": {"annotations": {"gpu-scheduler/nvlink-groups": "0-3;4-7"}}})
        return name

    async def delete_node(self, name: str) -> None:
        await delete_node(self.api, name)
        self.nodes.pop(name, None)

    # -- pods -------------------------------------------------------------------------------------------
    def pod_body(self, name: str, *, cpu: str = "250m", memory: str = "64Mi", gpus: int = 0,
                 annotations: dict[str, str] | None = None, node_selector: dict[str, str] | None = None,
                 extra_spec: dict[str, Any] | None = None) -> dict[str, Any]:
        res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
        if gpus:
            res["limits"] = {"nvidia.com/gpu": str(gpus)}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"schedulerName": PROFILE, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {GROUP_LABEL: self.group, **(node_selector or {})},
                     "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": res}],
                     **(extra_spec or {})},
        }

    async def create(self, body: dict[str, Any], *, retry_for: float = 0.0) -> str:
        """Create a Pod (retrying for ``retry_for`` seconds while the API is unavailable)."""
        name = str(body["metadata"]["name"])
        self.pods.add(name)
        if retry_for <= 0:
            await self.core.create_namespaced_pod("default", body)
            return name

        async def attempt() -> bool:
            try:
                await self.core.create_namespaced_pod("default", body)
            except ApiException as e:
                if e.status == 409:  # the first attempt got through after all
                    return True
                raise
            return True

        await wait_for(attempt, timeout=retry_for, interval=0.5, what=f"creating pod {name}")
        return name

    def burst_bodies(self, n: int, *, gpu_share: float = 0.0, gpu_budget: int = 6,
                     prefix: str = "flt-pod") -> list[dict[str, Any]]:
        """``n`` Pod bodies: CPU Pods of 250-500m / 64-256Mi, and a ``gpu_share`` of 1-2 GPU Pods asking
        for ``gpu_budget`` GPUs at most in all."""
        out = []
        for _ in range(n):
            name = unique_name(prefix)
            gpus = self.rng.choice((1, 2))
            if self.rng.random() < gpu_share and gpus <= gpu_budget:
                gpu_budget -= gpus
                ann = {"gpu-scheduler/gpu-memory-gb": "40"} if self.rng.random() < 0.5 else {}
                out.append(self.pod_body(name, cpu="100m", memory="64Mi", gpus=gpus, annotations=ann))
            else:
                out.append(self.pod_body(name, cpu=f"{self.rng.choice((250, 300, 400, 500))}m",
                                         memory=f"{self.rng.choice((64, 128, 256))}Mi"))
        return out

    async def create_all(self, bodies: Sequence[dict[str, Any]], *, retry_for: float = 0.0,
                         spread: float = 0.0) -> list[str]:
        """Create Pods concurrently (each after a random delay of up to ``spread`` seconds)."""

        async def one(b: dict[str, Any]) -> str:
            if spread:
                await asyncio.sleep(self.rng.random() * spread)  # staggered arrivals, not synchronisation
            return await self.create(b, retry_for=retry_for)

        return list(await asyncio.gather(*(one(b) for b in bodies)))

    async def delete_pod(self, name: str) -> None:
        """Delete at once (grace 0); a missing Pod is fine; does not wait."""
        try:
            await self.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise

    async def pods_now(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        wanted = set(self.pods if names is None else names)
        pods = await self.core.list_namespaced_pod("default", label_selector=None)
        return {p.metadata.name: p for p in pods.items if p.metadata.name in wanted}

    async def wait_bound(self, names: Sequence[str], timeout: float = 120.0) -> dict[str, Any]:
        """Wait until every Pod in ``names`` is bound."""

        async def done() -> dict[str, Any] | None:
            got = await self.pods_now(names)
            missing = [n for n in names if n not in got or not got[n].spec.node_name]
            return got if not missing else None

        return await wait_for(done, timeout=timeout, interval=0.25, what=f"{len(names)} pods bound")

    async def wait_settled(self, timeout: float = 120.0) -> None:
        """Wait until every Pod of the scenario is bound, gone, or pending with a reason."""

        async def settled() -> bool:
            _, pods, events = await invariants.cluster_state(self.api)
            left = invariants.pending_without_reason(pods, events, self.pods)
            if left:
                raise AssertionError(f"{len(left)} pods neither bound nor failed: {left[:5]}")
            return True

        await wait_for(settled, timeout=timeout, interval=0.5, what="every pod bound or pending with a reason")

    # -- checks -----------------------------------------------------------------------------------------
    async def check(self, *, settle_timeout: float = 120.0) -> invariants.Report:
        """Wait for the Pods to settle, run every invariant, record the result; assert no violation."""
        try:
            await self.wait_settled(settle_timeout)
        except AssertionError as e:
            STATS.violations.append(f"[{self.scenario}] {e}")
        report = await invariants.check(self.api, pod_names=self.pods, procs=self.replicas, killed=self.killed,
                                        group_nodes=self.all_nodes)
        STATS.pods_scheduled += report.bound - self.external_binds
        STATS.pods_pending += report.pending
        STATS.in_flight_binds_to_deleted_nodes += report.on_deleted_nodes_in_flight
        STATS.violations.extend(f"[{self.scenario}] {v}" for v in report.violations)
        assert not report.violations, "\n".join(report.violations[:20])
        return report

    async def leak_probe(self, timeout: float = 90.0) -> None:
        """Delete every Pod of the scenario, then ask for each remaining Node whole (all its CPU and
        memory; all its GPUs on GPU Nodes): every probe must bind, so nothing the scheduler assumed
        or saw bound before is still accounted anywhere."""
        await asyncio.gather(*(self.delete_pod(n) for n in list(self.pods)))

        async def gone() -> bool:
            return not await self.pods_now()

        await wait_for(gone, timeout=60, what="the scenario's pods deleted")
        self.pods.clear()
        probes = []
        for node, alloc in self.nodes.items():
            name = unique_name("flt-probe")
            gpus = int(alloc.get("nvidia.com/gpu", "0"))
            probes.append(await self.create(self.pod_body(
                name, cpu=alloc["cpu"], memory=alloc["memory"], gpus=gpus,
                node_selector={"kubernetes.io/hostname": node})))
        try:
            await self.wait_bound(probes, timeout=timeout)
        except AssertionError as e:
            msg = f"[{self.scenario}] leak probe: a whole-node Pod did not fit, stale resources in the cache: {e}"
            STATS.violations.append(msg)
            raise AssertionError(msg) from None

    async def close(self) -> None:
        for r in self.replicas:
            if r.alive():
                if r.pid in self.frozen:
                    os.kill(r.pid, signal.SIGCONT)
                await asyncio.to_thread(r.terminate)
        await asyncio.gather(*(self.delete_pod(p) for p in self.pods), return_exceptions=True)
        for n in list(self.all_nodes):
            await delete_node(self.api, n)


def bound_count(p: SchedulerProcess) -> int:
    """How many ``Successfully bound`` lines the replica logged (this run)."""
    return p.log().count("Successfully bound pod to node")


async def wait_log_after(p: SchedulerProcess, offset: int, needle: str, timeout: float = 60.0) -> str:
    """Wait until ``needle`` appears in ``p``'s log after byte ``offset`` of the file."""

    def tail() -> str:
        with open(p.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    return await wait_for(lambda: tail() if needle in tail() else None, timeout=timeout, interval=0.05,
                          what=f"{needle!r} in {p.log_path.name}")


def log_after(p: SchedulerProcess, offset: int) -> str:
    with open(p.log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def now() -> float:
    return time.monotonic()
