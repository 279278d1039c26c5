"""Benchmark clusters and workloads, as plain Kubernetes JSON dicts.

Nodes: 32 CPU / 128Gi / 110 pods each, labelled with hostname, ``topology.kubernetes.io/zone``
(``zone-0`` .. ``zone-9``, round-robin) and region; 10% of them (one per zone in every block of 100)
are GPU nodes with GPU Feature Discovery labels (``nvidia.com/gpu.product:
NVIDIA-A100-SXM4-40GB``, ``nvidia.com/gpu.memory: "40960"`` MiB, ``nvidia.com/gpu.count: "8"``) and
``status.allocatable["nvidia.com/gpu"] = 8`` (see docs/gpu.md).

Workloads follow upstream's scheduler_perf (``test/integration/scheduler_perf/config/
performance-config.yaml``; the definitions below are the ones this project's issue 9 fixes):

* ``SchedulingBasic``: 100m / 128Mi requests;
* ``NodeAffinity``: required node affinity to zones ``zone-0``..``zone-2`` (30% of the nodes);
* ``PodAntiAffinity``: required anti-affinity on ``kubernetes.io/hostname`` against the Pod's own
  ``app`` label, groups of 10 Pods;
* ``PreferredPodAffinity``: preferred (weight 1) pod affinity on ``topology.kubernetes.io/zone`` to
  the Pod's own ``app`` label, groups of 10;
* ``TopologySpreading``: one ``DoNotSchedule`` zone spread constraint, ``maxSkew: 1``;
* ``GPU``: 1 or 2 ``nvidia.com/gpu`` (alternating) plus the ``gpu-scheduler/gpu-model: A100`` and
  ``gpu-scheduler/gpu-memory-gb: "20"`` annotations (kube-scheduler only counts the resource).
* ``SchedulingWithResourceClaimTemplate`` (DRA): scheduler_perf's workload of that name
  (``test/integration/scheduler_perf/dra/performance-config.yaml``): every node publishes a
  ResourceSlice of :data:`DRA_DEVICES_PER_NODE` devices of the test driver (``maxClaimsPerNode``),
  one DeviceClass selects the driver, and each Pod's claim comes from one ResourceClaimTemplate
  asking one device. In-process there is no resourceclaim controller: each Pod carries the
  ``status.resourceClaimStatuses`` entry the controller would write and :func:`dra_claim` is the
  claim it would create (owned by the Pod); bound init Pods' claims are allocated and reserved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

ZONES = 10
GPUS_PER_NODE = 8
NODE_CPU = "32"
NODE_MEMORY = "128Gi"
NODE_PODS = "110"
POD_CPU = "100m"
POD_MEMORY = "128Mi"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
GFD_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/gpu.count": str(GPUS_PER_NODE),
}
AFFINITY_ZONES = ("zone-0", "zone-1", "zone-2")
GROUP_SIZE = 10


def node_name(i: int) -> str:
    """Name of node ``i`` (``node-00042``)."""
    return f"node-{i:05d}"


def is_gpu_node(i: int) -> bool:
    """Exactly one node in ten is a GPU node, one per zone in each block of 100 nodes."""
    return i % ZONES == (i // ZONES) % ZONES


def make_node(i: int) -> Obj:
    """Node ``i`` as Kubernetes JSON (status included: the API server keeps it on create)."""
    name = node_name(i)
    labels = {
        LABEL_HOSTNAME: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        LABEL_ZONE: f"zone-{i % ZONES}",
        LABEL_REGION: "region-1",
    }
    resources = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS}
    if is_gpu_node(i):
        labels.update(GFD_LABELS)
        resources["nvidia.com/gpu"] = str(GPUS_PER_NODE)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "benchmark node"}],
        },
    }


def make_nodes(n: int) -> list[Obj]:
    """``n`` benchmark nodes (``node-00000`` ..)."""
    return [make_node(i) for i in range(n)]


def gpu_capacity(n_nodes: int) -> int:
    """Whole GPUs in a cluster of ``n_nodes`` benchmark nodes."""
    return sum(GPUS_PER_NODE for i in range(n_nodes) if is_gpu_node(i))


def _base_pod(name: str, namespace: str, scheduler_name: str, labels: dict[str, str],
              uid: str | None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels}
    if uid is not None:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "pause",
                "image": PAUSE_IMAGE,
                "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}},
            }],
        },
    }


PodFactory = Callable[[int, str, str, "str | None"], Obj]


def _basic(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    return _base_pod(f"basic-{i:06d}", ns, sched, {"app": "basic"}, uid)


def _node_affinity(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    pod = _base_pod(f"nodeaff-{i:06d}", ns, sched, {"app": "nodeaff"}, uid)
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": LABEL_ZONE, "operator": "In", "values": list(AFFINITY_ZONES)}]}]}}}
    return pod


def _anti_affinity(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    group = f"anti-{i // GROUP_SIZE}"
    pod = _base_pod(f"antiaff-{i:06d}", ns, sched, {"app": group}, uid)
    pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": group}}, "topologyKey": LABEL_HOSTNAME}]}}
    return pod


def _preferred_affinity(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    group = f"pref-{i // GROUP_SIZE}"
    pod = _base_pod(f"prefaff-{i:06d}", ns, sched, {"app": group}, uid)
    pod["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": group}},
                                          "topologyKey": LABEL_ZONE}}]}}
    return pod


def _spread(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    pod = _base_pod(f"spread-{i:06d}", ns, sched, {"app": "spread"}, uid)
    pod["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": LABEL_ZONE, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}}}]
    return pod


def gpu_count(i: int) -> int:
    """GPUs asked by GPU-workload Pod ``i`` (1, 2, 1, 2, ...)."""
    return 1 + i % 2


def _gpu(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    pod = _base_pod(f"gpu-{i:06d}", ns, sched, {"app": "gpu"}, uid)
    n = str(gpu_count(i))
    res = pod["spec"]["containers"][0]["resources"]
    res["requests"]["nvidia.com/gpu"] = n
    res["limits"] = {"nvidia.com/gpu": n}
    pod["metadata"]["annotations"] = {"gpu-scheduler/gpu-model": "A100", "gpu-scheduler/gpu-memory-gb": "20"}
    return pod


DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_CLASS = "test-class"
DRA_TEMPLATE = "test-claim-template"
DRA_DEVICES_PER_NODE = 10
"""scheduler_perf's ``maxClaimsPerNode`` for SchedulingWithResourceClaimTemplate."""
DRA_POD_CLAIM = "resource"


