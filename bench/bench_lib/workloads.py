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

Issue 21 adds the rest of upstream's default-profile workloads, shaped as its templates (the
``templates/*.yaml`` and ``*/performance-config.yaml`` files of ``test/integration/scheduler_perf``
in k8s.io/kubernetes v1.37.2); requests stay 100m / 128Mi and nodes 32 CPU so that every workload
runs on the same benchmark nodes:

* ``PodAffinity``: required pod affinity on the zone to the label ``color: blue`` that every Pod
  carries (``pod-with-pod-affinity.yaml``; init Pods bound in every zone, so every node fits);
* ``PreferredPodAntiAffinity``: preferred (weight 1) anti-affinity on the hostname to ``color:
  yellow`` (``pod-with-preferred-pod-anti-affinity.yaml``);
* ``PreferredTopologySpreading``: ``maxSkew: 5`` zone spread, ``ScheduleAnyway``
  (``pod-with-preferred-topology-spreading.yaml``);
* ``MixedSchedulingBasePod``: init Pods cycling over the default, pod-affinity, pod-anti-affinity,
  preferred-affinity and preferred-anti-affinity templates (two per node), measured default Pods
  (``affinity/performance-config.yaml``);
* ``Preemption``: four low-priority 8-CPU Pods fill every node (``pod-low-priority.yaml``, scaled
  from 4-CPU to 32-CPU nodes); measured Pods are priority-10 3-CPU Pods that must preempt
  (``default_preemption/templates/pod-high-priority.yaml``); PriorityClasses ``bench-low`` (0) and
  ``bench-high`` (10) are created first (:attr:`Workload.setup`);
* ``Unschedulable``: default Pods, and one Pod in ten that never fits (priority 10, 64 CPU on 32-CPU
  nodes: ``pod-high-priority-large-cpu.yaml``) created among them (:attr:`Workload.extra`);
