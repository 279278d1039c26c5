"""VolumeBinding's per-cycle bound-claims check (``binder.BoundClaimsCheck``) must be invisible: on
random bound claims (CSI and in-tree PVs, with and without node affinity, malformed affinity,
migratable PVs whose translation fails, missing PVs), nodes and CSINodes (with and without the
``migrated-plugins`` annotation), the check built once per cycle answers on every node exactly as
``checkBoundClaims`` read straight from the stores (``VolumeBinder.check_bound_claims_plain``),
errors included; and Filter through the plugin gives the same statuses as the plain form.

Upstream: ``pkg/scheduler/framework/plugins/volumebinding/binder.go`` (``checkBoundClaims``,
``tryTranslatePVToCSI``); the split is py-scheduler's own.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.types import CycleState, PodInfo
from py_scheduler.plugins.volume_binding import STATE_KEY, VolumeBinding
from py_scheduler.plugins.volume_binding import csi_translation as csi
from py_scheduler.plugins.volume_binding import storage as vst
from py_scheduler.plugins.volume_binding.binder import BoundClaimsCheck, PodVolumeClaims
from tests.unit.plugins.volume_objects import ZONE, csi_node, driver, node, pod, pv, pvc, pvc_vol

Obj = dict[str, Any]
GKE_ZONE = "topology.gke.io/zone"
ZONES = ["z1", "z2"]

SOURCES: list[Obj | None] = [
    None,  # CSI (the builder's default)
    {"awsElasticBlockStore": {"volumeID": "vol-1"}},
    {"awsElasticBlockStore": {"volumeID": "aws://z1/not-a-volume"}},  # translation fails
    {"gcePersistentDisk": {"pdName": "d1"}},
    {"azureFile": {"secretName": "s", "shareName": "x"}},  # in-tree, migration not on
]
AFFINITIES: list[list[Obj] | None] = [
    None,
    [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}],
    [{"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["z2"]}]},
     {"matchExpressions": [{"key": GKE_ZONE, "operator": "Exists"}]}],
    [{"matchExpressions": [{"key": ZONE, "operator": "Bogus", "values": ["z1"]}]}],  # malformed: no match
]


@st.composite
def cluster(draw: st.DrawFn) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """(nodes, CSINodes, claims and PVs) for one Pod with 1-3 bound claims ``c0..``."""
    n_nodes = draw(st.integers(1, 5))
    nodes: list[Obj] = []
    csi_nodes: list[Obj] = []
    for i in range(n_nodes):
        labels: dict[str, str] = {}
        if draw(st.booleans()):
            labels[ZONE] = draw(st.sampled_from(ZONES))
        if draw(st.booleans()):
            labels[GKE_ZONE] = draw(st.sampled_from(ZONES))
        nodes.append(node(f"n{i}", labels))
        kind = draw(st.sampled_from(["none", "plain", "migrated", "other"]))
        if kind != "none":
            migrated = {"plain": None, "migrated": "kubernetes.io/aws-ebs,kubernetes.io/gce-pd",
                        "other": "kubernetes.io/cinder"}[kind]
            csi_nodes.append(csi_node(f"n{i}", [driver("ebs.csi.aws.com", 5)], migrated))
    objects: list[Obj] = []
    for c in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 9)) == 0:
            objects.append(pvc(f"c{c}", volume=f"missing{c}", bound=True))
            continue
        labels = {ZONE: draw(st.sampled_from(ZONES))} if draw(st.booleans()) else {}
        objects.append(pv(f"p{c}", claim=("default", f"c{c}"), labels=labels,
                          affinity=draw(st.sampled_from(AFFINITIES)), source=draw(st.sampled_from(SOURCES)),
                          phase="Bound"))
        objects.append(pvc(f"c{c}", volume=f"p{c}", bound=True))
    return nodes, csi_nodes, objects


def _plain(vb: VolumeBinding, objects: ClusterObjects, claims: list[Obj], n: Obj) -> object:
    try:
        return vb.binder.check_bound_claims_plain(objects, claims, n)
    except csi.TranslationError as exc:
        return ("error", str(exc))


def _memo(check: BoundClaimsCheck, objects: ClusterObjects, n: Obj) -> object:
    try:
        return check.check(objects, n)
    except csi.TranslationError as exc:
        return ("error", str(exc))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cluster(), order=st.randoms(use_true_random=False))
def test_bound_claims_check_equals_plain_form(case: tuple[list[Obj], list[Obj], list[Obj]], order: Any) -> None:
    nodes, csi_nodes, objs = case
    store = ClusterObjects()
    for o in csi_nodes + objs:
        store.upsert(o["kind"], o)
    claims = [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
    vb = VolumeBinding()
    check = BoundClaimsCheck(vb.binder.pv_cache, store, claims)
    visit = list(nodes) * 2  # every node twice, in a random order: the lazy translation is reused
    order.shuffle(visit)
    for n in visit:
        assert _memo(check, store, n) == _plain(vb, store, claims, n), vst.name(n)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cluster())
def test_filter_statuses_equal_plain_form(case: tuple[list[Obj], list[Obj], list[Obj]]) -> None:
    """Through the plugin: PreFilter, then Filter on every node; a node's status is an Error exactly
    when the plain form raises, UnschedulableAndUnresolvable with upstream's reasons when it rejects."""
    nodes, csi_nodes, objs = case
    claims = [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
    p = pod("a", [pvc_vol(f"v{i}", vst.name(c)) for i, c in enumerate(claims)])
    snap = Snapshot.from_object_list(nodes + csi_nodes + objs)
    vb = VolumeBinding()
    state = CycleState(snap)
    pi = PodInfo(p)
    _, s = vb.pre_filter(state, pi, list(snap.node_info_list))
    if not s.is_success():
        return
    for ni in snap.node_info_list:
        got = vb.filter(state, pi, ni)
        assert ni.node is not None
        plain = _plain(vb, snap.objects, claims, ni.node)
        if isinstance(plain, tuple) and plain[0] == "error":
            assert got.code.name == "ERROR" and got.reasons == [plain[1]]
            continue
        bound_ok, found = plain  # type: ignore[misc]
        want = ([] if bound_ok else ["node(s) didn't match PersistentVolume's node affinity"]) + (
            [] if found else ["node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"])
        assert got.reasons == want and got.is_success() == (not want)
    batch = vb.filter_nodes(CycleState(snap), pi, list(snap.node_info_list))  # no PreFilter state: Errors
    assert batch is not None and all(b.code.name == "ERROR" for b in batch)
    state2 = CycleState(snap)
    vb.pre_filter(state2, pi, list(snap.node_info_list))
    batch = vb.filter_nodes(state2, pi, list(snap.node_info_list))
    one = [(int(x.code), x.reasons) for x in (vb.filter(state, pi, ni) for ni in snap.node_info_list)]
    assert ([(0, [])] * len(one) if batch is None else [(int(b.code), b.reasons) for b in batch]) == one
    assert sorted(state2.data[STATE_KEY].pod_volumes_by_node) == sorted(state.data[STATE_KEY].pod_volumes_by_node)


def test_the_check_is_built_once_per_cycle_and_reads_no_csinode_without_migratable_pvs() -> None:
    objs = [pv("p0", claim=("default", "c0"), phase="Bound"), pvc("c0", volume="p0", bound=True)]
    store = ClusterObjects()
    for o in objs:
        store.upsert(o["kind"], o)
    claims = PodVolumeClaims(bound_claims=[objs[1]])
    vb = VolumeBinding()
    for i in range(3):
        vb.binder.find_pod_volumes(store, pod("a"), claims, node(f"n{i}"))
    assert claims.bound_check is not None and not claims.bound_check.needs_csi_node
