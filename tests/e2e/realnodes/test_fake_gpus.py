"""Fake GPUs on real nodes (issue 29, items 2 and 4 and the DaemonSet's acceptance line).

``kubectl apply -k deploy/kind/fake-gpus/`` runs ``py-scheduler fake-gpu-plugin`` from the project's
image (``bash .ci/image-build``, imported into every node's containerd) as a DaemonSet on the bed's
real nodes: node 0 is labelled ``a100-80gb-x8`` (8 cards, NVLink groups 0-3 and 4-7), node 1
``h100-x4`` (4 cards, one group). The kubelets' device managers then hand out ``nvidia.com/gpu``
devices, so the kubelet is the oracle: it refuses a Pod it cannot give devices to
(``UnexpectedAdmissionError`` / ``OutOfnvidia.com/gpu``) and writes the devices it chose into each
container's ``NVIDIA_VISIBLE_DEVICES`` (and a CDI device's ``FAKE_GPU_CDI_DEVICE_<id>``), which the
busybox containers print.

* the DaemonSet makes ``nvidia.com/gpu`` allocatable and the GFD labels appear within 10 s of its Pod
  running on each node;
* GPU Pods of both schedulers side by side (1/2/4/8 GPUs; model, memory and NVLink requirements):
  every Pod Running with as many devices as it asked, no device in two Running containers; for
  py-scheduler's NVLink Pods, whether the kubelet's devices lie in one NVLink group (counted, see
  docs/gpu.md "Who honours gpu-indices");
* races under faults (tests/e2e/test_binding_cycle.py on real nodes): kube-scheduler binding the same
  Pods as py-scheduler (an outside Binding winning), and the Lease handed to a standby replica
  mid-burst: afterwards no admission rejection, no device twice, every Pod Running or Pending with a
  FailedScheduling reason.
"""

from __future__ import annotations

import asyncio
import json
import time
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from py_scheduler.fakegpu.profiles import NVLINK_ANNOTATION, PROFILE_LABEL, Profile, get_profile
from tests.e2e.helpers import Testbed, pod_events, unique_name, wait_for
from tests.e2e.realnodes.support import BUSYBOX_IMAGE, admission_rejections, kubectl
from tests.e2e.scheduler_proc import SchedulerProcess, running_scheduler

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[3]
KUSTOMIZATION = REPO / "deploy" / "kind" / "fake-gpus"
PROFILES = ("a100-80gb-x8", "h100-x4")
"""Node i's profile."""
DS_LABEL = "app=py-scheduler-fake-gpu"
GPU = "nvidia.com/gpu"
IDX = "gpu-scheduler/gpu-indices"
RUN_LABEL = "py-scheduler-e2e/fake-gpus"
SHOW_DEVICES = 'echo "$NVIDIA_VISIBLE_DEVICES"; env | grep FAKE_GPU_CDI | sort; sleep 3600'


@dataclass
class FakeGPUs:
    """The DaemonSet's rollout as observed: per node, when its plugin Pod was seen Running and when
    the node had its allocatable GPUs and GFD labels (``time.monotonic()``)."""

    names: list[str]
    profiles: dict[str, Profile]
    image: str
    pod_running: dict[str, float] = field(default_factory=dict)
    node_ready: dict[str, float] = field(default_factory=dict)
    plugin_pods: dict[str, str] = field(default_factory=dict)


def _version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def _gpu_node_ready(node: Any, profile: Profile) -> bool:
    labels = node.metadata.labels or {}
    annotations = node.metadata.annotations or {}
    nvlink = profile.annotations()[NVLINK_ANNOTATION]
    return ((node.status.allocatable or {}).get(GPU) == str(len(profile.devices))
            and all(labels.get(k) == v for k, v in profile.labels().items())
            and annotations.get(NVLINK_ANNOTATION) == nvlink)


