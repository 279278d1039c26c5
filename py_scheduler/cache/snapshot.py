"""Snapshot: the read-only view of the cluster one scheduling cycle works on.

Upstream: ``pkg/scheduler/backend/cache/snapshot.go`` (``Snapshot``, ``NewSnapshot``,
``createNodeInfoMap``, image existence) and ``backend/cache/node_tree.go`` (node order: zones
interleaved round-robin, so the rotating start index of Filter spreads across zones).

A Snapshot is built either from the live :class:`~py_scheduler.cache.cache.Cache` (incrementally, only
changed NodeInfos are cloned) or from plain objects (:meth:`Snapshot.from_objects`, used by
``explain``, ``simulate`` and tests). Besides NodeInfos it carries the other objects plugins read
(Services, ReplicaSets, Namespaces, PVCs, ...) in :class:`ClusterObjects`.

Plugin-owned structures derived from the node list (NodeResourcesFit's numpy resource columns,
:mod:`py_scheduler.plugins.helpers.columns`) are registered through :meth:`Snapshot.derived`, the
framework's :class:`~py_scheduler.framework.lister.SnapshotLister` contract: built on first use after
the node list changes, refreshed node by node where the snapshot is brought up to date in place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from py_scheduler.cache.kinds import CLUSTER_KINDS, NAMESPACED_KINDS
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.lister import D, DerivedFactory, NodeDerived
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import ImageStateSummary, NodeInfo, PodInfo, pod_pvc_keys

__all__ = ["ClusterObjects", "Snapshot", "node_tree_order", "zone_key"]


class ClusterObjects:
    """Objects other than Nodes and Pods, by kind: ``kind -> key -> object``.

    Keys are ``namespace/name`` for namespaced kinds and ``name`` for cluster-scoped ones. The live
    informers update one instance in place; snapshots share it (plugins only read it).

    ``version`` counts the :meth:`upsert` and :meth:`delete` calls (a node shard's replica is sent
    the objects again when it moved: py_scheduler/core/shards.py).
    """

    def __init__(self) -> None:
        self.by_kind: dict[str, dict[str, Obj]] = {k: {} for k in NAMESPACED_KINDS + CLUSTER_KINDS}
        self.version = 0

    @staticmethod
    def key(kind: str, obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if kind in NAMESPACED_KINDS:
            return f"{meta.get('namespace') or 'default'}/{name}"
        return name

    def upsert(self, kind: str, obj: Obj) -> None:
        self.version += 1
        self.by_kind.setdefault(kind, {})[self.key(kind, obj)] = obj

    def delete(self, kind: str, obj: Obj) -> None:
        self.version += 1
        self.by_kind.setdefault(kind, {}).pop(self.key(kind, obj), None)

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """All objects of a kind, optionally only those of one namespace."""
        objs = self.by_kind.get(kind, {})
        if namespace is None:
            return list(objs.values())
        prefix = namespace + "/"
        return [o for k, o in objs.items() if k.startswith(prefix)]

    def get(self, kind: str, key: str) -> Obj | None:
        return self.by_kind.get(kind, {}).get(key)


def zone_key(node: Obj | None) -> str:
    """``GetZoneKey``: ``region:\\x00:zone`` from the (beta or GA) topology labels, ``""`` if none."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    zone = labels.get("failure-domain.beta.kubernetes.io/zone", labels.get("topology.kubernetes.io/zone", ""))
    region = labels.get("failure-domain.beta.kubernetes.io/region",
                        labels.get("topology.kubernetes.io/region", ""))
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


def node_tree_order(nodes: Iterable[tuple[str, str]]) -> list[str]:
    """``nodeTree.list()``: names ordered by taking one node from each zone in turn.

    ``nodes`` are (name, zone key) pairs in insertion order; zones keep first-seen order.
    """
    zones: dict[str, list[str]] = {}
    for name, zone in nodes:
        zones.setdefault(zone, []).append(name)
    out: list[str] = []
    lists = list(zones.values())
    i = 0
    while lists:
        remaining = []
        for lst in lists:
            if i < len(lst):
                out.append(lst[i])
                remaining.append(lst)
        lists = [lst for lst in remaining if len(lst) > i + 1]
        i += 1
    return out


