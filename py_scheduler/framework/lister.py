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

The Protocols are defined in :mod:`py_scheduler.framework.types` (``CycleState.snapshot`` is typed by
them, and types must not import this module back) and exported from here, their public home.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py_scheduler.framework.types import (
    ClusterObjectsLister as ClusterObjectsLister,
)
from py_scheduler.framework.types import (
    D as D,
)
from py_scheduler.framework.types import (
    DerivedFactory as DerivedFactory,
)
from py_scheduler.framework.types import (
    NodeDerived as NodeDerived,
)
from py_scheduler.framework.types import (
    SnapshotLister as SnapshotLister,
)

Obj = dict[str, Any]


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