def _dra(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    pod = _base_pod(f"dra-{i:06d}", ns, sched, {"app": "dra"}, uid)
    pod["spec"]["resourceClaims"] = [{"name": DRA_POD_CLAIM, "resourceClaimTemplateName": DRA_TEMPLATE}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": DRA_POD_CLAIM}]
    pod["status"] = {"resourceClaimStatuses": [{"name": DRA_POD_CLAIM,
                                                "resourceClaimName": f"{pod['metadata']['name']}-{DRA_POD_CLAIM}"}]}
    return pod


def dra_objects(n_nodes: int) -> list[Obj]:
    """The DeviceClass, the ResourceClaimTemplate and one ResourceSlice per node (its own pool)."""
    out: list[Obj] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRA_CLASS},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": DRA_TEMPLATE, "namespace": "bench"},
         "spec": {"spec": {"devices": {"requests": [{"name": "req-0", "exactly": {
             "deviceClassName": DRA_CLASS, "allocationMode": "ExactCount", "count": 1}}]}}}},
    ]
    for i in range(n_nodes):
        name = node_name(i)
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": f"{name}-{DRA_DRIVER}"},
                    "spec": {"driver": DRA_DRIVER, "nodeName": name,
                             "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                             "devices": [{"name": f"device-{d}"} for d in range(DRA_DEVICES_PER_NODE)]}})
    return out


def dra_claim(pod: Obj, device: str | None = None) -> Obj:
    """The claim the resourceclaim controller creates for ``pod`` from the template (owned by the Pod);
    with ``device``: allocated on the Pod's node and reserved for it (a bound init Pod)."""
    meta = pod["metadata"]
    name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                  "metadata": {"name": name, "namespace": meta["namespace"], "uid": f"uid-claim-{name}",
                               "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                    "uid": meta.get("uid", ""), "controller": True}]},
                  "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {
                      "deviceClassName": DRA_CLASS, "allocationMode": "ExactCount", "count": 1}}]}}}
    if device is not None:
        node = pod["spec"]["nodeName"]
        claim["status"] = {
            "allocation": {"devices": {"results": [{"request": "req-0", "driver": DRA_DRIVER, "pool": node,
                                                    "device": device}]},
                           "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                               {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta.get("uid", "")}]}
    return claim


@dataclass(frozen=True, slots=True)
class Workload:
    """One benchmark workload.

    ``pod(i, namespace, scheduler_name, uid)`` builds Pod ``i`` (``uid`` None: let the API server set
    it); ``eligible(node_index)`` tells where :func:`init_pods` may place this workload's Pods
    directly; ``gpus`` whether Pods ask for ``nvidia.com/gpu`` (capacity-limited, see
    :func:`max_pods`).
    """

    name: str
    pod: PodFactory
    eligible: Callable[[int], bool]
    gpus: bool = False
    dra: bool = False
    """Pods get a device by ResourceClaim (:func:`dra_objects`, :func:`dra_claim`)."""


def _any(_: int) -> bool:
    return True


def _in_affinity_zones(i: int) -> bool:
    return f"zone-{i % ZONES}" in AFFINITY_ZONES


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("SchedulingBasic", _basic, _any),
    Workload("NodeAffinity", _node_affinity, _in_affinity_zones),
    Workload("PodAntiAffinity", _anti_affinity, _any),
    Workload("PreferredPodAffinity", _preferred_affinity, _any),
    Workload("TopologySpreading", _spread, _any),
    Workload("GPU", _gpu, is_gpu_node, gpus=True),
    Workload("SchedulingWithResourceClaimTemplate", _dra, _any, dra=True),
)}