class Snapshot:
    """NodeInfos of one cycle (``cache.Snapshot``).

    Attributes:
        node_info_map: node name -> NodeInfo (only nodes whose Node object exists).
        node_info_list: the same NodeInfos in node-tree order.
        have_pods_with_affinity_list / have_pods_with_required_anti_affinity_list: NodeInfos with at
            least one such Pod (InterPodAffinity iterates only these).
        objects: the cluster's other objects (shared, read-only here).
        generation: the cache generation this snapshot reflects.
        images: image name -> shared summary over every node (the cache's own map, or the one
            :meth:`from_objects` built); None until one of them sets it.

    :meth:`derived` gives plugin-owned structures over ``node_info_list`` (e.g. resource columns),
    built on first use after the node list changed and kept up to date node by node by
    :meth:`node_changed` (called by ``Cache.update_snapshot`` and :meth:`assume`).
    """

    def __init__(self, objects: ClusterObjects | None = None) -> None:
        self.node_info_map: dict[str, NodeInfo] = {}
        self.node_info_list: list[NodeInfo] = []
        self.have_pods_with_affinity_list: list[NodeInfo] = []
        self.have_pods_with_required_anti_affinity_list: list[NodeInfo] = []
        self.objects: ClusterObjects = objects if objects is not None else ClusterObjects()
        self.generation: int = 0
        self.used_pvc_ref_counts: dict[str, int] = {}
        self.images: Mapping[str, ImageStateSummary] | None = None
        self._derived: dict[object, NodeDerived] = {}

    # -- construction from plain objects ---------------------------------------------------------
    @classmethod
    def from_objects(cls, nodes: Iterable[Obj], pods: Iterable[Obj] = (),
                     objects: ClusterObjects | None = None) -> Snapshot:
        """A snapshot of ``nodes`` with the bound ``pods`` (those with ``spec.nodeName``).

        Pods bound to a node not in ``nodes`` are kept out of the node list, as upstream (the
        NodeInfo exists without a Node object). Pods in phase Succeeded / Failed are ignored.

        Raises:
            PodParseError: a bound Pod or a Node has a malformed quantity.
        """
        snap = cls(objects)
        infos: dict[str, NodeInfo] = {}
        order: list[tuple[str, str]] = []
        images: dict[str, ImageStateSummary] = {}
        for node in nodes:
            ni = NodeInfo(node)
            if ni.name in infos:
                continue
            infos[ni.name] = ni
            order.append((ni.name, zone_key(node)))
            add_image_states(ni, images)
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if not node_name or phase in ("Succeeded", "Failed"):
                continue
            target = infos.get(str(node_name))
            pi = PodInfo(pod)
            if target is not None:
                target.add_pod(pi)
        snap.node_info_map = infos
        snap.node_info_list = [infos[n] for n in node_tree_order(order)]
        snap.images = images
        snap.rebuild_lists()
        return snap

    @classmethod
    def from_object_list(cls, objects: Iterable[Obj]) -> Snapshot:
        """A snapshot of a mixed object list (a snapshot file's or a test scenario's): Nodes are the
        nodes, Pods with ``spec.nodeName`` are bound to them, every other kind goes to the
        :class:`ClusterObjects`; pending Pods are left out.

        Raises:
            PodParseError: as :meth:`from_objects`.
        """
        nodes: list[Obj] = []
        bound: list[Obj] = []
        others = ClusterObjects()
        for o in objects:
            kind = o.get("kind")
            if kind == "Node":
                nodes.append(o)
            elif kind == "Pod":
                if (o.get("spec") or {}).get("nodeName"):
                    bound.append(o)
            else:
                others.upsert(str(kind), o)
        return cls.from_objects(nodes, bound, others)

    def rebuild_lists(self) -> None:
        """Recompute the affinity lists and PVC ref counts from ``node_info_list``."""
        self.have_pods_with_affinity_list = [n for n in self.node_info_list if n.pods_with_affinity]
        self.have_pods_with_required_anti_affinity_list = [
            n for n in self.node_info_list if n.pods_with_required_anti_affinity]
        counts: dict[str, int] = {}
        for n in self.node_info_list:
            for k, v in n.pvc_ref_counts.items():
                counts[k] = counts.get(k, 0) + v
        self.used_pvc_ref_counts = counts

    # -- plugin-owned derived structures ----------------------------------------------------------
    def derived(self, factory: DerivedFactory[D]) -> D:
        """The structure ``factory`` builds over ``node_info_list`` (rebuilt when the list object was
        replaced or its length changed; O(nodes) then, O(1) otherwise). ``factory`` is also the key."""
        got = self._derived.get(factory)
        if got is None or not got.fresh_for(self.node_info_list):
            built = factory(self.node_info_list)
            self._derived[factory] = built
            return built
        return got  # type: ignore[return-value]  # keyed by its own factory

    def node_changed(self, ni: NodeInfo) -> None:
        """Bring every derived structure up to date with ``ni`` (a NodeInfo of this snapshot that
        changed in place); structures built for a replaced node list are left to be rebuilt."""
        nodes = self.node_info_list
        for d in self._derived.values():
            if d.fresh_for(nodes):
                d.refresh(ni)

    def invalidate_derived(self) -> None:
        """Drop every derived structure (the next :meth:`derived` rebuilds it)."""
        self._derived.clear()

    # -- reads -----------------------------------------------------------------------------------
    def get(self, name: str) -> NodeInfo:
        """NodeInfo by node name. Raises KeyError if the node is not in the snapshot."""
        return self.node_info_map[name]

    def num_nodes(self) -> int:
        return len(self.node_info_list)

    def all_pods(self) -> Iterable[PodInfo]:
        for ni in self.node_info_list:
            yield from ni.pods

    def mutable_copy(self) -> Snapshot:
        """``StartMutations``: a Snapshot of clones of this one's NodeInfos (same node order, same
        objects and images) whose Pods may be removed and added (:meth:`forget`, :meth:`assume`)
        without touching this one; its derived structures are built afresh on use. Dropping the
        copy is ``EndMutations``. O(nodes)."""
        c = Snapshot(self.objects)
        c.node_info_map = {name: ni.clone() for name, ni in self.node_info_map.items()}
        c.node_info_list = [c.node_info_map[ni.name] for ni in self.node_info_list]
        c.generation = self.generation
        c.images = self.images
        c.rebuild_lists()
        return c

    # -- in-memory assume (explain / simulate / preemption dry runs) ---------------------------
    def assume(self, pod: PodInfo, node_name: str) -> None:
        """Add ``pod`` to ``node_name`` in this snapshot only (each later Pod sees it).

        Raises:
            KeyError: unknown node.
        """
        ni = self.node_info_map[node_name]
        bound = dict(pod.pod)
        bound["spec"] = dict(bound.get("spec") or {}, nodeName=node_name)
        pi = pod.derive(bound)  # the same Pod bound: not parsed again, memos kept as their inputs say
        had_aff, had_anti = bool(ni.pods_with_affinity), bool(ni.pods_with_required_anti_affinity)
        ni.add_pod(pi)
        self.node_changed(ni)
        if had_aff != bool(ni.pods_with_affinity) or had_anti != bool(ni.pods_with_required_anti_affinity):
            self.rebuild_lists()
        else:
            for k in pod_pvc_keys(pi.pod):
                self.used_pvc_ref_counts[k] = self.used_pvc_ref_counts.get(k, 0) + 1

    def forget(self, pod: PodInfo) -> bool:
        """Take ``pod`` off its node (``spec.nodeName``) in this snapshot only: the undo of
        :meth:`assume`, and ``RemovePod`` for a preemption dry run. False when the node or the Pod is
        not there."""
        ni = self.node_info_map.get(pod.node_name or "")
        if ni is None:
            return False
        had_aff, had_anti = bool(ni.pods_with_affinity), bool(ni.pods_with_required_anti_affinity)
        if ni.remove_pod(pod.uid) is None:
            return False
        self.node_changed(ni)
        if had_aff != bool(ni.pods_with_affinity) or had_anti != bool(ni.pods_with_required_anti_affinity):
            self.rebuild_lists()
        else:
            for k in pod_pvc_keys(pod.pod):
                left = self.used_pvc_ref_counts.get(k, 0) - 1
                if left > 0:
                    self.used_pvc_ref_counts[k] = left
                else:
                    self.used_pvc_ref_counts.pop(k, None)
        return True


def add_image_states(ni: NodeInfo, images: dict[str, ImageStateSummary]) -> None:
    """Attach the node's ``status.images`` to shared per-image summaries (``addNodeImageStates``)."""
    states: dict[str, ImageStateSummary] = {}
    for image in ((ni.node or {}).get("status") or {}).get("images") or []:
        if not isinstance(image, dict):
            continue
        size = image.get("sizeBytes")
        size_i = size if isinstance(size, int) and not isinstance(size, bool) else 0
        names = image.get("names")
        for name in names if isinstance(names, list) else ():
            if not isinstance(name, str):
                continue  # the API's []string; a hand-edited snapshot may hold anything
            st = images.get(name)
            if st is None:
                st = images[name] = ImageStateSummary(size_i)
            st.nodes.add(ni.name)
            states.setdefault(name, st)
    ni.image_states = states


def remove_image_states(ni: NodeInfo, images: dict[str, ImageStateSummary]) -> None:
    """Drop the node from the shared per-image summaries (``removeNodeImageStates``)."""
    for name, st in ni.image_states.items():
        st.nodes.discard(ni.name)
        if not st.nodes:
            images.pop(name, None)


__all__ += ["PodParseError", "add_image_states", "remove_image_states"]