@pytest.fixture(scope="module")
async def fake_gpus(realnodes: Testbed, realnodes_core: client.CoreV1Api,
                    py_scheduler_image: str) -> AsyncIterator[FakeGPUs]:
    """Label the nodes with their profiles, ``kubectl apply -k deploy/kind/fake-gpus/``, and watch
    (every 0.2 s) the plugin Pods start and the nodes get their GPUs; deleted at the end."""
    core = realnodes_core
    names = realnodes.nodes.names()
    fg = FakeGPUs(names, {n: get_profile(p) for n, p in zip(names, PROFILES, strict=True)}, py_scheduler_image)
    for n, p in zip(names, PROFILES, strict=True):
        kubectl(realnodes, "label", "node", n, "--overwrite", f"{PROFILE_LABEL}={p}")
    kubectl(realnodes, "apply", "-k", str(KUSTOMIZATION))
    try:
        async def rolled_out() -> bool:
            now = time.monotonic()
            for p in (await core.list_namespaced_pod("kube-system", label_selector=DS_LABEL)).items:
                node = p.spec.node_name
                if node and p.status.phase == "Running" and node not in fg.pod_running:
                    fg.pod_running[node], fg.plugin_pods[node] = now, p.metadata.name
                statuses = p.status.container_statuses or []
                if p.status.phase == "Failed" or any(
                        s.restart_count or (s.state.waiting and s.state.waiting.reason in (
                            "ErrImageNeverPull", "CrashLoopBackOff", "ErrImagePull", "CreateContainerError"))
                        for s in statuses):
                    logs = kubectl(realnodes, "-n", "kube-system", "logs", p.metadata.name, "--previous",
                                   "--tail=20", check=False)
                    raise AssertionError(f"plugin Pod {p.metadata.name} on {node} fails: {statuses}; log: {logs}")
            for node in (await core.list_node()).items:
                n = node.metadata.name
                if n in fg.profiles and n not in fg.node_ready and _gpu_node_ready(node, fg.profiles[n]):
                    fg.node_ready[n] = now
            return len(fg.node_ready) == len(names) and len(fg.pod_running) == len(names)

        await wait_for(rolled_out, timeout=180, interval=0.2, what="the fake-GPU DaemonSet on every node")
        yield fg
    finally:
        for pod in fg.plugin_pods.values():  # what the plugins said, for a failing test's reader
            print(kubectl(realnodes, "-n", "kube-system", "logs", pod, "--tail=20", check=False))
        # gone before the next module: the plugins' Pods too (a later module may deploy its own)
        kubectl(realnodes, "delete", "-k", str(KUSTOMIZATION), "--ignore-not-found", "--wait=true",
                "--timeout=90s", check=False, timeout=120)
        await wait_for(lambda: _no_plugin_pods(core), timeout=90, what="the fake-GPU plugin Pods deleted")


async def _no_plugin_pods(core: client.CoreV1Api) -> bool:
    return not (await core.list_namespaced_pod("kube-system", label_selector=DS_LABEL)).items


def _gpu_pod(name: str, gpus: int, *, scheduler: str, run: str, annotations: dict[str, str] | None = None,
             node: str | None = None) -> dict[str, Any]:
    """A busybox Pod holding ``gpus`` fake GPUs that prints the devices the kubelet gave it."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", SHOW_DEVICES],
                        "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}, "limits": {GPU: str(gpus)}}}],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {RUN_LABEL: run}, "annotations": dict(annotations or {})},
            "spec": spec}


@dataclass
class Held:
    """What the kubelet gave one Running container."""

    pod: str
    node: str
    scheduler: str
    asked: int
    devices: list[str]
    cdi: list[str]
    annotations: dict[str, str]


async def _devices(core: client.CoreV1Api, pod: Any) -> Held:
    """Read the container's first log lines: ``NVIDIA_VISIBLE_DEVICES`` then the CDI variables."""
    name = pod.metadata.name

    async def printed() -> list[str] | None:
        try:
            text = await core.read_namespaced_pod_log(name, "default")
        except client.ApiException:
            return None
        lines = text.splitlines()
        return lines if lines and lines[0].strip() else None

    lines = await wait_for(printed, timeout=30, interval=0.3, what=f"{name} to print its devices")
    devices = [d for d in lines[0].strip().split(",") if d]
    cdi = sorted(line.split("=", 1)[1] for line in lines[1:] if line.startswith("FAKE_GPU_CDI_DEVICE_"))
    limits = pod.spec.containers[0].resources.limits or {}
    return Held(name, pod.spec.node_name, pod.spec.scheduler_name, int(limits.get(GPU, "0")), devices, cdi,
                dict(pod.metadata.annotations or {}))