def get_workload(name: str) -> Workload:
    """Workload by name (case-insensitive).

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    for k, w in WORKLOADS.items():
        if k.lower() == name.lower():
            return w
    raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


def max_pods(workload: Workload, n_nodes: int, wanted: int) -> int:
    """How many Pods of ``workload`` a benchmark may create on ``n_nodes`` nodes so that all can be
    bound: ``wanted``, except for GPU Pods (1.5 GPUs each on average), limited to 90% of the GPUs, and
    DRA Pods (one device each), limited to 90% of the devices."""
    if workload.dra:
        return min(wanted, int(n_nodes * DRA_DEVICES_PER_NODE * 0.9))
    if not workload.gpus:
        return wanted
    return min(wanted, int(gpu_capacity(n_nodes) * 0.9 / 1.5))


def init_pods(workload: Workload, n_nodes: int, count: int, namespace: str = "bench-init",
              scheduler_name: str = "py-scheduler") -> Iterator[Obj]:
    """``count`` Pods of ``workload`` already bound (``spec.nodeName``, phase Running) round-robin
    over the eligible nodes, respecting the workload's rules (anti-affinity groups of 10 land on 10
    distinct nodes; GPU Pods only while the node has free GPUs). Their index range is ``0 ..
    count-1``; UIDs are set (for in-process snapshots)."""
    eligible = [i for i in range(n_nodes) if workload.eligible(i)]
    if not eligible:
        return
    free = {i: GPUS_PER_NODE for i in eligible} if workload.gpus else {}
    devices = dict.fromkeys(eligible, 0)
    k = 0
    for idx in range(count):
        pod = workload.pod(idx, namespace, scheduler_name, f"uid-{namespace}-{idx}")
        if workload.gpus:
            need = gpu_count(idx)
            for _ in range(len(eligible)):
                target = eligible[k % len(eligible)]
                k += 1
                if free[target] >= need:
                    free[target] -= need
                    break
            else:
                return
        else:
            target = eligible[idx % len(eligible)]
        pod["spec"]["nodeName"] = node_name(target)
        pod["status"] = {**(pod.get("status") or {}), "phase": "Running"}
        if workload.dra:  # the device its claim holds (dra_claim): the node's next free one
            if devices[target] >= DRA_DEVICES_PER_NODE:
                return
            pod["metadata"].setdefault("annotations", {})["bench/dra-device"] = f"device-{devices[target]}"
            devices[target] += 1
        yield pod
