"""Snapshot: the read-only view of the cluster one scheduling cycle works on.

Upstream: ``pkg/scheduler/backend/cache/snapshot.go`` (``Snapshot``, ``NewSnapshot``,
``createNodeInfoMap``, image existence) and ``backend/cache/node_tree.go`` (node order: zones
interleaved round-robin, so the rotating start index of Filter spreads across zones).

A Snapshot is built either from the live :class:`~py_scheduler.cache.cache.Cache` (incrementally, only
changed NodeInfos are cloned) or from plain objects (:meth:`Snapshot.from_objects`, used by
``explain``, ``simulate`` and tests). Besides NodeInfos it carries the other objects plugins read
(Services, ReplicaSets, Namespaces, PVCs, ...) in :class:`ClusterObjects`.

It also keeps the nodes' resource quantities as numpy columns (:class:`NodeColumns`, no upstream
counterpart): NodeResourcesFit's Filter and the resource scorers read a chunk of nodes as arrays
instead of walking NodeInfos (issue 9). The columns are built on first use after the node list
changes and refreshed node by node where the snapshot is brought up to date.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from py_scheduler.framework.types import ImageStateSummary, NodeInfo, PodInfo, PodParseError, pod_pvc_keys

Obj = dict[str, Any]

__all__ = ["ClusterObjects", "GatheredColumns", "NodeColumns", "ScalarColumn", "Snapshot", "node_tree_order",
           "zone_key"]

NAMESPACED_KINDS = (
    "Service", "ReplicaSet", "StatefulSet", "ReplicationController", "PersistentVolumeClaim",
    "CSIStorageCapacity", "ResourceClaim", "PodDisruptionBudget", "PodGroup",
)
CLUSTER_KINDS = (
    "Namespace", "PersistentVolume", "StorageClass", "CSINode", "CSIDriver", "ResourceSlice",
    "DeviceClass", "PriorityClass", "VolumeAttachment",
)


class ClusterObjects:
    """Objects other than Nodes and Pods, by kind: ``kind -> key -> object``.

    Keys are ``namespace/name`` for namespaced kinds and ``name`` for cluster-scoped ones. The live
    informers update one instance in place; snapshots share it (plugins only read it).
    """

    def __init__(self) -> None:
        self.by_kind: dict[str, dict[str, Obj]] = {k: {} for k in NAMESPACED_KINDS + CLUSTER_KINDS}

    @staticmethod
    def key(kind: str, obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if kind in NAMESPACED_KINDS:
            return f"{meta.get('namespace') or 'default'}/{name}"
        return name

    def upsert(self, kind: str, obj: Obj) -> None:
        self.by_kind.setdefault(kind, {})[self.key(kind, obj)] = obj

    def delete(self, kind: str, obj: Obj) -> None:
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


# -- node columns ------------------------------------------------------------------------------------
ALLOC_CPU, ALLOC_MEM, ALLOC_EPH, ALLOC_PODS, REQ_CPU, REQ_MEM, REQ_EPH, NZ_CPU, NZ_MEM, POD_COUNT = range(10)
"""Row numbers of :attr:`NodeColumns.values`: allocatable milli-CPU / memory bytes / ephemeral-storage
bytes / pod number, requested milli-CPU / memory / ephemeral-storage, non-zero requested milli-CPU /
memory (100m / 200Mi defaults), number of Pods. Rows ``ALLOC_CPU:ALLOC_MEM + 1``, ``REQ_CPU:REQ_MEM +
1`` and ``NZ_CPU:NZ_MEM + 1`` are adjacent (cpu then memory) so both resources slice as one block."""
FREE_PODS, FREE_CPU, FREE_MEM, FREE_EPH = range(10, 14)
"""Derived rows: allocatable pods - Pods, and allocatable - requested milli-CPU / memory /
ephemeral-storage (what ``fitsRequest`` compares the Pod's request with); adjacent, in this order."""
N_COLUMNS = 14
FILTER_LIMIT = 1 << 62
"""A node whose every column value lies in (-2**62, 2**62) can be compared as int64 (``alloc - used``
cannot overflow); others take the Python path."""
SCORE_LIMIT = 1 << 51
"""A node whose allocatable / requested / non-zero requested cpu and memory lie in [0, 2**51) can be
scored on the numpy path (with a Pod request below 2**51 the sums stay below 2**52, so ``* 100``
fits int64 and float64 division sees exact integers); others take the Python path."""
_SCORE_ROWS = (ALLOC_CPU, ALLOC_MEM, REQ_CPU, REQ_MEM, NZ_CPU, NZ_MEM)
_GENERATION = attrgetter("generation")

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def node_column_values(ni: NodeInfo) -> tuple[list[int], bool, bool]:
    """One node's column values in row order (see :data:`ALLOC_CPU` ...) and whether the node is
    usable on the int64 filter path and on the numpy score path (:data:`FILTER_LIMIT`,
    :data:`SCORE_LIMIT`). Values outside int64's comfort zone are replaced by 0 and the derived
    ``FREE_*`` rows are 0 (the node is then not usable on either path)."""
    a, u, z = ni.allocatable, ni.requested, ni.non_zero_requested
    row = [a.milli_cpu, a.memory, a.ephemeral_storage, a.allowed_pod_number, u.milli_cpu, u.memory,
           u.ephemeral_storage, z.milli_cpu, z.memory, len(ni.pods)]
    filter_ok = all(-FILTER_LIMIT < v < FILTER_LIMIT for v in row)
    if not filter_ok:
        return [v if -FILTER_LIMIT < v < FILTER_LIMIT else 0 for v in row] + [0, 0, 0, 0], False, False
    row += [row[ALLOC_PODS] - row[POD_COUNT], row[ALLOC_CPU] - row[REQ_CPU], row[ALLOC_MEM] - row[REQ_MEM],
            row[ALLOC_EPH] - row[REQ_EPH]]
    score_ok = all(0 <= row[k] < SCORE_LIMIT for k in _SCORE_ROWS)
    return row, True, score_ok


Selection = tuple[slice] | tuple[slice, slice] | list[int]
"""Positions in ``node_info_list``: one run, a run wrapping around the end, or any positions."""


def _select(arr: npt.NDArray[Any], sel: Selection) -> npt.NDArray[Any]:
    """``arr[..., sel]`` along the last axis (a view for one run)."""
    if isinstance(sel, list):
        return arr.take(sel, axis=-1)
    if len(sel) == 1:
        return arr[..., sel[0]]
    return np.concatenate((arr[..., sel[0]], arr[..., sel[1]]), axis=-1)


class ScalarColumn:
    """One scalar resource (``nvidia.com/gpu``, ``hugepages-2Mi``, ...) over a snapshot's nodes.

    Attributes:
        alloc: int64 (n,) allocatable ``Value()`` (0 where the node does not list it).
        free: int64 (n,) allocatable - requested.
        ok: bool (n,): both within (-2**62, 2**62) (others are 0 and take the Python path); ``bad``
            counts the False entries.
    """

    __slots__ = ("alloc", "bad", "free", "ok")

    def __init__(self, name: str, nodes: Sequence[NodeInfo]) -> None:
        n = len(nodes)
        self.alloc: Int64Array = np.zeros(n, np.int64)
        self.free: Int64Array = np.zeros(n, np.int64)
        self.ok: BoolArray = np.ones(n, np.bool_)
        self.bad = 0
        for i, ni in enumerate(nodes):
            self.set(i, name, ni)

    def set(self, i: int, name: str, ni: NodeInfo) -> None:
        """Re-read position ``i`` from ``ni``."""
        a = ni.allocatable.scalar.get(name, 0)
        f = a - ni.requested.scalar.get(name, 0)
        ok = -FILTER_LIMIT < a < FILTER_LIMIT and -FILTER_LIMIT < f < FILTER_LIMIT
        self.alloc[i], self.free[i] = (a, f) if ok else (0, 0)
        if bool(self.ok[i]) != ok:
            self.ok[i] = ok
            self.bad += -1 if ok else 1


class GatheredColumns:
    """The columns of some nodes, in the order they were asked for.

    Attributes:
        values: int64 array of shape (:data:`N_COLUMNS`, len(nodes)); row ``ALLOC_CPU`` ... (a view
            of the snapshot's columns when the nodes are a contiguous run of ``node_info_list``: do
            not write to it).
        filter_ok / score_ok: bool arrays (len(nodes),) telling which nodes may use the int64 filter
            / numpy score path; None when every node may.
        columns / selection: where the nodes sit, for :meth:`scalar`.
    """

    __slots__ = ("columns", "filter_ok", "score_ok", "selection", "values")

    def __init__(self, values: Int64Array, filter_ok: BoolArray | None, score_ok: BoolArray | None,
                 columns: NodeColumns, selection: Selection) -> None:
        self.values = values
        self.filter_ok = filter_ok
        self.score_ok = score_ok
        self.columns = columns
        self.selection = selection

    def scalar(self, name: str) -> tuple[Int64Array, Int64Array, BoolArray | None]:
        """(allocatable, allocatable - requested, ok mask or None when all ok) of scalar resource
        ``name`` for these nodes (the snapshot's :class:`ScalarColumn`, built on first use)."""
        col = self.columns.scalar(name)
        sel = self.selection
        return _select(col.alloc, sel), _select(col.free, sel), _select(col.ok, sel) if col.bad else None


class NodeColumns:
    """Resource columns of a Snapshot's nodes in ``node_info_list`` order (numpy, int64).

    Resource Filter / Score plugins read whole chunks of nodes from here instead of walking
    ``NodeInfo.allocatable`` / ``requested`` / ``non_zero_requested`` node by node (issue 9). There is
    no upstream counterpart: kube-scheduler's Go loops read NodeInfo fields directly.

    A node's position is found from its ``NodeInfo.generation`` (bumped on every change, kept by
    ``clone``), so a NodeInfo changed behind the snapshot's back (or a clone with extra Pods) is never
    matched to stale values: :meth:`gather` refreshes the column of a snapshot NodeInfo that changed
    in place and returns None for a NodeInfo the snapshot does not hold (callers then take their
    exact Python path).

    Attributes:
        values: int64 array (:data:`N_COLUMNS`, n).
        filter_ok / score_ok: bool arrays (n,) (see :func:`node_column_values`); ``bad_filter`` /
            ``bad_score`` count the False entries.
        gens: the generation each column reflects; ``pos_by_gen`` / ``pos_by_name`` map back to
            positions.
        source: the ``node_info_list`` the columns were built from (identity decides freshness).
    """

    __slots__ = ("bad_filter", "bad_score", "filter_ok", "gens", "n", "pos_by_gen", "pos_by_name", "scalars",
                 "score_ok", "source", "values")

    def __init__(self, nodes: list[NodeInfo]) -> None:
        n = len(nodes)
        self.source = nodes
        self.n = n
        self.values: Int64Array = np.zeros((N_COLUMNS, n), np.int64)
        self.filter_ok: BoolArray = np.ones(n, np.bool_)
        self.score_ok: BoolArray = np.ones(n, np.bool_)
        self.gens: list[int] = [ni.generation for ni in nodes]
        self.pos_by_gen: dict[int, int] = {g: i for i, g in enumerate(self.gens)}
        self.pos_by_name: dict[str, int] = {ni.name: i for i, ni in enumerate(nodes)}
        self.scalars: dict[str, ScalarColumn] = {}
        rows: list[list[int]] = []
        for i, ni in enumerate(nodes):
            row, f_ok, s_ok = node_column_values(ni)
            rows.append(row)
            if not f_ok:
                self.filter_ok[i] = False
            if not s_ok:
                self.score_ok[i] = False
        if rows:
            self.values = np.array(rows, np.int64).T.copy()
        self.bad_filter = int(n - np.count_nonzero(self.filter_ok))
        self.bad_score = int(n - np.count_nonzero(self.score_ok))

    def fresh_for(self, nodes: list[NodeInfo]) -> bool:
        """Whether these columns were built for this very ``node_info_list`` (same object and length)."""
        return self.source is nodes and len(nodes) == self.n

    def refresh(self, ni: NodeInfo) -> bool:
        """Re-read the column of ``ni`` (a NodeInfo of ``source``, changed in place). False when ``ni``
        is not the snapshot's NodeInfo at its name's position (nothing changed)."""
        i = self.pos_by_name.get(ni.name)
        if i is None or self.source[i] is not ni:
            return False
        old = self.gens[i]
        if self.pos_by_gen.get(old) == i:
            del self.pos_by_gen[old]
        self.gens[i] = ni.generation
        self.pos_by_gen[ni.generation] = i
        row, f_ok, s_ok = node_column_values(ni)
        self.values[:, i] = row
        if bool(self.filter_ok[i]) != f_ok:
            self.filter_ok[i] = f_ok
            self.bad_filter += -1 if f_ok else 1
        if bool(self.score_ok[i]) != s_ok:
            self.score_ok[i] = s_ok
            self.bad_score += -1 if s_ok else 1
        for name, col in self.scalars.items():
            col.set(i, name, ni)
        return True

    def scalar(self, name: str) -> ScalarColumn:
        """The :class:`ScalarColumn` of resource ``name`` (built over ``source`` on first use, then
        kept up to date by :meth:`refresh`)."""
        col = self.scalars.get(name)
        if col is None:
            col = self.scalars[name] = ScalarColumn(name, self.source)
        return col

    def _positions(self, gens: list[int], nodes: Sequence[NodeInfo]) -> list[int] | None:
        pos_by_gen = self.pos_by_gen
        try:
            return list(map(pos_by_gen.__getitem__, gens))
        except KeyError:
            pass
        for ni, g in zip(nodes, gens, strict=True):
            if g not in pos_by_gen and not self.refresh(ni):
                return None
        return list(map(pos_by_gen.__getitem__, gens))

    def _gathered(self, sel: Selection) -> GatheredColumns:
        return GatheredColumns(_select(self.values, sel), _select(self.filter_ok, sel) if self.bad_filter else None,
                               _select(self.score_ok, sel) if self.bad_score else None, self, sel)

    def gather(self, nodes: Sequence[NodeInfo]) -> GatheredColumns | None:
        """The columns of ``nodes`` in their order; None when one of them is not (a same-generation
        copy of) a NodeInfo of the snapshot.

        A contiguous run of ``node_info_list`` (also one wrapping around its end, as the rotating
        start index of Filter produces) costs one attribute read per node and a list compare; any
        other selection one dict lookup per node and a numpy take.
        """
        m = len(nodes)
        gens = list(map(_GENERATION, nodes))
        if m == 0:
            return self._gathered((slice(0, 0),))
        n = self.n
        p0 = self.pos_by_gen.get(gens[0])
        if p0 is not None and m <= n:
            end = p0 + m
            if end <= n:
                if self.gens[p0:end] == gens:
                    return self._gathered((slice(p0, end),))
            elif self.gens[p0:] + self.gens[:end - n] == gens:
                return self._gathered((slice(p0, n), slice(0, end - n)))
        sel = self._positions(gens, nodes)
        if sel is None:
            return None
        return self._gathered(sel)


class Snapshot:
    """NodeInfos of one cycle (``cache.Snapshot``).

    Attributes:
        node_info_map: node name -> NodeInfo (only nodes whose Node object exists).
        node_info_list: the same NodeInfos in node-tree order.
        have_pods_with_affinity_list / have_pods_with_required_anti_affinity_list: NodeInfos with at
            least one such Pod (InterPodAffinity iterates only these).
        objects: the cluster's other objects (shared, read-only here).
        generation: the cache generation this snapshot reflects.

    :meth:`columns` gives the nodes' resource quantities as numpy columns (:class:`NodeColumns`),
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
        self._columns: NodeColumns | None = None

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

    # -- node columns ----------------------------------------------------------------------------
    def columns(self) -> NodeColumns:
        """The :class:`NodeColumns` of ``node_info_list`` (rebuilt when the list object was replaced
        or its length changed; O(nodes) then, O(1) otherwise)."""
        cols = self._columns
        if cols is None or not cols.fresh_for(self.node_info_list):
            cols = self._columns = NodeColumns(self.node_info_list)
        return cols

    def node_changed(self, ni: NodeInfo) -> None:
        """Bring the column of ``ni`` (a NodeInfo of this snapshot that changed in place) up to date;
        nothing to do when no columns were built yet or the node list was replaced since."""
        cols = self._columns
        if cols is not None and cols.fresh_for(self.node_info_list):
            cols.refresh(ni)

    def invalidate_columns(self) -> None:
        """Drop the columns (the next :meth:`columns` rebuilds them)."""
        self._columns = None

    # -- reads -----------------------------------------------------------------------------------
    def get(self, name: str) -> NodeInfo:
        """NodeInfo by node name. Raises KeyError if the node is not in the snapshot."""
        return self.node_info_map[name]

    def num_nodes(self) -> int:
        return len(self.node_info_list)

    def all_pods(self) -> Iterable[PodInfo]:
        for ni in self.node_info_list:
            yield from ni.pods

    # -- in-memory assume (explain / simulate / preemption dry runs) ---------------------------
    def assume(self, pod: PodInfo, node_name: str) -> None:
        """Add ``pod`` to ``node_name`` in this snapshot only (each later Pod sees it).

        Raises:
            KeyError: unknown node.
        """
        ni = self.node_info_map[node_name]
        bound = dict(pod.pod)
        bound["spec"] = dict(bound.get("spec") or {}, nodeName=node_name)
        pi = PodInfo(bound)
        pi.parsed = pod.parsed
        had_aff, had_anti = bool(ni.pods_with_affinity), bool(ni.pods_with_required_anti_affinity)
        ni.add_pod(pi)
        self.node_changed(ni)
        if had_aff != bool(ni.pods_with_affinity) or had_anti != bool(ni.pods_with_required_anti_affinity):
            self.rebuild_lists()
        else:
            for k in pod_pvc_keys(pi.pod):
                self.used_pvc_ref_counts[k] = self.used_pvc_ref_counts.get(k, 0) + 1


def add_image_states(ni: NodeInfo, images: dict[str, ImageStateSummary]) -> None:
    """Attach the node's ``status.images`` to shared per-image summaries (``addNodeImageStates``)."""
    states: dict[str, ImageStateSummary] = {}
    for image in ((ni.node or {}).get("status") or {}).get("images") or []:
        if not isinstance(image, dict):
            continue
        size = image.get("sizeBytes")
        size_i = size if isinstance(size, int) and not isinstance(size, bool) else 0
        for name in image.get("names") or []:
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
