"""Cache: nodes, bound/assumed Pods, node-less NodeInfos, incremental snapshots, expiry.

Cases follow upstream's ``backend/cache/cache_test.go`` (TestAssumePodScheduled,
TestAddPodWillConfirm, TestUpdatePod, TestRemovePod, TestNodeOperators, TestSchedulerCache_UpdateSnapshot).
"""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.cache.cache import Cache, CacheError
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import PodInfo


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def node(name: str, cpu: str = "4", mem: str = "16Gi", zone: str | None = None,
         images: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110"}, "images": images or []}}


def pod(name: str, node_name: str = "", cpu: str = "1", mem: str = "1Gi", uid: str | None = None,
        **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra)
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"}, "spec": spec}


def assumed(p: dict[str, Any], node_name: str) -> PodInfo:
    return PodInfo({**p, "spec": {**p["spec"], "nodeName": node_name}})


def test_bound_pods_are_accounted() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_pod(pod("a", "n1", cpu="1500m", mem="2Gi"))
    ni = c.node_info("n1")
    assert ni is not None
    assert ni.requested.milli_cpu == 1500 and ni.requested.memory == 2 * 2**30
    assert ni.allocatable.milli_cpu == 4000
    assert c.pod_count() == 1


def test_assume_then_confirm_by_watch() -> None:
    c = Cache()
    c.add_node(node("n1"))
    p = pod("a")
    pi = assumed(p, "n1")
    c.assume_pod(pi)
    assert c.is_assumed_pod(pi)
    with pytest.raises(CacheError):
        c.assume_pod(pi)
    c.finish_binding(pi)
    c.add_pod(pod("a", "n1"))
    assert not c.is_assumed_pod(pi)
    ni = c.node_info("n1")
    assert ni is not None and len(ni.pods) == 1 and ni.requested.milli_cpu == 1000


def test_confirm_on_other_node_moves_the_pod() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    pi = assumed(pod("a"), "n1")
    c.assume_pod(pi)
    c.add_pod(pod("a", "n2"))
    n1, n2 = c.node_info("n1"), c.node_info("n2")
    assert n1 is not None and n2 is not None
    assert n1.requested.milli_cpu == 0 and n2.requested.milli_cpu == 1000


def test_forget_releases_resources() -> None:
    c = Cache()
    c.add_node(node("n1"))
    pi = assumed(pod("a"), "n1")
    c.assume_pod(pi)
    c.forget_pod(pi)
    ni = c.node_info("n1")
    assert ni is not None and ni.requested.milli_cpu == 0 and not ni.pods
    c.forget_pod(pi)  # no longer cached: fine
    c.add_pod(pod("b", "n1"))
    with pytest.raises(CacheError):
        c.forget_pod(PodInfo(pod("b", "n1")))


def test_update_pod_changes_resources_and_node() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    old = pod("a", "n1", cpu="1")
    c.add_pod(old)
    new = pod("a", "n1", cpu="3")
    c.update_pod(old, new)
    n1 = c.node_info("n1")
    assert n1 is not None and n1.requested.milli_cpu == 3000 and len(n1.pods) == 1
    moved = pod("a", "n2", cpu="3")
    c.update_pod(new, moved)
    n1, n2 = c.node_info("n1"), c.node_info("n2")
    assert n1 is not None and n2 is not None
    assert n1.requested.milli_cpu == 0 and n2.requested.milli_cpu == 3000


def test_remove_pod_uses_cached_version() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_pod(pod("a", "n1"))
    # a delete event may carry a stale object without nodeName
    c.remove_pod(pod("a"))
    ni = c.node_info("n1")
    assert ni is not None and not ni.pods
    c.remove_pod(pod("never"))


def test_node_removed_with_pods_keeps_nodeless_info() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    c.add_pod(pod("a", "n1"))
    snap = c.snapshot()
    assert [n.name for n in snap.node_info_list] == ["n1", "n2"]
    c.remove_node(node("n1"))
    ghost = c.node_info("n1")
    assert ghost is not None and ghost.node is None and len(ghost.pods) == 1
    c.update_snapshot(snap)
    assert [n.name for n in snap.node_info_list] == ["n2"]
    assert "n1" not in snap.node_info_map
    c.remove_pod(pod("a", "n1"))
    assert c.node_info("n1") is None
    assert c.node_count() == 1


def test_pod_on_unknown_node_then_node_arrives() -> None:
    c = Cache()
    c.add_pod(pod("a", "late"))
    snap = c.snapshot()
    assert snap.node_info_list == []
    c.add_node(node("late"))
    c.update_snapshot(snap)
    assert [n.name for n in snap.node_info_list] == ["late"]
    assert snap.get("late").requested.milli_cpu == 1000


def test_snapshot_clones_only_changed_nodes_and_keeps_identity() -> None:
    c = Cache()
    for n in ("n1", "n2", "n3"):
        c.add_node(node(n))
    snap = Snapshot()
    c.update_snapshot(snap)
    objs = {n.name: n for n in snap.node_info_list}
    gen = snap.generation
    c.add_pod(pod("a", "n2"))
    c.update_snapshot(snap)
    assert snap.generation > gen
    assert {n.name: n for n in snap.node_info_list} == objs  # same objects
    assert all(a is b for a, b in zip(snap.node_info_list, objs.values(), strict=True))
    assert snap.get("n2").requested.milli_cpu == 1000
    # the snapshot is a copy: later cache changes do not leak in until the next update
    c.add_pod(pod("b", "n2"))
    assert snap.get("n2").requested.milli_cpu == 1000
    live = c.node_info("n2")
    assert live is not None and snap.get("n2") is not live
    c.update_snapshot(snap)
    assert snap.get("n2").requested.milli_cpu == 2000


def test_snapshot_node_tree_order_interleaves_zones() -> None:
    c = Cache()
    for name, zone in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a"), ("b2", "b")):
        c.add_node(node(name, zone=zone))
    snap = c.snapshot()
    assert [n.name for n in snap.node_info_list] == ["a1", "b1", "a2", "b2", "a3"]


def test_affinity_lists_follow_pods() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    snap = c.snapshot()
    assert snap.have_pods_with_affinity_list == []
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    c.add_pod(pod("a", "n2", affinity=anti))
    c.update_snapshot(snap)
    assert [n.name for n in snap.have_pods_with_affinity_list] == ["n2"]
    assert [n.name for n in snap.have_pods_with_required_anti_affinity_list] == ["n2"]
    c.remove_pod(pod("a", "n2"))
    c.update_snapshot(snap)
    assert snap.have_pods_with_required_anti_affinity_list == []


def test_pvc_ref_counts_in_snapshot() -> None:
    c = Cache()
    c.add_node(node("n1"))
    snap = c.snapshot()
    vol = [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]
    c.add_pod(pod("a", "n1", volumes=vol))
    c.update_snapshot(snap)
    assert snap.used_pvc_ref_counts == {"default/data": 1}
    c.add_pod(pod("b", "n1", volumes=vol))
    c.update_snapshot(snap)
    assert snap.used_pvc_ref_counts == {"default/data": 2}
    c.remove_pod(pod("a", "n1"))
    c.remove_pod(pod("b", "n1"))
    c.update_snapshot(snap)
    assert snap.used_pvc_ref_counts == {}


def test_image_states_shared_and_counted() -> None:
    c = Cache()
    img = [{"names": ["nginx:1"], "sizeBytes": 100 * 2**20}]
    c.add_node(node("n1", images=img))
    c.add_node(node("n2", images=img))
    snap = c.snapshot()
    assert snap.get("n1").image_states["nginx:1"].num_nodes == 2
    c.remove_node(node("n2"))
    c.update_snapshot(snap)
    assert snap.get("n1").image_states["nginx:1"].num_nodes == 1
    c.update_node(node("n1", images=img), node("n1"))
    c.update_snapshot(snap)
    assert snap.get("n1").image_states == {}


def test_update_node_zone_change_moves_in_tree() -> None:
    c = Cache()
    c.add_node(node("n1", zone="a"))
    c.add_node(node("n2", zone="a"))
    c.update_node(node("n1", zone="a"), node("n1", zone="b"))
    assert c.node_names() == ["n2", "n1"]


def test_malformed_bound_pod_is_skipped_not_raised() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_pod(pod("bad", "n1", cpu="not-a-quantity"))
    assert c.malformed_pods == 1
    assert c.pod_count() == 0
    c.update_pod(pod("bad", "n1", cpu="not-a-quantity"), pod("bad", "n1", cpu="1"))
    assert c.pod_count() == 1
    c.remove_pod(pod("bad", "n1"))
    assert c.pod_count() == 0


def test_malformed_node_allocatable_counts_as_empty() -> None:
    c = Cache()
    c.add_node(node("n1", cpu="four"))
    ni = c.node_info("n1")
    assert ni is not None and ni.node is not None and ni.allocatable.milli_cpu == 0
    assert [n.name for n in c.snapshot().node_info_list] == ["n1"]


def test_assumed_pod_expires_only_after_finish_binding_and_ttl() -> None:
    clock = Clock()
    c = Cache(now=clock, assumed_pod_ttl=60)
    c.add_node(node("n1"))
    pi = assumed(pod("a"), "n1")
    c.assume_pod(pi)
    clock.t += 1000
    assert c.cleanup_assumed_pods() == []  # binding not finished: never expires
    c.finish_binding(pi)
    clock.t += 59
    assert c.cleanup_assumed_pods() == []
    clock.t += 2
    assert [p.key for p in c.cleanup_assumed_pods()] == ["default/a"]
    ni = c.node_info("n1")
    assert ni is not None and not ni.pods


def test_cache_sizes() -> None:
    c = Cache()
    c.add_node(node("n1"))
    c.add_pod(pod("a", "n1"))
    c.assume_pod(assumed(pod("b"), "n1"))
    assert (c.node_count(), c.pod_count(), c.assumed_count()) == (1, 2, 1)