async def _settle(core: client.CoreV1Api, run: str, timeout: float = 120.0) -> list[Any]:
    """Wait until every Pod of ``run`` is Running, or Pending with a FailedScheduling event; fail on
    any kubelet rejection or terminal phase. Returns the Pods."""
    async def settled() -> list[Any] | None:
        pods = (await core.list_namespaced_pod("default", label_selector=f"{RUN_LABEL}={run}")).items
        if bad := admission_rejections(pods):
            raise AssertionError(f"the kubelet rejected: {bad}")
        ended = [f"{p.metadata.name}: {p.status.phase} {p.status.reason}" for p in pods
                 if p.status.phase in ("Failed", "Succeeded")]
        assert not ended, ended
        for p in pods:
            if p.status.phase == "Running":
                continue
            if p.spec.node_name:  # bound, not started yet
                return None
            if not any(r == "FailedScheduling" for r, _ in await pod_events(core.api_client, p.metadata.name)):
                return None
        return list(pods)

    return await wait_for(settled, timeout=timeout, interval=0.5,
                          what=f"Pods of {run} Running or Pending with a reason")


async def _check_devices(core: client.CoreV1Api, pods: list[Any]) -> list[Held]:
    """Every Running container got exactly the devices it asked for (env and CDI agree), and no device
    is in two Running containers on a node."""
    held = list(await asyncio.gather(*(_devices(core, p) for p in pods if p.status.phase == "Running")))
    owner: dict[tuple[str, str], str] = {}
    for h in held:
        assert len(set(h.devices)) == len(h.devices) == h.asked, h
        assert h.cdi == sorted(h.devices), h
        for d in h.devices:
            prev = owner.setdefault((h.node, d), h.pod)
            assert prev == h.pod, f"device {d} on {h.node} is in {prev} and {h.pod}"
    return held


async def _clean(core: client.CoreV1Api, run: str) -> None:
    """Delete the Pods of ``run`` and wait until they are gone (their devices free again)."""
    await core.delete_collection_namespaced_pod("default", label_selector=f"{RUN_LABEL}={run}", grace_period_seconds=1)

    async def gone() -> bool:
        return not (await core.list_namespaced_pod("default", label_selector=f"{RUN_LABEL}={run}")).items

    await wait_for(gone, timeout=90, interval=0.5, what=f"Pods of {run} deleted")


def _nvlink_split(held: list[Held], profiles: dict[str, Profile]) -> list[str]:
    """py-scheduler Pods with ``nvlink-required`` whose kubelet devices span NVLink groups."""
    out = []
    for h in held:
        if (h.scheduler != "default-scheduler" and h.annotations.get("gpu-scheduler/nvlink-required") == "true"
                and len({profiles[h.node].group_of(d) for d in h.devices}) != 1):
            out.append(f"{h.pod} on {h.node}: kubelet {h.devices}, py-scheduler {h.annotations.get(IDX)}")
    return out


@pytest.mark.timeout(600)  # the first test also imports the image (built at collection by conftest)
async def test_daemonset_makes_gpus_allocatable_and_labels_within_10s(realnodes: Testbed,
                                                                      fake_gpus: FakeGPUs) -> None:
    """The acceptance line: the plugin Pods run from the project's image on the real nodes, and each
    node has its profile's ``nvidia.com/gpu`` allocatable, GFD labels and NVLink annotation within 10 s
    of its plugin Pod running."""
    for n in fake_gpus.names:
        delay = fake_gpus.node_ready[n] - fake_gpus.pod_running[n]
        print(f"{n}: plugin Pod {fake_gpus.plugin_pods[n]} Running; {GPU} allocatable and GFD labels "
              f"{max(delay, 0.0):.1f}s later")
        assert delay <= 10.0, f"{n}: GPUs appeared {delay:.1f}s after the plugin Pod ran"
    ds = json.loads(kubectl(realnodes, "-n", "kube-system", "get", "daemonset", "py-scheduler-fake-gpu", "-o", "json"))
    assert ds["status"]["numberReady"] == len(fake_gpus.names), ds["status"]
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == f"py-scheduler:{_version()}"


