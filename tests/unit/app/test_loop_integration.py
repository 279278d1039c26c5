"""The live loop with the plugins that landed after it, on the real default profile and a fake API:
nominated Pods in Filter (the queue's nominator), VolumeBinding / DynamicResources Pods that would
need PreBind's API writes (failed, unreserved, never bound, requeued by their plugin's events), and
the GPU gauges of the Housekeeping tick."""

from __future__ import annotations

import copy
from typing import Any

from py_scheduler.app.scheduling.loop import Housekeeping
from py_scheduler.app.telemetry import metrics as m
from py_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from py_scheduler.framework.types import PodInfo
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q
from tests.unit.app.test_loop import Harness
from tests.unit.plugins import test_dynamic_resources as dra
from tests.unit.plugins import test_volume_helpers as vol

Obj = dict[str, Any]


def _binds(h: Harness) -> list[tuple[str, str]]:
    return [(c[1][0], c[1][1]) for c in h.kube.calls if c[0] == "bind"]


def _failed(h: Harness, name: str) -> list[str]:
    return [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == name]


# -- nominated Pods ------------------------------------------------------------------------------------
async def test_lower_priority_pod_cannot_take_the_room_preemption_freed() -> None:
    h = Harness()
    h.node("n1", cpu="2")
    h.node("n2", cpu="1")
    victim = {"metadata": {"name": "victim", "namespace": "default", "uid": "uid-victim"},
              "spec": {"nodeName": "n1", "priority": 0, "schedulerName": "py-scheduler",
                       "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
              "status": {"phase": "Running"}}
    h.cache.add_pod(victim)
    high = h.pod("high", cpu="2", priority=100)

    qpi = h.queue.pop_nowait()
    assert qpi is not None and qpi.key == "default/high"
    h.loop.schedule_one(qpi)  # preemption: n1 nominated, the victim's eviction runs in the background
    assert [p.key for p in h.queue.nominator.get("n1", [])] == ["default/high"]
    queued = h.queue.get("default", "high")
    assert queued is not None and queued.pod["status"]["nominatedNodeName"] == "n1"
    assert "nominatedNodeName" not in (high.get("status") or {})  # the informer's object is not touched

    h.cache.remove_pod(victim)  # the watch shows the victim gone: n1 is empty
    h.pod("low", cpu="1", priority=0)
    qpi = h.queue.pop_nowait()
    assert qpi is not None and qpi.key == "default/low"  # high waits for its preemption to finish
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    # Without the nominator, LeastAllocated would put low on the empty 2-CPU n1.
    assert _binds(h) == [("default/low", "n2")]
    assert h.kube.deleted == [("default/victim", "uid-victim")]
    low_bound = {**h.pods["default/low"], "spec": {**h.pods["default/low"]["spec"], "nodeName": "n2"}}
    h.cache.add_pod(low_bound)
    h.queue.delete(low_bound)
    h.pods["default/low"] = low_bound

    # The victim's deletion event moves high (its evictions are over: PreEnqueue lets it in); it goes to
    # its nominated node and leaves the nominator.
    assert h.queue.where("default", "high") == UNSCHEDULABLE_Q  # not activated by the preemption itself
    h.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, victim, None)
    h.queue.flush_backoff_q_completed()
    for q in list(h.queue._backoff_q.list()):  # backoff expiry without waiting (test clock)
        q.backoff_expiration = 0.0
    h.queue.flush_backoff_q_completed()
    await h.cycle()
    assert _binds(h)[-1] == ("default/high", "n1")
    assert h.queue.nominator.get("n1") is None and len(h.queue.nominator) == 0


async def test_nominated_pod_of_higher_priority_blocks_its_node() -> None:
    h = Harness()
    h.node("n1", cpu="2")
    p = h.pod("nominated", cpu="2", priority=100)
    new = {**p, "metadata": {**p["metadata"], "resourceVersion": "2"}, "status": {"nominatedNodeName": "n1"}}
    h.pods["default/nominated"] = new
    h.queue.update(p, new)
    assert [pi.key for pi in h.queue.nominator.get("n1", [])] == ["default/nominated"]
    qpi = h.queue.pop_nowait()
    assert qpi is not None and qpi.key == "default/nominated"
    qpi.unschedulable_plugins = frozenset({"NodeResourcesFit"})  # waiting in the unschedulable Pods
    h.queue.add_unschedulable_if_not_present(qpi)
    h.pod("low", cpu="1", priority=10)
    await h.cycle()
    assert _binds(h) == []
    assert _failed(h, "low") == ["0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
                                 "1 No preemption victims found for incoming pod."]
    # A nominated Pod of lower priority does not count (addGENominatedPods: priority >= the Pod's).
    newer = {**new, "metadata": {**new["metadata"], "resourceVersion": "3"}, "spec": {**new["spec"], "priority": 5}}
    h.pods["default/nominated"] = newer
    h.queue.update(new, newer)
    h.queue.activate([h.pods["default/low"]])
    qpi = h.queue.pop_nowait()
    assert qpi is not None and qpi.key == "default/low"
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    assert _binds(h) == [("default/low", "n1")]


