"""What the pod group cycle's loop tests (:mod:`tests.unit.app.test_gang_cycle`,
:mod:`tests.unit.app.test_gang_placement`) arrange alike: the loop harness with a default profile built
under the workload gates and an ObjectLister of PodGroups, gang members (plain GPU Pods or Pods with
one ResourceClaim each) queued after all are listed, and what the tests read back (each NodeInfo's
accounting, the Bindings written)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from py_scheduler.framework.features import FeatureGates
from tests.unit.app.test_loop import Harness
from tests.unit.plugins import test_dynamic_resources as dra

Obj = dict[str, Any]


class Objects:
    """ObjectLister over the harness's Pods and a PodGroup dict."""

    def __init__(self) -> None:
        self.pods: dict[str, Obj] = {}
        self.groups: dict[str, Obj] = {}
        self.others: Any = None
        """The cache's objects (ResourceClaims...), set by :func:`gang_harness`."""

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        if kind == "PodGroup":
            return self.groups.get(f"{namespace}/{name}")
        if kind == "Pod":
            return self.pods.get(f"{namespace}/{name}")
        if self.others is not None:
            got: Obj | None = self.others.get(kind, f"{namespace}/{name}" if namespace else name)
            return got
        return None

    def list(self, kind: str) -> Iterable[Obj]:
        return list(self.pods.values()) if kind == "Pod" else list(self.groups.values())


def gang_harness(gates: dict[str, bool]) -> tuple[Harness, Objects]:
    """The loop harness with a default profile built under ``gates`` and an :class:`Objects` lister
    behind the plugins' Handle, the queue and the loop."""
    objs = Objects()
    h = Harness(objects=objs, gates=FeatureGates.of(gates))
    objs.others = h.cache.objects
    h.pods = objs.pods
    h.queue.pod_lister = h.loop.pod_lister = lambda ns, n: objs.pods.get(f"{ns}/{n}")
    return h, objs


def pod_group(objs: Objects, name: str, min_count: int, topology_key: str = "") -> None:
    """A ``default/<name>`` PodGroup with a gang policy of ``min_count``, constrained to one domain of
    ``topology_key`` when given."""
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    objs.groups[f"default/{name}"] = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                                      "metadata": {"name": name, "namespace": "default", "uid": f"pg-{name}"},
                                      "spec": spec}


def _queue_members(h: Harness, group: str, n: int, spec: Callable[[str], Obj]) -> list[str]:
    """``n`` members ``<group>-<i>`` of ``group``, each with ``spec(name)`` besides its scheduler and
    group, all listed before the first is queued (so PreEnqueue lets each in); their names."""
    names = [f"{group}-{i}" for i in range(n)]
    for name in names:
        h.pods[f"default/{name}"] = {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"schedulerName": "py-scheduler", "schedulingGroup": {"podGroupName": group}, **spec(name)}}
    for name in names:
        h.queue.add(h.pods[f"default/{name}"])
    return names


def members(h: Harness, group: str, n: int, *, cpu: str, gpus: int) -> list[str]:
    """``n`` members of ``group`` requesting ``cpu`` and ``gpus`` whole GPUs (a limit) each, queued."""
    return _queue_members(h, group, n, lambda _name: {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": cpu}, "limits": {"nvidia.com/gpu": str(gpus)}}}]})


def claim_members(h: Harness, group: str, n: int) -> list[str]:
    """``n`` members of ``group`` (100m CPU each), each using a ResourceClaim ``c-<member>`` of its own
    for one device (``dra.ex()``), put in the fake API and the cache first; queued."""
    for i in range(n):
        path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c-{group}-{i}"
        h.kube.put_object(path, dra.claim(f"c-{group}-{i}", [{"name": "r", "exactly": dra.ex()}]))
        h.cache.objects.upsert("ResourceClaim", copy.deepcopy(h.kube.objects[path]))
    return _queue_members(h, group, n, lambda name: {
        "resourceClaims": dra.uses(f"c-{name}"),
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]})


def accounting(h: Harness, nodes: Iterable[str]) -> dict[str, Any]:
    """Each existing NodeInfo's accounting among ``nodes``: requested and non-zero requested resources
    (GPUs included), host ports, PVC references, its Pods with their GPU index annotations."""
    out = {}
    for name in nodes:
        ni = h.cache.node_info(name)
        if ni is None:
            continue
        out[name] = (repr(ni.requested), repr(ni.non_zero_requested), repr(ni.used_ports), dict(ni.pvc_ref_counts),
                     sorted((p.key, ((p.pod.get("metadata") or {}).get("annotations") or {}).get(
                         "gpu-scheduler/gpu-indices", "")) for p in ni.pods))
    return out


def bound(h: Harness) -> dict[str, str]:
    """``namespace/name -> node`` of every Binding written to the fake API."""
    return {c[1][0]: c[1][1] for c in h.kube.calls if c[0] == "bind"}