async def test_gpu_pods_of_both_schedulers_get_distinct_devices(realnodes: Testbed, fake_gpus: FakeGPUs,
                                                                realnodes_core: client.CoreV1Api) -> None:
    """Inference-like Pods asking 1/2/4/8 GPUs with model, memory and NVLink requirements, from
    py-scheduler and kube-scheduler at once: all admitted and Running with as many devices as asked,
    none shared; py-scheduler's A100 Pods on the A100 node and H100 Pods on the H100 node. Two waves
    (the 8-GPU Pod needs the whole A100 node). Where the kubelet split an NVLink Pod over groups it
    is counted and printed (the device manager does not read ``gpu-indices``; docs/gpu.md)."""
    core = realnodes_core
    a100, h100 = fake_gpus.names
    nvl = {"gpu-scheduler/nvlink-required": "true"}
    waves: list[list[tuple[str, int, str, dict[str, str], str | None]]] = [
        [  # (prefix, GPUs, scheduler, annotations, pinned node); node 0: 7 of 8, node 1: 4 of 4
            ("inf-a4", 4, "py-scheduler", {"gpu-scheduler/gpu-model": "A100", **nvl}, None),
            ("inf-a2", 2, "py-scheduler",
             {"gpu-scheduler/gpu-model": "A100-80GB", "gpu-scheduler/gpu-memory-gb": "80", **nvl}, None),
            ("inf-h2", 2, "py-scheduler", {"gpu-scheduler/gpu-model": "H100", **nvl}, None),
            ("inf-h1", 1, "py-scheduler", {"gpu-scheduler/gpu-model": "H100"}, None),
            ("inf-d1a", 1, "default-scheduler", {}, a100),
            ("inf-d1h", 1, "default-scheduler", {}, h100),
        ],
        [  # node 0 whole, node 1 whole
            ("inf-a8", 8, "py-scheduler", {"gpu-scheduler/gpu-model": "A100", "gpu-scheduler/gpu-memory-gb": "40"},
             None),
            ("inf-d4", 4, "default-scheduler", {}, h100),
        ],
    ]
    want_node = {"inf-a4": a100, "inf-a2": a100, "inf-h2": h100, "inf-h1": h100, "inf-a8": a100}
    all_held: list[Held] = []
    async with running_scheduler(realnodes, unique_name("py-sched-fakegpu"), verbosity=2) as sched:
        for wave in waves:
            run = unique_name("fg-inf")
            try:
                await asyncio.gather(*(core.create_namespaced_pod("default", _gpu_pod(
                    unique_name(prefix), gpus, scheduler=s, run=run, annotations=ann, node=node))
                    for prefix, gpus, s, ann, node in wave))
                pods = await _settle(core, run)
                pending = [p.metadata.name for p in pods if p.status.phase != "Running"]
                assert not pending, f"not Running: {pending}"
                held = await _check_devices(core, pods)
                for h in held:
                    prefix = h.pod.rsplit("-", 1)[0]
                    if prefix in want_node:
                        assert h.node == want_node[prefix], h
                        idx = [int(i) for i in h.annotations[IDX].split(",")]
                        assert len(idx) == h.asked, h
                        if h.annotations.get("gpu-scheduler/nvlink-required") == "true":
                            groups = {fake_gpus.profiles[h.node].group_of(str(i)) for i in idx}
                            assert len(groups) == 1, f"py-scheduler chose {idx} across NVLink groups: {h}"
                all_held += held
            finally:
                await _clean(core, run)
        assert "Traceback" not in sched.log()
    split = _nvlink_split(all_held, fake_gpus.profiles)
    differs = [h.pod for h in all_held if IDX in h.annotations
               and sorted(h.annotations[IDX].split(","), key=int) != sorted(h.devices, key=int)]
    nvl_pods = sum(1 for h in all_held if h.annotations.get("gpu-scheduler/nvlink-required") == "true")
    print(f"{len(all_held)} GPU Pods Running, devices distinct; kubelet split {len(split)} of {nvl_pods} "
          f"NVLink Pod(s) over groups {split}; kubelet devices differ from gpu-indices on {len(differs)} "
          f"Pod(s) {differs}")
    for h in all_held:
        print(f"  {h.pod:22} {h.scheduler:17} {h.node}: kubelet {','.join(h.devices):16} "
              f"gpu-indices {h.annotations.get(IDX, '-')}")