* ``SchedulingGates``: as many gated Pods (``schedulingGates: test.k8s.io/hold``, pod affinity to the
  measured Pods' label: ``gated-pod-with-pod-affinity.yaml``) as measured Pods, never released;
* ``SchedulingWithMixedChurn``: default Pods while a node, a never-fitting high-priority Pod and a
  Service are recreated every second (``misc/performance-config.yaml``; :attr:`Workload.churn`).

* ``SchedulingInTreePVs`` / ``SchedulingCSIPVs``: every Pod (init and measured) mounts its own PVC,
  pre-bound to its own PV (``pvc.yaml`` with ``pv.kubernetes.io/bind-completed``, ``pv-aws.yaml`` /
  ``pv-csi.yaml``, bound as upstream's ``CreatePodWithPersistentVolume`` does: PV ``claimRef``,
  PVC ``volumeName``, both statuses Bound); CSI nodes get a CSINode with 39 attachable
  ``ebs.csi.aws.com`` volumes (``volumes/performance-config.yaml``). :func:`pod_objects` /
  :attr:`Workload.node_object` give the extra objects.

* ``SchedulingWaitForFirstConsumer`` (not in upstream's config; issue 21): every Pod mounts an unbound
  PVC of the WaitForFirstConsumer class ``bench-wffc`` (``kubernetes.io/no-provisioner``); as many
  static local PVs of that class as Pods, pinned round-robin to the nodes by node affinity: the
  scheduler picks the node, VolumeBinding's PreBind writes the PV's ``claimRef`` and waits for
  kube-controller-manager's PV binder (started for this workload: :attr:`Workload.controller_manager`).

* ``SchedulingWithResourceClaimTemplate`` (``dra/performance-config.yaml``; not in bench/cycle's
  ``all``, :attr:`Workload.live_only`): every node publishes a ResourceSlice of 10 devices of driver
  ``test-driver.cdi.k8s.io`` (``resourceslice-basic-devices.yaml``, fewer attributes), DeviceClass
  ``test-class``, a ResourceClaimTemplate per namespace, measured Pods with one claim from it
  (``pod-with-claim-template.yaml``); kube-controller-manager's resourceclaim controller creates the
  claims (bench/cycle, named explicitly, makes them itself: :func:`generated_claim`, and writes
  each allocation as PreBind would). Upstream's allocated init claims are left out.
Upstream deviation: one namespace per run (upstream puts init and measured Pods in ``sched-0`` /
``sched-1`` and names both in the terms' ``namespaces``); init Pods are created already bound
(``spec.nodeName``) instead of being scheduled first.
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


def iter_nodes(n: int) -> Iterator[Obj]:
    """``n`` benchmark nodes, generated one at a time."""
    return (make_node(i) for i in range(n))


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


@dataclass(frozen=True, slots=True)
class Workload:
    """One benchmark workload.

    ``pod(i, namespace, scheduler_name, uid)`` builds measured Pod ``i`` (``uid`` None: let the API
    server set it); ``eligible(node_index)`` tells where :func:`init_pods` may place init Pods
    directly; ``gpus`` whether Pods ask for ``nvidia.com/gpu`` (capacity-limited, see
    :func:`max_pods`).

    ``init_pod``: the init Pods' factory (default ``pod``); ``init_per_node``: default init Pods per
    node; ``extra`` / ``extra_ratio``: Pods that are never bound (unschedulable or gated), ``extra_ratio``
    of them per measured Pod, created among the measured ones and not measured; ``setup``: cluster
    objects created before anything else, as ``(collection path, object)``; ``churn``: recreate a
    node, a Pod and a Service every second while the measured Pods schedule (live benchmark only).
    """

    name: str
    pod: PodFactory
    eligible: Callable[[int], bool]
    gpus: bool = False
    init_pod: PodFactory | None = None
    init_per_node: float = 1.0
    extra: PodFactory | None = None
    extra_ratio: float = 0.0
    setup: tuple[tuple[str, Obj], ...] = ()
    churn: bool = False
    volumes: str = ""
    """``""``, ``"aws"`` (in-tree awsElasticBlockStore PVs) or ``"csi"`` (ebs.csi.aws.com PVs)."""
    node_object: Callable[[int], Obj] | None = None
    """An object created per node (``CSINode``), before anything else."""
    controller_manager: bool = False
    """The live benchmark needs kube-controller-manager (the PV binder completes WFFC bindings)."""
    namespace_objects: Callable[[str], list[Obj]] | None = None
    """Objects created in each run's namespace before its Pods (ResourceClaimTemplate)."""
    prepared: Callable[[Obj], bool] | None = None
    """Whether a controller has finished a created Pod (``--backlog`` waits for every measured Pod
    before it starts the scheduler, so that the start-up does not share the control plane with the
    controller's burst of writes): SchedulingWithResourceClaimTemplate's Pods once the resourceclaim
    controller has created the claim and named it in ``status.resourceClaimStatuses``."""
    live_only: bool = False
    """Not in bench/cycle's ``all`` (its objects are made by a controller in the live benchmark;
    bench/cycle simulates that controller when the workload is named: :func:`generated_claim`)."""

    def default_init(self, n_nodes: int) -> int:
        """Init Pods on ``n_nodes`` nodes unless told otherwise."""
        return round(n_nodes * self.init_per_node)


def _color_pod(prefix: str, color: str, i: int, ns: str, sched: str, uid: str | None) -> Obj:
    return _base_pod(f"{prefix}-{i:06d}", ns, sched, {"color": color}, uid)


def _term(color: str, key: str) -> Obj:
    return {"labelSelector": {"matchLabels": {"color": color}}, "topologyKey": key}


def _pod_affinity(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-with-pod-affinity.yaml``."""
    pod = _color_pod("affinity", "blue", i, ns, sched, uid)
    pod["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term("blue", LABEL_ZONE)]}}
    return pod


def _upstream_anti_affinity(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-with-pod-anti-affinity.yaml`` (init Pods of MixedSchedulingBasePod)."""
    pod = _color_pod("anti-affinity", "green", i, ns, sched, uid)
    pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term("green", LABEL_HOSTNAME)]}}
    return pod


def _upstream_preferred_affinity(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-with-preferred-pod-affinity.yaml`` (init Pods of MixedSchedulingBasePod)."""
    pod = _color_pod("preferred-affinity", "red", i, ns, sched, uid)
    pod["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": _term("red", LABEL_HOSTNAME)}]}}
    return pod


def _preferred_anti_affinity(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-with-preferred-pod-anti-affinity.yaml``."""
    pod = _color_pod("preferred-anti-affinity", "yellow", i, ns, sched, uid)
    pod["spec"]["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": _term("yellow", LABEL_HOSTNAME)}]}}
    return pod


