"""Churn for the soak that reaches py-scheduler's bounded memos (:class:`FillChurn`).

The soak's own churn (``bench/bench_lib/soak.py``: Pods, CPU Nodes, NotReady flaps, leader kills)
never touches several of the scheduler's bounded structures, so a soak could not show whether their
bounds hold. With their caps lowered (``bench/bench_lib/soak_caps.py``) the five churns here fill
each within minutes; see :class:`FillChurn` for what each one creates and deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.faults.invariants import MEM_ANNOTATION
from tests.e2e.faults.scenarios import GROUP_LABEL, FaultEnv
from tests.e2e.helpers import create_node, unique_name

G, V = "resource.k8s.io", "v1"
FILL_TAINT_KEY = "py-scheduler-soak/fill"
"""Taint (``NoSchedule``) of the churn's dedicated Nodes: the soak's Pods stay off them."""
NOWHERE_LABEL = "py-scheduler-soak/fill-nowhere"
"""A label no Node has: the unschedulable Pods select it."""
GPU_LABEL = "py-scheduler-soak/fill-gpu"
"""Label of the churn's GPU Nodes (its own GPU Pods select it)."""
ROLE_LABEL = "py-scheduler-soak/fill-role"
"""``slice`` (the DRA and PV Node) or ``preempt`` on the dedicated Nodes."""
TOLERATION = {"key": FILL_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
FILL_ANNOTATION = "py-scheduler-soak/fill"
"""On every Pod of the churn: its run's tag."""
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
SHARED_DEVICES = 2
"""Multi-allocatable devices of the slice (the capacity-request claims share them)."""
SPARE_DEVICES = 24
"""Devices of the slice no claim selects (each new selector is checked against all of them)."""

ROUND_TICKS = 30
"""Intervals after which a preemption round that has not finished is given up (and cleaned up)."""

Obj = dict[str, Any]
_ERRORS = (ApiException, aiohttp.ClientError, asyncio.TimeoutError)


@dataclass
class _Preemption:
    """One preemption round: its Node, the low-priority Pod filling it, the preemptor."""

    node: str
    low: str
    high: str = ""
    ticks: int = 0


class FillChurn:
    """Churn that fills py-scheduler's bounded memos, one churn per memo family, every ``interval``
    seconds each (all five concurrently; the rates below are per ``interval``), at most ``live`` of
    each kind of object alive (the oldest deleted first):

    1. **Unschedulable Pods** (``app/scheduling/binder.py``: the FailedScheduling event-series LRU,
       keyed per Pod): a Pod (100m CPU) with a nodeSelector on :data:`NOWHERE_LABEL`, which no Node
       has; one FailedScheduling Event (series) per Pod. Each asks for a memory amount of its own
       (``64Mi`` plus ``k`` KiB), so it also reaches ``framework/memo.py`` REQUESTS (keyed by the
       resources' repr).
    2. **GPU Nodes with fresh names** (``plugins/gpu/accounting.py``: the per-node GPU state LRU,
       keyed by node name; ``plugins/dynamic_resources/pools.py``: :class:`SliceView`'s per-node-name
       pools / device ids / allocation results, filled when the DRA Pods of churn 3 filter them): a
       GPU Node (``env.node(gpu=True)``: 8 x A100 40GB, 8 CPU / 32Gi, labelled :data:`GPU_LABEL`) and a
       1-GPU Pod selecting :data:`GPU_LABEL` (so it filters every GPU Node of the churn; the soak's
       own GPU Pods filter them too: the Nodes are not tainted). The Pod's per-GPU memory minimum
       (``gpu-scheduler/gpu-memory-gb``, 30 GB plus ``k`` kB) is new each time, which reaches
       ``plugins/gpu/filter.py``'s request tokens. Above ``live`` Nodes the oldest is cordoned, and one
       interval later its Pods (the soak's too: the bed has no PodGC) and the Node are deleted. GPU
       Pods above ``live`` are deleted oldest first.
    3. **DRA claims with distinct CEL selectors** (``framework/memo.py`` CEL_SELECTORS and
       QUANTITIES, ``plugins/dynamic_resources/selector_memo.py`` SelectorMemo, ``pools.py``
       SliceView): set up once, a DeviceClass of driver ``<tag>.fill.example.com`` and a ResourceSlice
       on the dedicated slice Node: :data:`SPARE_DEVICES` devices of ``kind`` ``spare`` (no claim
       selects them: each new selector is checked against them all, and SelectorMemo gains an entry
       per device and one for their shared content per claim; it is evaluated once, as they are
       alike), ``live`` of kind ``plain`` and :data:`SHARED_DEVICES` multi-allocatable ones of kind
       ``shared`` with 80Gi of ``memory``. Per interval a ResourceClaim whose one request selects with
       ``device.driver == "<driver>" && device.attributes["<driver>"].kind == "<kind>" && <k> >= 0``
       (``k`` counts up: a new expression every time), a random half of them on a shared device with a
       capacity request of ``<k>Ki`` memory (a new quantity string every time), and a Pod (tolerating
       :data:`FILL_TAINT_KEY`, selecting only the soak's group: it filters every Node of it) using it.
       Above ``live`` the oldest Pod is deleted, then its claim (its finalizer removed: the bed has no
       resourceclaim controller).
    4. **PersistentVolumes with node affinity** (``framework/memo.py`` PV_NODE_AFFINITY, per PV): a
       ``local`` PV with ``nodeAffinity`` on the dedicated slice Node's hostname, a PVC pre-bound to it
       (PV ``claimRef``, PVC ``volumeName`` and the bind-completed annotation, both statuses Bound:
       ``bench/bench_lib/workloads.py``'s way, the bed has no PV controller) and a Pod mounting the
       PVC. Above ``live`` the oldest Pod, PVC and PV are deleted (protection finalizers removed).
    5. **Preemption** (``framework/preemption.py`` VictimsMemo, one entry per node name): a round is
       a fresh 1-CPU Node (tainted :data:`FILL_TAINT_KEY`), a low-priority Pod of 700m pinned to it;
       once that is bound, a high-priority Pod of 700m pinned to it (two PriorityClasses made in
       :meth:`setup`), which py-scheduler can place only by preempting the first; once the preemptor
       is bound (or :data:`ROUND_TICKS` intervals passed) both Pods and the Node are deleted and the next round starts
       at once. A round takes 2-3 intervals.

    The dedicated slice Node (16 CPU / 64Gi, :data:`FILL_TAINT_KEY` taint) hosts the Pods of churns 3
    and 4. Every Node belongs to the soak's group (``env.node`` / ``env.all_nodes``: the invariants
    see them). ``count`` is the soak's churn counter (``"fill ..."`` names); an API error in a churn
    is logged once per churn (``count("fill API errors")`` every time) and that churn goes on.
    """

    def __init__(self, env: FaultEnv, rng: random.Random, count: Callable[[str], None],
                 log: Callable[[str], None] = print, *, interval: float = 2.0, live: int = 10) -> None:
        self.env = env
        self.rng = rng
        self.count = count
        self.log = log
        self.interval = interval
        self.live = max(1, live)
        self.tag = unique_name("fill")
        self.custom = client.CustomObjectsApi(env.api)
        self.sched = client.SchedulingV1Api(env.api)
        self.core = env.core
        self.low_class = f"{self.tag}-low"
        self.high_class = f"{self.tag}-high"
        self.slice_node = ""
        self._classes: list[str] = []  # PriorityClasses made
        self._cluster: list[tuple[str, str]] = []  # (plural, name) of resource.k8s.io objects made
        self._logged: set[str] = set()
        self._seq = 0
        self.unschedulable: deque[str] = deque()
        self.gpu_nodes: deque[str] = deque()
        self.gpu_draining: list[str] = []
        self.gpu_pods: deque[str] = deque()
        self.dra: deque[tuple[str, str]] = deque()  # (pod, claim)
        self.pv: deque[tuple[str, str, str]] = deque()  # (pod, pvc, pv)
        self.preemption: _Preemption | None = None
        self.preempt_nodes: set[str] = set()  # created and not yet deleted

    @property
    def driver(self) -> str:
        return f"{self.tag}.fill.example.com"

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    # -- setup ----------------------------------------------------------------------------------------
    async def setup(self) -> None:
        """The DeviceClass, the slice Node (DRA and PV Pods) and its ResourceSlice, the two
        PriorityClasses of the preemption churn."""
        for name, value in ((self.low_class, 10), (self.high_class, 100_000)):
            pc: Any = {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, "description": "py-scheduler soak fill churn"}
            self._classes.append(name)  # before: a cancelled create is still cleaned up
            await self.sched.create_priority_class(pc)
        self.slice_node = await self._node({"cpu": "16", "memory": "64Gi", "pods": "110"}, "slice")
        await self._create_cluster("deviceclasses", {
            "kind": "DeviceClass", "metadata": {"name": self.tag},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]}})
        # the spares (first in the slice) match no claim's selector: every selector is checked against them
        devices: list[Obj] = [{"name": f"spare-{i}", "attributes": {"kind": {"string": "spare"}}}
                              for i in range(SPARE_DEVICES)]
        devices += [{"name": f"plain-{i}", "attributes": {"kind": {"string": "plain"}}}
                    for i in range(min(self.live, 128 - SPARE_DEVICES - SHARED_DEVICES))]
        devices += [{"name": f"shared-{i}", "attributes": {"kind": {"string": "shared"}},
                     "capacity": {"memory": {"value": "80Gi"}}, "allowMultipleAllocations": True}
                    for i in range(SHARED_DEVICES)]
        await self._create_cluster("resourceslices", {
            "kind": "ResourceSlice", "metadata": {"name": f"{self.tag}-slice"},
            "spec": {"driver": self.driver, "nodeName": self.slice_node,
                     "pool": {"name": self.slice_node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}})

    async def _create_cluster(self, plural: str, obj: Obj) -> None:
        self._cluster.append((plural, obj["metadata"]["name"]))
        await self.custom.create_cluster_custom_object(G, V, plural, {"apiVersion": f"{G}/{V}", **obj})

    async def _node(self, alloc: dict[str, str], role: str) -> str:
        """A dedicated Node of the soak's group, tainted :data:`FILL_TAINT_KEY` from its creation on."""
        name = unique_name(f"flt-fill-{role}")
        self.env.nodes[name] = alloc
        self.env.all_nodes.add(name)
        await create_node(self.env.api, name, alloc,
                          labels={GROUP_LABEL: self.env.group, ROLE_LABEL: role},
                          taints=[{"key": FILL_TAINT_KEY, "value": role, "effect": "NoSchedule"}])
        return name

    def _pod(self, name: str, *, cpu: str = "100m", memory: str = "64Mi", gpus: int = 0,
             node_selector: dict[str, str] | None = None, extra_spec: Obj | None = None, tolerate: bool = True,
             annotations: dict[str, str] | None = None) -> Obj:
        spec = dict(extra_spec or {})
        if tolerate:
            spec["tolerations"] = [dict(TOLERATION)]
        return self.env.pod_body(name, cpu=cpu, memory=memory, gpus=gpus, node_selector=node_selector,
                                 annotations={FILL_ANNOTATION: self.tag, **(annotations or {})}, extra_spec=spec)

    # -- the run --------------------------------------------------------------------------------------
    async def run(self, until: float) -> None:
        """All five churns at once until ``time.monotonic() >= until``."""
        await asyncio.gather(*(self._loop(name, tick, until) for name, tick in (
            ("unschedulable", self._unschedulable), ("gpu", self._gpu), ("dra", self._dra),
            ("pv", self._pv), ("preemption", self._preempt))))

    async def _loop(self, name: str, tick: Callable[[], Awaitable[None]], until: float) -> None:
        while time.monotonic() < until:
            try:
                await tick()
            except _ERRORS as e:
                self.count("fill API errors")
                if name not in self._logged:
                    self._logged.add(name)
                    self.log(f"fill churn {name}: API error (logged once, the churn goes on): {_describe(e)}")
            await asyncio.sleep(self.interval)  # the churn's pace

    async def _delete_pod(self, name: str) -> None:
        await self.env.delete_pod(name)
        self.env.pods.discard(name)

    # 1. unschedulable Pods
    async def _unschedulable(self) -> None:
        while len(self.unschedulable) >= self.live:
            await self._delete_pod(self.unschedulable[0])
            self.unschedulable.popleft()
            self.count("fill unschedulable pods deleted")
        name = unique_name("fill-nowhere")
        await self.env.create(self._pod(name, node_selector={NOWHERE_LABEL: "true"}, tolerate=False,
                                        memory=f"{65536 + self._next()}Ki"))
        self.unschedulable.append(name)
        self.count("fill unschedulable pods created")

    # 2. GPU Nodes with fresh names
    async def _gpu(self) -> None:
        for node in list(self.gpu_draining):  # cordoned one interval ago
            await self._delete_node_and_pods(node)
            self.gpu_draining.remove(node)
            self.count("fill GPU nodes removed")
        if len(self.gpu_nodes) >= self.live:
            old = self.gpu_nodes[0]
            try:  # cordoned first: no Pod is bound to it while its Pods are deleted
                await self.core.patch_node(old, {"spec": {"unschedulable": True}})
            except ApiException as e:
                if e.status != 404:
                    raise
            self.gpu_nodes.popleft()
            self.gpu_draining.append(old)
        self.gpu_nodes.append(await self.env.node(gpu=True, labels={GPU_LABEL: "true"}))
        self.count("fill GPU nodes added")
        while len(self.gpu_pods) >= self.live:
            await self._delete_pod(self.gpu_pods[0])
            self.gpu_pods.popleft()
        name = unique_name("fill-gpu-pod")
        # a new per-GPU memory minimum each time (30 GB and k kB; an A100 here has 40960 MiB)
        await self.env.create(self._pod(name, gpus=1, node_selector={GPU_LABEL: "true"}, tolerate=False,
                                        annotations={MEM_ANNOTATION: f"{30 + self._next() / 10**6:.6f}"}))
        self.gpu_pods.append(name)
        self.count("fill GPU pods created")

    async def _delete_node_and_pods(self, node: str) -> None:
        """Delete the Pods bound to ``node`` (whoever made them: the bed has no PodGC), then it."""
        pods = await self.core.list_namespaced_pod("default", field_selector=f"spec.nodeName={node}")
        for p in pods.items:
            await self._delete_pod(p.metadata.name)
            if p.metadata.name in self.gpu_pods:
                self.gpu_pods.remove(p.metadata.name)
        await self.env.delete_node(node)

    # 3. DRA claims with distinct CEL selectors
    async def _dra(self) -> None:
        while len(self.dra) >= self.live:
            pod, claim = self.dra[0]
            await self._delete_pod(pod)
            await self._delete_claim(claim)
            self.dra.popleft()
            self.count("fill DRA pods deleted")
        k = self._next()
        shared = self.rng.random() < 0.5
        expr = f'device.driver == "{self.driver}" && device.attributes["{self.driver}"].kind == ' \
               f'"{"shared" if shared else "plain"}" && {k} >= 0'
        request: Obj = {"deviceClassName": self.tag, "allocationMode": "ExactCount", "count": 1,
                        "selectors": [{"cel": {"expression": expr}}]}
        if shared:
            request["capacity"] = {"requests": {"memory": f"{k}Ki"}}
        claim, pod = f"{self.tag}-claim-{k}", f"{self.tag}-dra-{k}"
        self.dra.append((pod, claim))  # from here on deleted with the others (also when a create fails)
        await self.custom.create_namespaced_custom_object(G, V, "default", "resourceclaims", {
            "apiVersion": f"{G}/{V}", "kind": "ResourceClaim", "metadata": {"name": claim},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}}})
        await self.env.create(self._pod(pod, extra_spec={
            "resourceClaims": [{"name": "c", "resourceClaimName": claim}]}))
        self.count("fill DRA claims created")

    async def _delete_claim(self, name: str) -> None:
        try:
            # a JSON patch (the client's content type for custom objects): the scheduler's delete protection
            await self.custom.patch_namespaced_custom_object(G, V, "default", "resourceclaims", name, [
                {"op": "add", "path": "/metadata/finalizers", "value": []}])
            await self.custom.delete_namespaced_custom_object(G, V, "default", "resourceclaims", name)
        except ApiException as e:
            if e.status != 404:
                raise

    # 4. PVs with node affinity
    async def _pv(self) -> None:
        while len(self.pv) >= self.live:
            await self._delete_pv_set(*self.pv[0])
            self.pv.popleft()
            self.count("fill PV pods deleted")
        k = self._next()
        pv, pvc, pod = f"{self.tag}-pv-{k}", f"{self.tag}-pvc-{k}", f"{self.tag}-pvpod-{k}"
        claim_body: Any = {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": pvc, "namespace": "default", "annotations": {BIND_COMPLETED: "true"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "volumeName": pv, "storageClassName": ""}}
        self.pv.append((pod, pvc, pv))  # from here on deleted with the others (also when a create fails)
        await self.core.create_namespaced_persistent_volume_claim("default", claim_body)
        pv_body: Any = {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "local": {"path": f"/mnt/fill/{k}"},
                     "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "default",
                                  "name": pvc},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [self.slice_node]}]}]}}}}
        await self.core.create_persistent_volume(pv_body)
        # the API server resets statuses on create: written through /status after
        await self.core.patch_persistent_volume_status(pv, {"status": {"phase": "Bound"}})
        await self.core.patch_namespaced_persistent_volume_claim_status(pvc, "default", {"status": {
            "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}})
        await self.env.create(self._pod(pod, extra_spec={
            "volumes": [{"name": "vol", "persistentVolumeClaim": {"claimName": pvc}}]}))
        self.count("fill PV pods created")

    async def _delete_pv_set(self, pod: str, pvc: str, pv: str) -> None:
        await self._delete_pod(pod)
        unprotect: Any = {"metadata": {"finalizers": None}}  # no controller removes them on the bed
        with contextlib.suppress(NotFound):
            await _absent_ok(self.core.patch_namespaced_persistent_volume_claim(pvc, "default", unprotect))
            await _absent_ok(self.core.delete_namespaced_persistent_volume_claim(pvc, "default"))
        with contextlib.suppress(NotFound):
            await _absent_ok(self.core.patch_persistent_volume(pv, unprotect))
            await _absent_ok(self.core.delete_persistent_volume(pv))

    # 5. preemption
    async def _preempt(self) -> None:
        r = self.preemption
        if r is not None:
            r.ticks += 1
            if r.ticks < ROUND_TICKS and not await self._round_over(r):
                return
            if r.ticks >= ROUND_TICKS:
                self.count("fill preemption rounds abandoned")
            await self._end_round(r)
        node = await self._node({"cpu": "1", "memory": "2Gi", "pods": "110"}, "preempt")
        self.preempt_nodes.add(node)
        r = self.preemption = _Preemption(node, unique_name("fill-victim"))
        await self.env.create(self._pod(r.low, cpu="700m", extra_spec={
            "priorityClassName": self.low_class, "nodeSelector": self._on(node)}))
        self.count("fill preemption rounds")

    def _on(self, node: str) -> dict[str, str]:
        return {GROUP_LABEL: self.env.group, "kubernetes.io/hostname": node}

    async def _round_over(self, r: _Preemption) -> bool:
        """Advance round ``r``: the preemptor created once the low-priority Pod is bound; True once
        the preemptor is bound (or a Pod of the round is gone: nothing more to see)."""
        try:
            low = await self.core.read_namespaced_pod(r.low, "default")
        except ApiException as e:
            if e.status != 404:
                raise
            if not r.high:  # never bound, deleted by somebody else
                return True
            if r.low in self.env.pods:
                self.env.pods.discard(r.low)
                self.count("fill preemption victims deleted")
        else:
            if not r.high:
                if low.spec.node_name:
                    r.high = unique_name("fill-preemptor")
                    await self.env.create(self._pod(r.high, cpu="700m", extra_spec={
                        "priorityClassName": self.high_class, "nodeSelector": self._on(r.node)}))
                    self.count("fill preemptors created")
                return False
        try:
            high = await self.core.read_namespaced_pod(r.high, "default")
        except ApiException as e:
            if e.status != 404:
                raise
            return True
        if high.spec.node_name:
            self.count("fill preemptors bound")
            return True
        return False

    async def _end_round(self, r: _Preemption) -> None:
        """Delete the round's Pods, then its Node (with whatever else is bound to it)."""
        for p in (r.high, r.low):
            if p:
                await self._delete_pod(p)
        await self._delete_node_and_pods(r.node)
        self.preempt_nodes.discard(r.node)
        self.preemption = None

    # -- the end --------------------------------------------------------------------------------------
    def pod_names(self) -> set[str]:
        """The live Pods this churn created (not yet deleted by it)."""
        out = {*self.unschedulable, *self.gpu_pods, *(p for p, _ in self.dra), *(p for p, _, _ in self.pv)}
        if self.preemption is not None:
            out.update(p for p in (self.preemption.low, self.preemption.high) if p)
        return out

    async def cleanup(self) -> None:
        """Delete whatever is left (best effort: API errors are ignored)."""

        async def quietly(aw: Awaitable[Any]) -> None:
            with contextlib.suppress(*_ERRORS):
                await aw

        for p in self.pod_names():
            await quietly(self._delete_pod(p))
        for _, claim in self.dra:
            await quietly(self._delete_claim(claim))
        for pod, pvc, pv in self.pv:
            await quietly(self._delete_pv_set(pod, pvc, pv))
        for node in [*self.gpu_nodes, *self.gpu_draining, *self.preempt_nodes, self.slice_node]:
            if node:
                await quietly(self._delete_node_and_pods(node))
        for plural, name in reversed(self._cluster):
            await quietly(self.custom.delete_cluster_custom_object(G, V, plural, name))
        for name in self._classes:
            await quietly(self.sched.delete_priority_class(name))
        self.unschedulable.clear()
        self.gpu_pods.clear()
        self.dra.clear()
        self.pv.clear()
        self.gpu_nodes.clear()
        self.gpu_draining.clear()
        self.preempt_nodes.clear()
        self.preemption = None
        self._cluster.clear()
        self._classes.clear()


class NotFound(Exception):
    """A 404 from :func:`_absent_ok`."""


async def _absent_ok(aw: Awaitable[Any]) -> None:
    """Await ``aw``; a 404 raises :class:`NotFound` (the object is gone: nothing more to do with it)."""
    try:
        await aw
    except ApiException as e:
        if e.status == 404:
            raise NotFound from None
        raise


def _describe(e: BaseException) -> str:
    if isinstance(e, ApiException):
        return f"{e.status} {e.reason}: {str(e.body)[:300]}"
    return repr(e)
