"""What a scheduling cycle reads: the snapshot lister Protocols the framework owns.

Upstream: ``staging/src/k8s.io/kube-scheduler/framework/listers.go`` (``SharedLister``: ``NodeInfos()``
with ``List`` / ``HavePodsWithAffinityList`` / ``HavePodsWithRequiredAntiAffinityList`` / ``Get``, and
``StorageInfos()`` with ``IsPVCUsedByPods``) and ``pkg/scheduler/backend/cache/snapshot.go`` (the
implementation). Here the implementation is :class:`py_scheduler.cache.snapshot.Snapshot` (live
cache, snapshot files, tests); the framework and the plugins read it only through
:class:`SnapshotLister`, so they do not import the cache (layers point down: the cache sits above the
plugins and implements what the framework declares).

Plugin-owned derived data (e.g. NodeResourcesFit's numpy resource columns) is registered with a
snapshot through :meth:`SnapshotLister.derived` with a :class:`DerivedFactory`: the snapshot builds
the structure on first use after its node list changed, and hands every NodeInfo it changes in place
to :meth:`NodeDerived.refresh`, so the structure is never read stale and the snapshot knows nothing
about what it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, TypeVar

from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import ImageStateSummary, NodeInfo, PodInfo


class ClusterObjectsLister(Protocol):
    """Objects other than Nodes and Pods, by kind (Services, PVCs, ResourceSlices, ...).

    ``key`` is ``namespace/name`` for namespaced kinds and ``name`` for cluster-scoped ones;
    ``by_kind`` is ``kind -> key -> object`` (read only).
    """

    @property
    def by_kind(self) -> Mapping[str, Mapping[str, Obj]]: ...

    def get(self, kind: str, key: str) -> Obj | None:
        """The object, or None."""
        ...

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Every object of ``kind`` (only those of ``namespace`` when given)."""
        ...

    def upsert(self, kind: str, obj: Obj) -> None:
        """Put ``obj`` in this in-memory view (an assumed write of the binding cycle, e.g. DRA's
        allocation in explain / simulate); never an API write."""
        ...


class NodeDerived(Protocol):
    """A structure derived from a snapshot's ``node_info_list`` and kept up to date node by node."""

    def fresh_for(self, nodes: list[NodeInfo]) -> bool:
        """Whether it was built for this very list object (same identity and length)."""
        ...

    def refresh(self, ni: NodeInfo) -> bool:
        """Re-read ``ni`` (a NodeInfo of the list, changed in place); False when it is not there."""
        ...


D = TypeVar("D", bound=NodeDerived)
DerivedFactory = Callable[[list[NodeInfo]], D]
"""Builds a :class:`NodeDerived` over a node list (O(nodes)); the factory object is also its key."""


class SnapshotLister(Protocol):
    """The read-only view of the cluster one scheduling cycle works on (``fwk.SharedLister``).

    Attributes:
        node_info_map: node name -> NodeInfo. node_info_list: the same NodeInfos in node-tree order
            (zones interleaved), the order Filter walks from its rotating start index.
        have_pods_with_affinity_list / have_pods_with_required_anti_affinity_list: NodeInfos with at
            least one such Pod.
        objects: the cluster's other objects (read-only).
        used_pvc_ref_counts: ``namespace/claim`` -> number of Pods using it (``IsPVCUsedByPods``).
        generation: the cache generation the snapshot reflects.
        images: image name -> its shared summary, for the images of every node (the cache's
            ``imageStates`` in upstream's ``backend/cache/cache.go``; ``NewSnapshot``'s image
            existence map in ``snapshot.go``); None when not known (then no plugin may infer from
            it that no node holds an image).
    """

    node_info_map: dict[str, NodeInfo]
    node_info_list: list[NodeInfo]
    have_pods_with_affinity_list: list[NodeInfo]
    have_pods_with_required_anti_affinity_list: list[NodeInfo]
    used_pvc_ref_counts: dict[str, int]
    generation: int
    images: Mapping[str, ImageStateSummary] | None

    @property
    def objects(self) -> ClusterObjectsLister: ...

    def get(self, name: str) -> NodeInfo:
        """NodeInfo by node name. Raises KeyError if absent."""
        ...

    def num_nodes(self) -> int: ...

    def all_pods(self) -> Iterable[PodInfo]: ...

    def derived(self, factory: DerivedFactory[D]) -> D:
        """The structure ``factory`` builds over ``node_info_list``: built on first use after the list
        changed, then kept up to date by the snapshot (see the module docstring)."""
        ...


class _NoObjects:
    """A :class:`ClusterObjectsLister` with nothing in it (a cycle without a snapshot)."""

    by_kind: Mapping[str, Mapping[str, Obj]] = {}

    def get(self, kind: str, key: str) -> Obj | None:
        return None

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        return []

    def upsert(self, kind: str, obj: Obj) -> None:
        return None


def objects_of(snapshot: SnapshotLister | None) -> ClusterObjectsLister:
    """``snapshot.objects``, or an empty lister when there is no snapshot (plugins called outside a
    cycle, e.g. in unit tests with a bare CycleState)."""
    return snapshot.objects if snapshot is not None else _NoObjects()