def _preferred_spread(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-with-preferred-topology-spreading.yaml``."""
    pod = _color_pod("spreading", "blue", i, ns, sched, uid)
    pod["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 5, "topologyKey": LABEL_ZONE, "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"color": "blue"}}}]
    return pod


def _default(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-default.yaml``."""
    return _base_pod(f"pod-{i:06d}", ns, sched, {}, uid)


_MIXED_INIT: tuple[PodFactory, ...] = (_basic, _pod_affinity, _upstream_anti_affinity,
                                       _upstream_preferred_affinity, _preferred_anti_affinity)


def _mixed_init(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """MixedSchedulingBasePod's init Pods: the five templates in turn (distinct names by index)."""
    return _MIXED_INIT[i % len(_MIXED_INIT)](i, ns, sched, uid)


PRIORITY_LOW = "bench-low"
PRIORITY_HIGH = "bench-high"


def _priority_class(name: str, value: int) -> tuple[str, Obj]:
    return ("/apis/scheduling.k8s.io/v1/priorityclasses",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
             "value": value, "preemptionPolicy": "PreemptLowerPriority"})


PRIORITY_CLASSES = (_priority_class(PRIORITY_LOW, 0), _priority_class(PRIORITY_HIGH, 10))


def _with_priority(pod: Obj, cls: str, value: int, cpu: str) -> Obj:
    spec = pod["spec"]
    spec["priorityClassName"] = cls
    spec["priority"] = value  # what the Priority admission plugin resolves; the in-process bench needs it
    res = spec["containers"][0]["resources"]
    res["requests"]["cpu"] = cpu
    res["limits"] = dict(res["requests"])
    return pod


def _low_priority(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-low-priority.yaml`` at 8 CPU (four fill a 32-CPU benchmark node)."""
    return _with_priority(_base_pod(f"low-{i:06d}", ns, sched, {}, uid), PRIORITY_LOW, 0, "8")


def _high_priority(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``default_preemption/templates/pod-high-priority.yaml``: priority 10, 3 CPU."""
    return _with_priority(_base_pod(f"high-{i:06d}", ns, sched, {}, uid), PRIORITY_HIGH, 10, "3")


def _never_fits(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-high-priority-large-cpu.yaml`` scaled: priority 10, 64 CPU (no 32-CPU node fits it)."""
    return _with_priority(_base_pod(f"large-{i:06d}", ns, sched, {}, uid), PRIORITY_HIGH, 10, "64")


def _gated(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``gated-pod-with-pod-affinity.yaml``: gated, with pod affinity to the measured Pods' label."""
    pod = _base_pod(f"gated-{i:06d}", ns, sched, {}, uid)
    pod["spec"]["schedulingGates"] = [{"name": "test.k8s.io/hold"}]
    pod["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "basic"}}, "topologyKey": LABEL_HOSTNAME}]}}
    return pod


EBS_CSI_DRIVER = "ebs.csi.aws.com"
EBS_VOLUME_LIMIT = 39
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"


def pvc_name(i: int) -> str:
    """The PVC of Pod ``i`` of a volumes workload (upstream: ``pvc-<i>``)."""
    return f"pvc-{i:06d}"


def pv_name(namespace: str, i: int) -> str:
    """The PV of Pod ``i``: PVs are cluster-wide, so the namespace is prepended (as upstream)."""
    return f"{namespace}-pv-{i:06d}"


def _with_pvc(pod: Obj, i: int) -> Obj:
    pod["spec"]["volumes"] = [{"name": "vol", "persistentVolumeClaim": {"claimName": pvc_name(i)}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "vol", "mountPath": "/data"}]
    return pod


def _pv_pod(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-default.yaml`` mounting ``pvc-<i>``."""
    return _with_pvc(_base_pod(f"pv-pod-{i:06d}", ns, sched, {}, uid), i)


WFFC_CLASS = "bench-wffc"
WFFC_STORAGE_CLASS = ("/apis/storage.k8s.io/v1/storageclasses",
                      {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": WFFC_CLASS},
                       "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})


def _wffc_objects(i: int, namespace: str, n_nodes: int) -> list[Obj]:
    name = pv_name(namespace, i)
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": pvc_name(i), "namespace": namespace},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                    "storageClassName": WFFC_CLASS}}
    node = node_name(i % max(1, n_nodes))
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": name, "labels": {"bench-namespace": namespace}},
          "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": WFFC_CLASS,
                   "local": {"path": f"/mnt/bench/{i}"},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": LABEL_HOSTNAME, "operator": "In", "values": [node]}]}]}}},
          "status": {"phase": "Available"}}
    return [pvc, pv]


def pod_objects(workload: Workload, i: int, namespace: str, n_nodes: int = 0) -> list[Obj]:
    """The objects Pod ``i`` of ``workload`` needs before it is created: for a volumes workload its
    PVC then its PV (in-tree / CSI: bound to each other with Bound statuses; the API server resets
    statuses on create, so write them through ``/status`` after; WaitForFirstConsumer: an unbound
    claim and an Available local PV on node ``i % n_nodes``); nothing for the others."""
    if not workload.volumes:
        return []
    if workload.volumes == "wffc":
        return _wffc_objects(i, namespace, n_nodes)
    name = pv_name(namespace, i)
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": pvc_name(i), "namespace": namespace, "annotations": {BIND_COMPLETED: "true"}},
           "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}},
                    "volumeName": name, "storageClassName": ""},
           "status": {"phase": "Bound", "accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Gi"}}}
    source: Obj = ({"csi": {"driver": EBS_CSI_DRIVER, "volumeHandle": name}} if workload.volumes == "csi"
                   else {"awsElasticBlockStore": {"volumeID": f"vol-{i:06d}"}})
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": name, "labels": {"bench-namespace": namespace}},
          "spec": {"accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Gi"},
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                   "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace,
                                "name": pvc_name(i)}, **source},
          "status": {"phase": "Bound"}}
    return [pvc, pv]


def csinode(i: int) -> Obj:
    """Node ``i``'s CSINode: the EBS CSI driver with 39 attachable volumes (upstream's
    ``csiNodeAllocatable``)."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node_name(i)},
            "spec": {"drivers": [{"name": EBS_CSI_DRIVER, "nodeID": node_name(i),
                                  "allocatable": {"count": EBS_VOLUME_LIMIT}}]}}


DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_CLASS = "test-class"
DRA_TEMPLATE = "test-claim-template"
DRA_DEVICES_PER_NODE = 10
DRA_DEVICE_CLASS = ("/apis/resource.k8s.io/v1/deviceclasses",
                    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRA_CLASS},
                     "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]}})


def resource_slice(i: int) -> Obj:
    """Node ``i``'s ResourceSlice: 10 devices (``resourceslice-basic-devices.yaml``, two PCI roots)."""
    node = node_name(i)
    devices = [{"name": f"basic-device-{d}",
                "attributes": {"driver": {"string": "xe"}, "model": {"string": "B60"}, "type": {"string": "gpu"},
                               "resource.kubernetes.io/pciRoot": {"string": f"pci0000:0{d % 2}"}},
                "capacity": {"memory": {"value": "24480Mi"}, "millicores": {"value": "1k"}}}
               for d in range(DRA_DEVICES_PER_NODE)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"resourceslice-{node}"},
            "spec": {"pool": {"name": f"resourceslice-{node}", "generation": 1, "resourceSliceCount": 1},
                     "driver": DRA_DRIVER, "nodeName": node, "devices": devices}}


def _claim_template(namespace: str) -> list[Obj]:
    """``resourceclaimtemplate.yaml`` with one request of ``test-class``."""
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": DRA_TEMPLATE, "namespace": namespace},
             "spec": {"spec": {"devices": {"requests": [{"name": "req-0",
                                                         "exactly": {"deviceClassName": DRA_CLASS}}]}}}}]