def _config(tmp: Path, scheduler_name: str) -> Path:
    path = tmp / f"{scheduler_name}.yaml"
    path.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                "profiles": [{"schedulerName": scheduler_name}]}))
    return path


def _replica(tb: Testbed, name: str, lease: str, config: Path) -> SchedulerProcess:
    p = SchedulerProcess(Path(tb.kubeconfig), Path(tb.dir) / "logs" / f"{name}.log", lease_name=lease, verbosity=4,
                         extra_args=["--config", str(config)])
    p.start()
    return p


async def test_outside_bindings_race_py_scheduler_kubelet_admits_all(realnodes: Testbed, fake_gpus: FakeGPUs,
                                                                     realnodes_core: client.CoreV1Api,
                                                                     tmp_path: Path) -> None:
    """Upstream kube-scheduler serves the same schedulerName as py-scheduler, so the two race on every
    Pod of a burst of GPU Pods and one's Binding wins (an outside Binding, as in
    test_binding_cycle). The burst fills the A100 node to 6 of 8; then py-scheduler alone places
    Pods for the last 2 GPUs, which fit only if no lost Binding left a phantom reservation behind.
    The kubelet admits every Pod, no device is in two containers, and only py-scheduler's Pods carry
    ``gpu-indices`` (none twice on the node)."""
    core = realnodes_core
    a100 = fake_gpus.names[0]
    name = unique_name("fg-race")
    run = unique_name("fg-race")
    ks = unique_name("ks-fg")
    sched = _replica(realnodes, name, unique_name("py-sched-fg-race"), _config(tmp_path, name))
    try:
        await sched.wait_leading()
        kubeconfig = str(Path(realnodes.dir) / "kube-scheduler.kubeconfig")
        realnodes.start_kube_scheduler(ks, config={"leaderElection": {"leaderElect": False},
                                                   "clientConnection": {"kubeconfig": kubeconfig, "qps": 3,
                                                                        "burst": 2},
                                                   "profiles": [{"schedulerName": name}]},
                                       wait_leading=False, restart=False)
        burst = [_gpu_pod(unique_name("fg-race"), g, scheduler=name, run=run, node=a100) for g in (1, 1, 2, 1, 1)]
        await asyncio.gather(*(core.create_namespaced_pod("default", b) for b in burst))
        pods = await _settle(core, run)
        assert all(p.status.phase == "Running" for p in pods), [p.metadata.name for p in pods]
        realnodes.stop_kube_scheduler(ks, kill=True)
        # the last 2 GPUs, py-scheduler alone (kube-scheduler is gone)
        await asyncio.gather(*(core.create_namespaced_pod("default", _gpu_pod(
            unique_name("fg-last"), 1, scheduler=name, run=run, node=a100)) for _ in range(2)))
        pods = await _settle(core, run)
        assert all(p.status.phase == "Running" for p in pods), [(p.metadata.name, p.status.phase) for p in pods]
        held = await _check_devices(core, pods)
        assert sum(h.asked for h in held) == 8
        ours = {p.split("/", 1)[1] for p in sched.bound_times()}
        indices: list[int] = []
        for h in held:
            if IDX in h.annotations:
                indices += [int(i) for i in h.annotations[IDX].split(",")]
        assert len(indices) == len(set(indices)), f"gpu-indices twice on {a100}: {sorted(indices)}"
        lost = sched.log().count("Failed to bind pod")
        print(f"outside-Binding race: py-scheduler bound {len(ours & {h.pod for h in held})} of {len(held)} Pods, "
              f"lost {lost} Binding race(s); kubelet admitted all, devices distinct")
        assert "Traceback" not in sched.log()
    finally:
        realnodes.stop_kube_scheduler(ks, kill=True)
        sched.terminate()
        await _clean(core, run)