# -- VolumeBinding -------------------------------------------------------------------------------------
async def test_unbound_wait_for_first_consumer_claim_failing_pre_bind_is_unreserved_to_backoff() -> None:
    """A failing VolumeBinding PreBind (here: this harness's Handle has no object lister to wait on)
    makes the binding cycle unreserve (the binder's assumed claim reverted), forget the Pod and send it
    to backoff with upstream's ``running PreBind plugin`` message, never binding it. The successful
    path (claims bound through the API) is in tests/unit/plugins/test_volume_binding_prebind.py and
    tests/e2e/test_volume_binding.py."""
    h = Harness()
    h.node("n1")
    h.cache.objects.upsert("StorageClass", vol.storage_class("wffc"))
    claim = vol.pvc("data", sc="wffc")
    h.cache.objects.upsert("PersistentVolumeClaim", claim)
    h.pod("a", volumes=[vol.pvc_vol("v", "data")])
    await h.cycle()
    assert _binds(h) == []
    (note,) = _failed(h, "a")
    assert note.startswith('running PreBind plugin "VolumeBinding": ')
    assert h.cache.pod_count() == 0
    # Unreserve reverted the binder's assumed claim (else the next Pod would see it provisioned on n1).
    assert h.fw.plugins["VolumeBinding"].binder.pvc_cache.assumed == {}
    assert h.queue.where("default", "a") == BACKOFF_Q


async def test_bound_claim_schedules_on_the_volume_node() -> None:
    h = Harness()
    h.node("n1")
    h.node("n2")
    h.cache.objects.upsert("PersistentVolume", vol.pv("pv1", claim=("default", "data"), affinity=[
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]))
    h.cache.objects.upsert("PersistentVolumeClaim", vol.pvc("data", volume="pv1", bound=True))
    h.pod("a", volumes=[vol.pvc_vol("v", "data")])
    await h.cycle()
    assert _binds(h) == [("default/a", "n2")] and _failed(h, "a") == []


# -- DynamicResources ----------------------------------------------------------------------------------
async def test_claim_needing_allocation_is_written_at_pre_bind_then_bound() -> None:
    """DynamicResources' PreBind writes the claim (finalizer, then allocation and reservation
    through the status subresource) before DefaultBinder binds the Pod."""
    h = Harness()
    h.node("n1")
    h.cache.objects.upsert("DeviceClass", dra.dclass("gpu", [f'device.driver == "{dra.G}"']))
    h.cache.objects.upsert("ResourceSlice", dra.rslice("s1", dra.G, "p1", node="n1", devices=[dra.dev("g0")]))
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c"
    h.kube.put_object(path, dra.claim("c", [{"name": "r", "exactly": dra.ex()}]))
    h.cache.objects.upsert("ResourceClaim", copy.deepcopy(h.kube.objects[path]))  # the informer's copy
    h.pod("a", resourceClaims=dra.uses("c"))
    await h.cycle()
    assert _binds(h) == [("default/a", "n1")] and _failed(h, "a") == []
    stored = h.kube.objects[path]
    assert stored["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert stored["status"]["allocation"]["devices"]["results"] == [
        {"request": "r", "driver": dra.G, "pool": "p1", "device": "g0"}]
    assert stored["status"]["reservedFor"] == [{"resource": "pods", "name": "a", "uid": "uid-a"}]
    writes = [c for c in h.kube.calls if c[0] in ("put", "bind")]
    assert [w[0] for w in writes] == ["put", "put", "bind"]  # finalizer, status, then the Binding
    # Until the informer shows the write, the devices stay in flight (never offered twice).
    assert h.fw.plugins["DynamicResources"].in_flight_claims() == ["default/c"]


async def test_claim_write_refused_unreserves_and_never_binds() -> None:
    """A claim the API no longer has: PreBind fails with upstream's message, the binding cycle
    unreserves (devices released), forgets the Pod and sends it to backoff."""
    h = Harness()
    h.node("n1")
    h.cache.objects.upsert("DeviceClass", dra.dclass("gpu", [f'device.driver == "{dra.G}"']))
    h.cache.objects.upsert("ResourceSlice", dra.rslice("s1", dra.G, "p1", node="n1", devices=[dra.dev("g0")]))
    h.cache.objects.upsert("ResourceClaim", dra.claim("c", [{"name": "r", "exactly": dra.ex()}]))
    h.pod("a", resourceClaims=dra.uses("c"))
    await h.cycle()
    assert _binds(h) == []
    (message,) = _failed(h, "a")
    assert message.startswith("running PreBind plugin \"DynamicResources\": add finalizer to claim default/c: ")
    assert h.fw.plugins["DynamicResources"].in_flight_claims() == []  # Unreserve released the devices
    assert h.queue.where("default", "a") == BACKOFF_Q
    assert h.cache.pod_count() == 0


