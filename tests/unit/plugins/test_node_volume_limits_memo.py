"""NodeVolumeLimits' memos (the incoming Pod's volumes resolved once per cycle, ``_PodVolumes``; each
CSINode read once per object, ``_CSINodeInfo``) must be invisible: on random clusters (CSI and in-tree
PVs, unbound claims of CSI / migratable / non-provisioning classes, missing claims, inline in-tree
volumes including untranslatable ones, foreign ephemeral claims, CSIDrivers that must be listed,
nodes with and without a CSINode, Pods and VolumeAttachments already on the nodes), Filter answers
on every node exactly as the plain form reading every store per node (``filter_plain``), code and
reasons; and a CSINode replaced between cycles is read again.

Upstream: ``pkg/scheduler/framework/plugins/nodevolumelimits/csi.go`` (``Filter``); the memos are
py-scheduler's own.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import storage
from py_scheduler.plugins.node_volume_limits import (
    ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
    NAME,
    NodeVolumeLimits,
    _LookupError,
    get_volume_limits,
)
from tests.unit.plugins.volume_objects import (
    DRIVER,
    csi_driver,
    csi_node,
    driver,
    node,
    pod,
    pv,
    pvc,
    pvc_vol,
    storage_class,
)

Obj = dict[str, Any]
EBS = "ebs.csi.aws.com"


def _va(name: str, node_name: str, pv_name: str, attacher: str) -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
            "spec": {"attacher": attacher, "nodeName": node_name, "source": {"persistentVolumeName": pv_name}}}


def _volume(draw: st.DrawFn, i: int, n_claims: int, claims: int = 3) -> Obj:
    """A Pod volume: a claim ``c<k>`` (``claims`` times as likely as each other kind), a missing claim,
    an inline EBS volume (translatable or not), an ephemeral volume (its claim never exists) or an
    emptyDir."""
    kind = draw(st.sampled_from(["claim"] * claims + ["missing", "inline", "bad-inline", "ephemeral", "empty"]))
    if kind == "claim":
        return pvc_vol(f"v{i}", f"c{draw(st.integers(0, n_claims - 1))}")
    if kind == "missing":
        return pvc_vol(f"v{i}", "nope")
    if kind == "inline":
        return {"name": f"v{i}", "awsElasticBlockStore": {"volumeID": f"vol-{draw(st.integers(0, 3))}"}}
    if kind == "bad-inline":
        return {"name": f"v{i}", "awsElasticBlockStore": {"volumeID": "aws://z1/not-a-volume"}}
    if kind == "ephemeral":
        return {"name": f"e{i}", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    return {"name": f"v{i}", "emptyDir": {}}


@st.composite
def cluster(draw: st.DrawFn) -> tuple[list[Obj], Obj]:
    """(the cluster's objects, the incoming Pod)."""
    objs: list[Obj] = [storage_class("csi-sc", provisioner=DRIVER),
                       storage_class("ebs-sc", provisioner="kubernetes.io/aws-ebs"),
                       storage_class("nop-sc", provisioner="kubernetes.io/no-provisioner")]
    if draw(st.booleans()):
        objs.append(csi_driver(DRIVER, preventPodSchedulingIfMissing=draw(st.booleans())))
    if draw(st.booleans()):
        objs.append(csi_driver(EBS, preventPodSchedulingIfMissing=draw(st.booleans())))
    n_claims = draw(st.integers(1, 6))
    for c in range(n_claims):
        kind = draw(st.sampled_from(["csi", "ebs", "unbound", "ghost"]))
        if kind in ("csi", "ebs"):
            src = ({"csi": {"driver": DRIVER, "volumeHandle": f"h{c}"}} if kind == "csi"
                   else {"awsElasticBlockStore": {"volumeID": f"vol-{c}"}})
            objs += [pv(f"p{c}", claim=("default", f"c{c}"), source=src, phase="Bound"),
                     pvc(f"c{c}", volume=f"p{c}", bound=True)]
        elif kind == "unbound":
            objs.append(pvc(f"c{c}", sc=draw(st.sampled_from(["csi-sc", "ebs-sc", "nop-sc", "none"]))))
        else:
            objs.append(pvc(f"c{c}", volume=f"gone{c}", bound=True))
    n_nodes = draw(st.integers(1, 4))
    for i in range(n_nodes):
        objs.append(node(f"n{i}"))
        if draw(st.integers(0, 3)):
            drivers = []
            for name in draw(st.lists(st.sampled_from([DRIVER, EBS]), unique=True, max_size=2)):
                drivers.append(driver(name, draw(st.one_of(st.none(), st.integers(0, 2)))))
            objs.append(csi_node(f"n{i}", drivers))
        for j in range(draw(st.integers(0, 2))):
            name = f"x{i}-{j}"
            vols = [_volume(draw, k, n_claims) for k in range(draw(st.integers(0, 3)))]
            objs.append(pod(name, vols, node_name=f"n{i}"))
        for j in range(draw(st.integers(0, 2))):
            objs.append(_va(f"va{i}-{j}", f"n{i}", f"p{draw(st.integers(0, n_claims - 1))}",
                            draw(st.sampled_from([DRIVER, EBS]))))
    incoming = pod("a", [_volume(draw, k, n_claims, 15) for k in range(draw(st.integers(0, 4)))])
    if draw(st.integers(0, 3)) == 0:  # an ephemeral claim of the incoming Pod, owned by it or not
        owner = "uid-other" if draw(st.integers(0, 3)) == 0 else "uid-a"
        incoming["spec"]["volumes"].append({"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
        claim = pvc("a-eph", sc="csi-sc")
        claim["metadata"]["ownerReferences"] = [{"controller": True, "uid": owner, "kind": "Pod", "name": "a"}]
        objs.append(claim)
    return objs, incoming


def _driver_installed(objects: Any, driver: str, csi_node: Obj | None) -> bool:
    """``checkCSIDriverOnNode`` per node: only a CSIDriver with ``preventPodSchedulingIfMissing: true``
    must be listed in the node's CSINode."""
    if not NodeVolumeLimits._driver_must_be_listed(objects, driver):
        return True
    drivers = storage.spec(csi_node).get("drivers") if csi_node is not None else None
    return csi_node is not None and any(isinstance(d, dict) and d.get("name") == driver
                                        for d in (drivers if isinstance(drivers, list) else []))


def filter_plain(self: NodeVolumeLimits, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
    """``NodeVolumeLimits.filter`` reading every store per node, as upstream's ``Filter`` (the plain form
    its memos reproduce)."""
    vols = storage.pod_volumes(pod.pod)
    if not vols:
        return Status.success()
    objects = storage.cycle_objects(state)
    node_name = node_info.name
    csi_node = objects.get("CSINode", node_name)
    new_volumes: dict[str, str] = {}
    try:
        self._filter_attachable_volumes(objects, pod.pod, csi_node, True, new_volumes)
    except _LookupError as exc:
        if exc.not_found:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        return Status.error(str(exc), NAME)
    if not new_volumes:
        return Status.success()
    if self.volume_limit_scaling:
        for driver in new_volumes.values():
            if not _driver_installed(objects, driver, csi_node):
                return Status(Code.UNSCHEDULABLE, [f"{driver} CSI driver is not installed on the node"], NAME)
    limits = get_volume_limits(csi_node)
    if not limits:
        return Status.success()
    attachments = self._volume_attachments(state, objects, node_name)
    attached: dict[str, str] = {}
    try:
        for existing in node_info.pods:
            self._filter_attachable_volumes(objects, existing.pod, csi_node, False, attached)
    except _LookupError as exc:
        return Status.error(str(exc), NAME)
    attached_count: dict[str, int] = {}
    for unique, driver in attached.items():
        new_volumes.pop(unique, None)
        attached_count[driver] = attached_count.get(driver, 0) + 1
    for unique, driver in attachments.items():
        if unique not in attached:
            attached_count[driver] = attached_count.get(driver, 0) + 1
    new_count: dict[str, int] = {}
    for driver in new_volumes.values():
        new_count[driver] = new_count.get(driver, 0) + 1
    for driver, count in new_count.items():
        limit = limits.get(driver)
        if limit is not None and attached_count.get(driver, 0) + count > limit:
            return Status(Code.UNSCHEDULABLE, [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED], NAME)
    return Status.success()



def _key(s: Status) -> tuple[int, list[str]]:
    return int(s.code), list(s.reasons)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cluster(), scaling=st.booleans(), order=st.randoms(use_true_random=False))
def test_filter_equals_plain_form(case: tuple[list[Obj], Obj], scaling: bool, order: Any) -> None:
    objs, incoming = case
    snap = Snapshot.from_object_list(objs)
    pl = NodeVolumeLimits(volume_limit_scaling=scaling)
    pi = PodInfo(incoming)
    state, plain_state = CycleState(snap), CycleState(snap)
    visit = list(snap.node_info_list) * 2
    order.shuffle(visit)
    for ni in visit:
        assert _key(pl.filter(state, pi, ni)) == _key(filter_plain(pl, plain_state, pi, ni)), ni.name
    batch = pl.filter_nodes(CycleState(snap), pi, visit)
    plain = [_key(filter_plain(pl, plain_state, pi, ni)) for ni in visit]
    assert ([_key(Status.success())] * len(visit) if batch is None else [_key(b) for b in batch]) == plain


def test_a_csinode_replaced_between_cycles_is_read_again() -> None:
    objs = [node("n0"), csi_node("n0", [driver(DRIVER, 1)]),
            pv("p0", claim=("default", "c0"), phase="Bound"), pvc("c0", volume="p0", bound=True),
            pv("p1", claim=("default", "c1"), phase="Bound"), pvc("c1", volume="p1", bound=True),
            pod("x", [pvc_vol("v", "c0")], node_name="n0")]
    snap = Snapshot.from_object_list(objs)
    pl = NodeVolumeLimits()
    pi = PodInfo(pod("a", [pvc_vol("v", "c1")]))
    ni = snap.node_info_list[0]
    assert pl.filter(CycleState(snap), pi, ni).reasons == ["node(s) exceed max volume count"]
    snap.objects.upsert("CSINode", csi_node("n0", [driver(DRIVER, 2)]))  # the informer's new object
    assert pl.filter(CycleState(snap), pi, ni).is_success()
    snap.objects.upsert("CSINode", csi_node("n0", [driver(DRIVER, 1)]))
    assert not pl.filter(CycleState(snap), pi, ni).is_success()


def test_a_state_of_another_pod_is_not_reused() -> None:
    objs = [node("n0"), csi_node("n0", [driver(DRIVER, 1)]),
            pv("p0", claim=("default", "c0"), phase="Bound"), pvc("c0", volume="p0", bound=True),
            pv("p1", claim=("default", "c1"), phase="Bound"), pvc("c1", volume="p1", bound=True)]
    snap = Snapshot.from_object_list(objs)
    pl = NodeVolumeLimits()
    state = CycleState(snap)
    ni = snap.node_info_list[0]
    assert pl.filter(state, PodInfo(pod("a", [])), ni).is_success()
    two = PodInfo(pod("b", [pvc_vol("v", "c0"), pvc_vol("w", "c1")]))
    assert pl.filter(state, two, ni).reasons == ["node(s) exceed max volume count"]