def generated_claim(pod: Obj) -> Obj:
    """What kube-controller-manager's resourceclaim controller does for a Pod of
    SchedulingWithResourceClaimTemplate, for bench/cycle (no controller in process): the claim it
    creates from the namespace's template (``<pod>-resource``, owned by the Pod); the Pod's
    ``status.resourceClaimStatuses`` entry naming it is set on ``pod`` in place."""
    meta = pod["metadata"]
    name = f"{meta['name']}-resource"
    pod.setdefault("status", {})["resourceClaimStatuses"] = [{"name": "resource", "resourceClaimName": name}]
    template = _claim_template(meta["namespace"])[0]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": meta["namespace"], "uid": f"uid-claim-{meta['namespace']}-{name}",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                              "uid": meta.get("uid", ""), "controller": True}]},
            "spec": template["spec"]["spec"]}


def _dra_pod(i: int, ns: str, sched: str, uid: str | None) -> Obj:
    """``pod-with-claim-template.yaml``."""
    pod = _base_pod(f"dra-{i:06d}", ns, sched, {}, uid)
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "resource"}]
    pod["spec"]["resourceClaims"] = [{"name": "resource", "resourceClaimTemplateName": DRA_TEMPLATE}]
    return pod


def _claim_named(pod: Obj) -> bool:
    """The resourceclaim controller has named the Pod's generated claim (it creates the claim first)."""
    return bool((pod.get("status") or {}).get("resourceClaimStatuses"))


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
    Workload("PodAffinity", _pod_affinity, _any),
    Workload("PreferredPodAntiAffinity", _preferred_anti_affinity, _any),
    Workload("PreferredTopologySpreading", _preferred_spread, _any),
    Workload("MixedSchedulingBasePod", _default, _any, init_pod=_mixed_init, init_per_node=2.0),
    Workload("Preemption", _high_priority, _any, init_pod=_low_priority, init_per_node=4.0,
             setup=PRIORITY_CLASSES),
    Workload("Unschedulable", _default, _any, init_per_node=0.02, extra=_never_fits, extra_ratio=0.1,
             setup=PRIORITY_CLASSES),
    Workload("SchedulingGates", _basic, _any, init_per_node=0.0, extra=_gated, extra_ratio=1.0),
    Workload("SchedulingWithMixedChurn", _default, _any, init_per_node=0.0, churn=True,
             setup=PRIORITY_CLASSES),
    Workload("SchedulingInTreePVs", _pv_pod, _any, volumes="aws"),
    Workload("SchedulingCSIPVs", _pv_pod, _any, volumes="csi", node_object=csinode),
    Workload("SchedulingWaitForFirstConsumer", _pv_pod, _any, init_per_node=0.0, volumes="wffc",
             setup=(WFFC_STORAGE_CLASS,), controller_manager=True),
    Workload("SchedulingWithResourceClaimTemplate", _dra_pod, _any, init_per_node=0.0, setup=(DRA_DEVICE_CLASS,),
             node_object=resource_slice, namespace_objects=_claim_template, controller_manager=True,
             prepared=_claim_named, live_only=True),
)}


