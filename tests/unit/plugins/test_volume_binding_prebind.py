"""VolumeBinding PreBindPreFlight / PreBind (upstream ``volume_binding.go`` ``PreBind`` and ``binder.go``
``BindPodVolumes`` / ``bindAPIUpdate`` / ``checkBindings``): the API writes, the wait for the PV
controller, and every failure upstream retries on, with the assume caches reverted.

The API is a small in-memory store with resourceVersion preconditions (:class:`FakeAPI`), serving both
the Handle's client and its object lister; a test plays the PV controller / provisioner by editing it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.handle import APIConflict, APINotFound, Handle
from py_scheduler.framework.interfaces import PreBindPlugin
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins.helpers import storage as st
from py_scheduler.plugins.volume_binding import STATE_KEY, VolumeBinding, VolumeBindingArgs
from tests.unit.plugins.plain_handle import plain_handle
from tests.unit.plugins.volume_objects import Obj, node, pod, pv, pvc, pvc_vol, storage_class

NODES = [node("n1"), node("n2")]
KIND_BY_SEGMENT = {"persistentvolumes": "PersistentVolume", "persistentvolumeclaims": "PersistentVolumeClaim"}


class FakeAPI:
    """The API server's store for the kinds PreBind touches, with optimistic concurrency; doubles as
    the informer state (``ObjectLister``). ``on_update(kind, obj)`` runs after each accepted PUT."""

    def __init__(self, objs: Iterable[Obj]) -> None:
        self.store: dict[tuple[str, str, str], Obj] = {}
        self.rv = 10
        self.writes: list[tuple[str, str]] = []
        self.on_update: Callable[[str, Obj], None] | None = None
        for o in objs:
            self.put(o)

    def put(self, obj: Obj) -> Obj:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.store[(obj["kind"], st.namespace(obj) if obj["kind"] in ("Pod", "PersistentVolumeClaim") else "",
                    st.name(obj))] = obj
        return obj

    # ObjectLister
    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.store.get((kind, namespace, name))

    def list(self, kind: str) -> list[Obj]:
        return [o for (k, _, _), o in self.store.items() if k == kind]

    # APIClient (update is all PreBind uses)
    async def update(self, path: str, obj: Obj) -> Obj:
        parts = path.strip("/").split("/")
        kind = KIND_BY_SEGMENT[parts[-2]]
        ns = parts[3] if "namespaces" in parts else ""
        cur = self.get(kind, ns, parts[-1])
        if cur is None:
            raise APINotFound(404, "NotFound", f'{parts[-2]} "{parts[-1]}" not found')
        if st.resource_version(cur) != st.resource_version(obj):
            raise APIConflict(409, "Conflict", f'Operation cannot be fulfilled on {parts[-2]} "{parts[-1]}": the '
                                               "object has been modified; please apply your changes to the "
                                               "latest version and try again")
        self.writes.append((kind, parts[-1]))
        stored = self.put(obj)
        if self.on_update is not None:
            self.on_update(kind, stored)
        return copy.deepcopy(stored)

    async def patch(self, path: str, patch: Obj, content_type: str = "") -> Obj:
        raise AssertionError("PreBind only PUTs")


def pv_controller(api: FakeAPI) -> Callable[[str, Obj], None]:
    """What kube-controller-manager's PV binder (plus an external provisioner) does after PreBind's
    writes, done at once: a PV with a claimRef binds its claim; a claim with ``selected-node`` gets a PV
    provisioned with that node's affinity and is bound to it."""

    def bind(claim: Obj, volume: Obj) -> None:
        c = copy.deepcopy(api.get("PersistentVolumeClaim", st.namespace(claim), st.name(claim)))
        assert c is not None
        c["spec"]["volumeName"] = st.name(volume)
        c["metadata"].setdefault("annotations", {})[st.ANN_BIND_COMPLETED] = "yes"
        c["status"] = {"phase": "Bound"}
        api.put(c)
        v = copy.deepcopy(api.get("PersistentVolume", "", st.name(volume)))
        assert v is not None
        v["spec"]["claimRef"] = {**v["spec"].get("claimRef", {}), "uid": c["metadata"]["uid"]}
        v["status"] = {"phase": "Bound"}
        api.put(v)

    def on_update(kind: str, obj: Obj) -> None:
        if kind == "PersistentVolume":
            ref = obj["spec"]["claimRef"]
            claim = api.get("PersistentVolumeClaim", ref["namespace"], ref["name"])
            assert claim is not None
            bind(claim, obj)
        elif st.ANN_SELECTED_NODE in st.annotations_of(obj):
            sel = st.annotations_of(obj)[st.ANN_SELECTED_NODE]
            new = pv(f"pvc-{st.name(obj)}", "1Gi", st.claim_class(obj), claim=(st.namespace(obj), st.name(obj)),
                     affinity=[{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                      "values": [sel]}]}])
            bind(obj, api.put(new))

    return on_update


