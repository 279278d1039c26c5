"""The cross-cycle indexes (InterPodAffinity's AffinityIndex, PodTopologySpread's count memo) and the
resource columns sync by ``NodeInfo.generation``; they cannot go stale silently (issue 14 item 5).

Before issue 14 a NodeInfo mutated without a generation bump (``ni.pods.append(p)``, ``ni.pods =
...``, ``ni.node = ...``) left every index answering for the old content. Now the Pod lists are
immutable tuples (no in-place mutation at all) and every assignment to a field the indexes read bumps
the generation, so each mutation below is either refused loudly or seen by the next sync.
"""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo
from py_scheduler.plugins.helpers.columns import POD_COUNT, NodeColumns
from py_scheduler.plugins.inter_pod_affinity.common import PRE_FILTER_STATE_KEY as IPA_KEY
from py_scheduler.plugins.inter_pod_affinity.filtering import PreFilterState
from py_scheduler.plugins.inter_pod_affinity.plugin import InterPodAffinity
from py_scheduler.plugins.pod_topology_spread.common import PRE_FILTER_STATE_KEY as PTS_KEY
from py_scheduler.plugins.pod_topology_spread.filtering import PreFilterState as PTSState
from py_scheduler.plugins.pod_topology_spread.plugin import PodTopologySpread
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"


def _node(name: str, zone: str) -> Obj:
    return {"metadata": {"name": name, "labels": {ZONE: zone, "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"pods": "110", "cpu": "8", "memory": "16Gi"}}}


def _pod(name: str, app: str, node: str | None = None, **spec: Any) -> Obj:
    s: Obj = dict(spec)
    if node:
        s["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"app": app}}, "spec": s}


ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]}}


def _snapshot() -> Snapshot:
    nodes = [_node("n0", "z0"), _node("n1", "z1"), _node("n2", "z1")]
    return Snapshot.from_objects(nodes, [_pod("e0", "web", "n0")])


def _ipa_counts(pl: InterPodAffinity, snap: Snapshot, pod: PodInfo) -> Any:
    state = CycleState(snap)
    _, st = pl.pre_filter(state, pod, snap.node_info_list)
    assert st.is_success(), st.reasons
    s = state.data[IPA_KEY]
    assert isinstance(s, PreFilterState)
    return dict(s.existing_anti_affinity_counts)


def _pts_counts(pl: PodTopologySpread, snap: Snapshot, pod: PodInfo) -> list[dict[str, int]]:
    state = CycleState(snap)
    _, st = pl.pre_filter(state, pod, snap.node_info_list)
    assert st.is_success(), st.reasons
    s = state.data[PTS_KEY]
    assert isinstance(s, PTSState)
    return [dict(c) for c in s.tp_value_to_match_num]


def _mutate_without_bump(ni: NodeInfo, p: PodInfo) -> None:
    """What a careless caller would write: put a Pod on the node without ``add_pod`` (so without the
    generation bump ``add_pod`` does)."""
    ni.pods = (*ni.pods, p)
    ni.pods_with_required_anti_affinity = (*ni.pods_with_required_anti_affinity, p)


def test_pod_lists_cannot_be_mutated_in_place() -> None:
    ni = _snapshot().node_info_list[0]
    with pytest.raises(AttributeError):
        ni.pods.append(PodInfo(_pod("x", "db", "n0")))  # type: ignore[attr-defined]


@pytest.mark.parametrize("field", ["pods", "pods_with_affinity", "pods_with_required_anti_affinity", "node"])
def test_assigning_an_indexed_field_bumps_the_generation(field: str) -> None:
    ni = _snapshot().node_info_list[0]
    before = ni.generation
    setattr(ni, field, getattr(ni, field))
    assert ni.generation > before


def test_affinity_index_sees_a_pod_put_on_a_node_without_add_pod() -> None:
    snap = _snapshot()
    pl = InterPodAffinity.create({}, plain_handle())
    own = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "none"}}, "topologyKey": ZONE}]}}
    incoming = PodInfo(_pod("in", "db", affinity=own))  # a term of its own: PreFilter does not Skip
    assert _ipa_counts(pl, snap, incoming) == {}
    index = pl.affinity_index(snap.node_info_list)
    # an existing Pod with anti-affinity to app=db lands on n1 (zone z1) behind the index's back
    _mutate_without_bump(snap.node_info_list[1], PodInfo(_pod("anti", "web", "n1", affinity=ANTI)))
    assert _ipa_counts(pl, snap, incoming) == {(ZONE, "z1"): 1}
    assert pl.affinity_index(snap.node_info_list) is index  # synced in place, not rebuilt


def test_spread_count_memo_sees_a_pod_put_on_a_node_without_add_pod() -> None:
    snap = _snapshot()
    pl = PodTopologySpread()
    cons = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "db"}}}]
    incoming = PodInfo(_pod("in", "db", topologySpreadConstraints=cons))
    assert _pts_counts(pl, snap, incoming) == [{"z0": 0, "z1": 0}]
    _mutate_without_bump(snap.node_info_list[2], PodInfo(_pod("db1", "db", "n2")))
    assert _pts_counts(pl, snap, incoming) == [{"z0": 0, "z1": 1}]


def test_node_columns_see_a_pod_put_on_a_node_without_add_pod() -> None:
    snap = _snapshot()
    cols = snap.derived(NodeColumns)
    ni = snap.node_info_list[1]
    _mutate_without_bump(ni, PodInfo(_pod("x", "db", "n1")))
    got = cols.gather([ni])
    assert got is not None and int(got.values[POD_COUNT][0]) == 1