def churn_objects(k: int, namespace: str, scheduler_name: str) -> list[tuple[str, Obj]]:
    """The ``k``-th set of SchedulingWithMixedChurn's recreated objects, as ``(collection path,
    object)``: a node (``churn-node-<k>``, a benchmark node's shape), a Pod that never fits and a
    Service (``templates/churn/*.yaml``, ``pod-high-priority-large-cpu.yaml``)."""
    node = make_node(k)
    name = f"churn-node-{k:05d}"
    node["metadata"]["name"] = name
    node["metadata"]["labels"][LABEL_HOSTNAME] = name
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"churn-svc-{k:05d}", "namespace": namespace},
           "spec": {"selector": {"app": "churn"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    pod = _never_fits(k, namespace, scheduler_name, None)
    pod["metadata"]["name"] = f"churn-pod-{k:05d}"
    return [("/api/v1/nodes", node), (f"/api/v1/namespaces/{namespace}/pods", pod),
            (f"/api/v1/namespaces/{namespace}/services", svc)]


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
    bound: ``wanted``, except for GPU Pods (1.5 GPUs each on average), limited to 90% of the GPUs."""
    if workload.node_object is resource_slice:  # one device per Pod
        return min(wanted, n_nodes * DRA_DEVICES_PER_NODE)
    if not workload.gpus:
        return wanted
    return min(wanted, int(gpu_capacity(n_nodes) * 0.9 / 1.5))


def init_pods(workload: Workload, n_nodes: int, count: int, namespace: str = "bench-init",
              scheduler_name: str = "py-scheduler", uids: bool = True) -> Iterator[Obj]:
    """``count`` Pods of ``workload`` already bound (``spec.nodeName``, phase Running) round-robin
    over the eligible nodes, respecting the workload's rules (anti-affinity groups of 10 land on 10
    distinct nodes; GPU Pods only while the node has free GPUs). Their index range is ``0 ..
    count-1``; UIDs are set (for in-process snapshots) unless ``uids`` is false (for the API server).
    The Pods come from ``workload.init_pod`` (default ``workload.pod``) and are generated one at a
    time (150000 of them are never held in a list here)."""
    eligible = [i for i in range(n_nodes) if workload.eligible(i)]
    if not eligible:
        return
    free = {i: GPUS_PER_NODE for i in eligible} if workload.gpus else {}
    k = 0
    factory = workload.init_pod or workload.pod
    for idx in range(count):
        pod = factory(idx, namespace, scheduler_name, f"uid-{namespace}-{idx}" if uids else None)
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
        pod["status"] = {"phase": "Running"}
        yield pod