# -- GPU gauges ----------------------------------------------------------------------------------------
A100 = "NVIDIA-A100-SXM4-40GB"


def _gauge(name: str, node: str) -> float | None:
    return m.REGISTRY.get_sample_value(name, {"node": node, "model": A100})


async def test_housekeeping_publishes_gpu_gauges_from_a_fresh_snapshot() -> None:
    h = Harness()
    h.cache.add_node({"metadata": {"name": "g1", "labels": {"kubernetes.io/hostname": "g1",
                                                            "nvidia.com/gpu.product": A100,
                                                            "nvidia.com/gpu.memory": "40960"}},
                      "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110",
                                                 "nvidia.com/gpu": "4"}}})
    hk = Housekeeping(h.cache, h.queue, snapshot=h.loop.snapshot, frameworks={"py-scheduler": h.fw})
    hk.tick()
    assert (_gauge("py_scheduler_gpu_allocated", "g1"), _gauge("py_scheduler_gpu_free", "g1")) == (0, 4)
    h.pod("train", containers=[{"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "3"},
                                                           "limits": {"nvidia.com/gpu": "3"}}}])
    await h.cycle()
    assert _binds(h) == [("default/train", "g1")]
    # The loop's snapshot was taken before the Pod was assumed; the tick brings it up to date.
    hk.tick()
    assert (_gauge("py_scheduler_gpu_allocated", "g1"), _gauge("py_scheduler_gpu_free", "g1")) == (3, 1)
    h.cache.remove_node(h.cache.node_info("g1").node)  # type: ignore[union-attr]
    hk.tick()
    assert _gauge("py_scheduler_gpu_allocated", "g1") is None


def test_bare_nominated_pod_when_not_queued() -> None:
    h = Harness()
    h.pod("a", priority=1)
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.queue.add_nominated_pod(qpi.pod_info, "n1")
    (pi,) = h.queue.nominator["n1"]
    assert isinstance(pi, PodInfo) and (pi.key, pi.uid, pi.priority) == ("default/a", "uid-a", 0)


async def test_a_pre_filter_that_narrows_the_nodes_is_the_pods_rejector() -> None:
    """``findNodesThatFitPod``: ``diagnosis.UnschedulablePlugins`` are the PreFilter plugins whose result
    narrowed the nodes. A Pod whose required node affinity names only a Node that does not exist
    (``matchFields metadata.name``) waits with NodeAffinity as its rejector, as upstream's, instead of
    none (which made every event requeue it after its backoff)."""
    h = Harness()
    h.node("n1")
    h.pod("p", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["nowhere"]}]}]}}})
    await h.cycle()
    qpi = h.queue.get("default", "p")
    assert qpi is not None and qpi.unschedulable_plugins == frozenset({"NodeAffinity"})
    assert _failed(h, "p") == ["0/1 nodes are available: 1 node(s) didn't satisfy plugin(s) [NodeAffinity]. "
                               "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."]


async def test_a_pod_whose_claim_does_not_exist_waits_silently_at_pre_enqueue() -> None:
    """DynamicResources' ``PreEnqueue`` (``foreachPodResourceClaim``): a Pod naming a ResourceClaim
    that does not exist, or a template claim not generated yet, is never tried (no event, no
    condition) until the claim appears; then the claim's add event lets it in."""
    from py_scheduler.framework.events import ActionType, ClusterEvent, Resource
    from py_scheduler.queue.scheduling_queue import GATED

    class Claims:
        def __init__(self) -> None:
            self.claims: dict[str, Obj] = {}

        def get(self, kind: str, namespace: str, name: str) -> Obj | None:
            return self.claims.get(f"{namespace}/{name}") if kind == "ResourceClaim" else None

        def list(self, kind: str) -> list[Obj]:
            return list(self.claims.values()) if kind == "ResourceClaim" else []

    objs = Claims()
    h = Harness(objects=objs)
    h.node("n1")
    h.pod("named", resourceClaims=[{"name": "r", "resourceClaimName": "c-named"}])
    h.pod("templated", resourceClaims=[{"name": "r", "resourceClaimTemplateName": "t"}])
    assert h.queue.pop_nowait() is None
    assert [h.queue.where("default", n) for n in ("named", "templated")] == [GATED, GATED]
    for n in ("named", "templated"):
        q = h.queue.get("default", n)
        assert q is not None and q.gating_plugin == "DynamicResources"
    assert h.kube.events == [] and h.kube.status_patches == []
    c = dra.claim("c-named", [{"name": "r", "exactly": dra.ex()}])
    objs.claims["default/c-named"] = c
    h.queue.move_all_to_active_or_backoff(ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.ADD), None, c)
    qpi = h.queue.pop_nowait()
    assert qpi is not None and qpi.key == "default/named"
    assert h.queue.where("default", "templated") == GATED