def setup(objs: list[Obj], p: Obj, timeout: int = 5) -> tuple[FakeAPI, VolumeBinding, Snapshot]:
    api = FakeAPI([*NODES, *objs, p])
    cobj = ClusterObjects()
    for (kind, _, _), o in api.store.items():
        if kind not in ("Pod", "Node"):
            cobj.upsert(kind, o)
    snap = Snapshot.from_objects(NODES, [], cobj)
    pl = VolumeBinding.create({"bindTimeoutSeconds": timeout}, Handle.detached(objects=api, client=api))  # type: ignore[arg-type]
    pl.bind_poll_interval = 0.01
    return api, pl, snap


def reserve(pl: VolumeBinding, snap: Snapshot, p: Obj, node_name: str) -> tuple[CycleState, PodInfo]:
    state = CycleState(snap)
    pi = PodInfo(p)
    _, s = pl.pre_filter(state, pi, snap.node_info_list)
    assert s.is_success(), s
    ni = next(n for n in snap.node_info_list if n.name == node_name)
    assert pl.filter(state, pi, ni).is_success()
    assert pl.reserve(state, pi, node_name).is_success()
    return state, pi


def no_provisioner() -> Obj:
    return storage_class("local", provisioner="kubernetes.io/no-provisioner")


def test_is_a_pre_bind_plugin_and_skips_bound_claims() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    _, pl, snap = setup([pv("p1", claim=("default", "c1")), pvc("c1", volume="p1", bound=True)], p)
    assert isinstance(pl, PreBindPlugin)
    state, _ = reserve(pl, snap, p, "n1")
    assert pl.pre_bind_pre_flight(state, PodInfo(p), "n1").code == Code.SKIP
    # A Pod without claims skips too.
    q = pod("b")
    state_b = CycleState(snap)
    pl.pre_filter(state_b, PodInfo(q), snap.node_info_list)
    assert pl.reserve(state_b, PodInfo(q), "n1").is_success()
    assert pl.pre_bind_pre_flight(state_b, PodInfo(q), "n1").code == Code.SKIP


async def test_static_binding_writes_claim_ref_and_waits_for_the_pv_controller() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([no_provisioner(), pvc("c1", sc="local"), pv("p1", "2Gi", "local")], p)
    api.on_update = pv_controller(api)
    state, pi = reserve(pl, snap, p, "n1")
    assert pl.pre_bind_pre_flight(state, pi, "n1").is_success()
    status = await pl.pre_bind(state, pi, "n1")
    assert status.is_success(), status
    assert api.writes == [("PersistentVolume", "p1")]
    stored = api.get("PersistentVolume", "", "p1")
    assert stored is not None and stored["spec"]["claimRef"]["name"] == "c1"
    assert st.annotations_of(stored)[st.ANN_BOUND_BY_CONTROLLER] == "yes"
    claim = api.get("PersistentVolumeClaim", "default", "c1")
    assert claim is not None and claim["spec"]["volumeName"] == "p1"


async def test_dynamic_provisioning_annotates_the_claim_with_the_node() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([storage_class("w", provisioner="csi.example.com"), pvc("c1", sc="w")], p)
    api.on_update = pv_controller(api)
    state, pi = reserve(pl, snap, p, "n2")
    assert (await pl.pre_bind(state, pi, "n2")).is_success()
    assert api.writes == [("PersistentVolumeClaim", "c1")]
    claim = api.get("PersistentVolumeClaim", "default", "c1")
    assert claim is not None and st.annotations_of(claim)[st.ANN_SELECTED_NODE] == "n2"
    assert claim["spec"]["volumeName"] == "pvc-c1"


async def test_waits_while_the_informer_has_not_seen_the_write() -> None:
    """An informer older than our own write keeps the wait going (resourceVersion comparison)."""
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([no_provisioner(), pvc("c1", sc="local"), pv("p1", "2Gi", "local")], p, timeout=1)
    stale: dict[str, Obj] = {}

    class LaggingLister:
        def get(self, kind: str, namespace: str, name: str) -> Obj | None:
            return stale.get(name) or api.get(kind, namespace, name)

        def list(self, kind: str) -> list[Obj]:
            return api.list(kind)

    def controller(kind: str, obj: Obj) -> None:
        pv_controller(api)(kind, obj)
        old = copy.deepcopy(obj)
        old["metadata"]["resourceVersion"] = "1"
        stale["p1"] = old  # the watch has not delivered the PV yet

    api.on_update = controller
    pl.handle = Handle.detached(objects=LaggingLister(), client=api)  # type: ignore[arg-type]
    pl.args = VolumeBindingArgs(bind_timeout_seconds=1)
    state, pi = reserve(pl, snap, p, "n1")
    task = asyncio.create_task(pl.pre_bind(state, pi, "n1"))
    await asyncio.sleep(0.05)
    assert not task.done()
    stale.clear()
    assert (await asyncio.wait_for(task, 2)).is_success()