async def test_lease_handed_over_mid_burst_kubelet_admits_all(realnodes: Testbed, fake_gpus: FakeGPUs,
                                                             realnodes_core: client.CoreV1Api,
                                                             realnodes_api: client.ApiClient, tmp_path: Path) -> None:
    """Two py-scheduler replicas share a Lease; mid-burst it is handed to the standby, and until the
    old leader's renew deadline both bind. The burst asks for 14 GPUs of the 12 the nodes have: the
    kubelets admit every Pod bound (no ``OutOfnvidia.com/gpu`` / ``UnexpectedAdmissionError``), no
    device is in two Running containers, and the Pods left over are Pending with a FailedScheduling
    reason."""
    core = realnodes_core
    name = unique_name("fg-le")
    run = unique_name("fg-le")
    lease_name = unique_name("py-sched-fg-le")
    config = _config(tmp_path, name)
    a = _replica(realnodes, f"{name}-a", lease_name, config)
    b: SchedulerProcess | None = None
    created: list[str] = []
    try:
        await a.wait_leading()
        b = _replica(realnodes, f"{name}-b", lease_name, config)
        await b.wait_log("attempting to acquire leader lease")

        async def next_pod(gpus: int) -> None:
            """Create one Pod, then wait until the replicas decided all but the last 2 (PodScheduled set:
            bound, or unschedulable): arrivals spread over the hand-over."""
            pod = _gpu_pod(unique_name("fg-le"), gpus, scheduler=name, run=run)
            created.append(pod["metadata"]["name"])
            await core.create_namespaced_pod("default", pod)

            async def kept_up() -> bool:
                pods = (await core.list_namespaced_pod("default", label_selector=f"{RUN_LABEL}={run}")).items
                decided = sum(1 for p in pods if any(c.type == "PodScheduled" for c in p.status.conditions or []))
                return decided >= len(created) - 2

            await wait_for(kept_up, timeout=30, interval=0.05, what="the replicas to keep up")

        sizes = [1, 2, 1, 1, 2, 1, 1, 1, 2, 1, 1]  # 14 GPUs
        for g in sizes[:3]:
            await next_pod(g)
        leases = client.CoordinationV1Api(realnodes_api)

        async def handed_over() -> bool | None:
            """Give the Lease to ``b`` (read-modify-write; again when ``a``'s renewal came between)."""
            lease = await leases.read_namespaced_lease(lease_name, "kube-system")
            lease.spec.holder_identity = b.identity()
            try:
                await leases.replace_namespaced_lease(lease_name, "kube-system", lease)
            except client.ApiException as e:
                if e.status == 409:
                    return None
                raise
            return True

        await wait_for(handed_over, timeout=30, interval=0.05, what="the Lease handed to the standby")
        await b.wait_log("became the leader", timeout=30)
        for g in sizes[3:]:
            await next_pod(g)
        pods = await _settle(core, run, timeout=150)
        held = await _check_devices(core, pods)
        running = sum(h.asked for h in held)
        pending = [p.metadata.name for p in pods if p.status.phase != "Running"]
        assert running >= 10, f"only {running} GPUs in use; pending {pending}"
        assert running <= 12
        for p in pods:
            if p.status.phase != "Running":
                msgs = [m for r, m in await pod_events(realnodes_api, p.metadata.name) if r == "FailedScheduling"]
                assert any("nvidia.com/gpu" in m or "GPU" in m for m in msgs), (p.metadata.name, msgs)
        lost = a.log().count("Failed to bind pod") + b.log().count("Failed to bind pod")
        print(f"lease handed over mid-burst: {len(held)} Pods Running on {running} GPUs, {len(pending)} Pending "
              f"with a reason; {lost} Binding(s) lost a race; kubelet admitted every bound Pod")
        assert "Traceback" not in a.log() and "Traceback" not in b.log()
    finally:
        a.terminate()
        if b is not None:
            b.terminate()
        await _clean(core, run)
