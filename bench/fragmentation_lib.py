"""GPU fragmentation benchmark (issue 17): fill a GPU fleet to ``fill`` with a 1 / 2 / 4 / 8-GPU mix
queued at once, and count the Pods left Pending although the GPUs they need are free in total.

The cluster: ``nodes`` Nodes of which ``gpu_nodes`` have 8 A100-40GB (GFD labels, ``nvidia.com/gpu:
8``, 96 CPU, 1 TiB) and the rest are CPU-only (64 CPU, 256 GiB); every GPU node already runs one
small bound Pod of random size (0-16 CPU: daemons, agents), so CPU/memory scoring does not see the
GPU nodes as equal. The pending GPU Pods ask ``cpu_per_gpu`` CPU and 100 GiB per GPU (a GPU Pod's
share of the node follows its GPU share, as on real training / inference nodes); their GPU counts are
drawn from ``mix`` with ``weights`` until ``fill`` of the fleet's GPUs is asked for; the queue order is
their creationTimestamp, the order they were drawn.

Sides:
    ``py``: py-scheduler's default profile in process (:class:`~py_scheduler.offline.engine.OfflineScheduler`:
        ``Algorithm.schedule``, Reserve, assume: what ``py-scheduler simulate`` runs), GPUScore with its
        default packing (``binpack``);
    ``py-nopack``: the same with ``GPUScore`` args ``packing: none`` (the behaviour before issue 17);
    ``kube``: upstream kube-scheduler v1.37.2's own framework and default profile through the parity
        oracle (``tests/e2e/testbed/oracle``, built by :func:`bench.parity_lib.runner.oracle_binary`),
        one cycle per Pod in queue order, ties broken towards the smallest node name.

Figures per side: Pods placed / pending, **stranded** (pending Pods whose GPU count is at most the
GPUs free in the whole fleet at the end: a packing would have placed them, since every size divides
8), free GPUs at the end, GPU nodes with free GPUs, and the wall time.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Any

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
DEFAULT_MIX = (1, 2, 4, 8)
DEFAULT_WEIGHTS = (40, 30, 20, 10)


def _node(name: str, cpu: str, memory: str, gpus: int) -> Obj:
    labels = {"kubernetes.io/hostname": name}
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        labels.update({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960",
                       "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.replicas": "1"})
        alloc[GPU] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels, "annotations": {}},
            "status": {"allocatable": alloc, "capacity": dict(alloc),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, cpu: str, memory: str, gpus: int, ts: int, node: str | None = None) -> Obj:
    req: Obj = {"cpu": cpu, "memory": memory}
    lim: Obj = {}
    if gpus:
        req[GPU] = lim[GPU] = str(gpus)
    spec: Obj = {"schedulerName": "default-scheduler",
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": req, "limits": lim}}]}
    if node is not None:
        spec["nodeName"] = node
    h, rest = divmod(ts, 3600)
    m, s = divmod(rest, 60)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": f"2026-01-01T{h:02d}:{m:02d}:{s:02d}Z"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def gpu_sizes(total_gpus: int, fill: float, rng: random.Random, mix: tuple[int, ...] = DEFAULT_MIX,
              weights: tuple[int, ...] = DEFAULT_WEIGHTS) -> list[int]:
    """GPU counts drawn from ``mix`` until exactly ``floor(fill * total_gpus)`` GPUs are asked for
    (a draw larger than what is left is replaced by the largest size that fits)."""
    target = int(fill * total_gpus)
    out: list[int] = []
    left = target
    while left > 0:
        g = rng.choices(mix, weights)[0]
        if g > left:
            g = max(s for s in mix if s <= left) if any(s <= left for s in mix) else left
        out.append(g)
        left -= g
    return out


def scenario(nodes: int, gpu_nodes: int, fill: float = 0.9, seed: int = 1, cpu_per_gpu: int = 10) -> list[Obj]:
    """Nodes, their bound Pods and the pending GPU Pods (module docstring), as one object list."""
    rng = random.Random(seed)
    objs: list[Obj] = []
    for i in range(nodes):
        if i < gpu_nodes:
            name = f"gpu-{i:04d}"
            objs.append(_node(name, "96", "1024Gi", GPUS_PER_NODE))
            objs.append(_pod(f"agent-{i:04d}", f"{rng.randint(0, 16)}", f"{rng.randint(1, 64)}Gi", 0, 0, name))
        else:
            objs.append(_node(f"cpu-{i:04d}", "64", "256Gi", 0))
    for k, g in enumerate(gpu_sizes(gpu_nodes * GPUS_PER_NODE, fill, rng)):
        objs.append(_pod(f"train-{k:04d}", str(cpu_per_gpu * g), f"{100 * g}Gi", g, 60 + k))
    return objs


@dataclass(slots=True)
class Result:
    """One side's figures (module docstring)."""

    side: str
    pods: int
    placed: int
    pending: int
    stranded: int
    free_gpus: int
    nodes_with_free_gpus: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _gpus(pod: Obj) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["requests"].get(GPU, "0"))


def _figures(side: str, objs: list[Obj], placement: dict[str, str | None], seconds: float) -> Result:
    pending_pods = [o for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
    free = {o["metadata"]["name"]: GPUS_PER_NODE for o in objs
            if o["kind"] == "Node" and GPU in o["status"]["allocatable"]}
    for p in pending_pods:
        node = placement.get(p["metadata"]["name"])
        if node is not None:
            free[node] -= _gpus(p)
    total_free = sum(free.values())
    left = [p for p in pending_pods if placement.get(p["metadata"]["name"]) is None]
    stranded = sum(1 for p in left if _gpus(p) <= total_free)
    return Result(side, len(pending_pods), len(pending_pods) - len(left), len(left), stranded, total_free,
                  sum(1 for f in free.values() if f > 0), round(seconds, 2))


def run_py(objs: list[Obj], packing: str = "binpack", seed: int = 0) -> Result:
    """py-scheduler's default profile in process, GPUScore ``packing`` as given."""
    from py_scheduler.cache.snapshot import Snapshot
    from py_scheduler.framework.config import ProfileConfig, build_framework
    from py_scheduler.offline.engine import OfflineScheduler
    from py_scheduler.plugins import registry

    nodes = [o for o in objs if o["kind"] == "Node"]
    bound = [o for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")]
    pending = [o for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler",
                                       plugin_config={"GPUScore": {"packing": packing}}), registry=registry)
    sched = OfflineScheduler({"default-scheduler": fw}, "default-scheduler", Snapshot.from_objects(nodes, bound),
                             seed=seed)
    t0 = time.perf_counter()
    placement = {o.pod["metadata"]["name"]: o.result.selected for o in sched.run(pending, explain=False)}
    side = "py" if packing == "binpack" else f"py-{'nopack' if packing == 'none' else packing}"
    return _figures(side, objs, placement, time.perf_counter() - t0)


def run_kube(objs: list[Obj]) -> Result:
    """Upstream's default profile through the parity oracle (builds it once; needs Go)."""
    from bench.parity_lib.runner import oracle_binary, run_oracle

    binary = oracle_binary()
    t0 = time.perf_counter()
    out = run_oracle(binary, objs)
    placement: dict[str, str | None] = {str(r["pod"]).split("/")[-1]: r.get("selected") for r in out}
    return _figures("kube", objs, placement, time.perf_counter() - t0)