async def test_conflict_fails_and_unreserve_frees_the_pv_for_the_next_pod() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([no_provisioner(), pvc("c1", sc="local"), pvc("c2", sc="local"),
                           pv("p1", "2Gi", "local")], p)
    state, pi = reserve(pl, snap, p, "n1")
    stored = api.get("PersistentVolume", "", "p1")
    assert stored is not None
    api.put(stored)  # someone else changed p1 since Filter read it
    status = await pl.pre_bind(state, pi, "n1")
    assert status.code == Code.ERROR
    assert status.reasons == ['Operation cannot be fulfilled on persistentvolumes "p1": the object has been modified; '
                              "please apply your changes to the latest version and try again"]
    pl.unreserve(state, pi, "n1")
    # The assumed claimRef is gone: another claim can take p1 (from the snapshot's version).
    q = pod("b", [pvc_vol("v", "c2")])
    state_b = CycleState(snap)
    pl.pre_filter(state_b, PodInfo(q), snap.node_info_list)
    assert pl.filter(state_b, PodInfo(q), snap.node_info_list[0]).is_success()


async def test_pv_deleted_between_reserve_and_pre_bind() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([no_provisioner(), pvc("c1", sc="local"), pv("p1", "2Gi", "local")], p)
    state, pi = reserve(pl, snap, p, "n1")
    del api.store[("PersistentVolume", "", "p1")]
    status = await pl.pre_bind(state, pi, "n1")
    assert status.code == Code.ERROR and status.reasons == ['persistentvolumes "p1" not found']
    assert api.writes == []


async def test_timeout_when_nobody_provisions() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([storage_class("w", provisioner="csi.example.com"), pvc("c1", sc="w")], p)
    pl.args = VolumeBindingArgs(bind_timeout_seconds=0)
    state, pi = reserve(pl, snap, p, "n1")
    status = await pl.pre_bind(state, pi, "n1")
    assert status.code == Code.ERROR and status.reasons == ["binding volumes: context deadline exceeded"]
    # The write stays (upstream does not roll back); the retry sees the claim's selected node.
    claim = api.get("PersistentVolumeClaim", "default", "c1")
    assert claim is not None and st.annotations_of(claim)[st.ANN_SELECTED_NODE] == "n1"


@pytest.mark.parametrize(("change", "reason"), [
    (lambda api: api.store.pop(("Pod", "default", "a")),
     'binding volumes: pod does not exist any more: pods "a" not found'),
    (lambda api: api.store.pop(("PersistentVolumeClaim", "default", "c1")),
     'binding volumes: failed to check provisioning pvc: persistentvolumeclaims "default/c1" not found'),
    (lambda api: api.put({**(c := copy.deepcopy(api.get("PersistentVolumeClaim", "default", "c1"))),
                          "metadata": {**c["metadata"], "annotations": {"x": "y"}}}),
     'binding volumes: provisioning failed for PVC "c1"'),
    (lambda api: api.store.pop(("Node", "", "n1")),
     'binding volumes: failed to get node "n1": nodes "n1" not found'),
])
async def test_conditions_that_need_a_new_attempt(change: Callable[[FakeAPI], Any], reason: str) -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([storage_class("w", provisioner="csi.example.com"), pvc("c1", sc="w")], p)
    api.on_update = lambda kind, obj: change(api)
    state, pi = reserve(pl, snap, p, "n1")
    status = await pl.pre_bind(state, pi, "n1")
    assert status.code == Code.ERROR and status.reasons == [reason]


async def test_claim_ref_reset_by_the_pv_controller() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    api, pl, snap = setup([no_provisioner(), pvc("c1", sc="local"), pv("p1", "2Gi", "local")], p)

    def unbind(kind: str, obj: Obj) -> None:
        o = copy.deepcopy(obj)
        del o["spec"]["claimRef"]
        api.put(o)

    api.on_update = unbind
    state, pi = reserve(pl, snap, p, "n1")
    status = await pl.pre_bind(state, pi, "n1")
    assert status.reasons == ['binding volumes: ClaimRef got reset for pv "p1"']


async def test_without_a_client_pre_bind_is_an_error_not_a_crash() -> None:
    p = pod("a", [pvc_vol("v", "c1")])
    _, _, snap = setup([storage_class("w", provisioner="csi.example.com"), pvc("c1", sc="w")], p)
    pl = VolumeBinding.create({}, plain_handle())
    state, pi = reserve(pl, snap, p, "n1")
    assert state.read(STATE_KEY).all_bound is False
    status = await pl.pre_bind(state, pi, "n1")
    assert status.code == Code.ERROR
