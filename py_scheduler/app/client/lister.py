"""The Handle's ``ObjectLister`` on the live informers (upstream: the ``SharedInformerFactory`` listers a
plugin gets from ``fwk.Handle``).

Reads the informers' :class:`~py_scheduler.app.client.informers.ObjectStore`, which holds the latest object of
every watched kind as watch events arrive (Pods, Nodes, PVs, PVCs, StorageClasses, CSINodes,
ResourceClaims...). Binding-cycle plugins poll it (VolumeBinding's PreBind waits on it until the PV
controller reports a claim bound); the scheduling cycle reads its Snapshot instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from py_scheduler.framework.objects import Obj

__all__ = ["InformerLister"]



class _Store(Protocol):
    def get(self, kind: str, key: str) -> Obj | None: ...

    def list_kind(self, kind: str) -> list[Obj]: ...

    def version(self, kind: str) -> int: ...


class InformerLister:
    """``ObjectLister`` over an informer store keyed ``namespace/name`` (namespaced kinds) or ``name``."""

    def __init__(self, store: _Store) -> None:
        self.store = store

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The latest watched object, or None; ``namespace`` is ``""`` for cluster-scoped kinds."""
        return self.store.get(kind, f"{namespace}/{name}" if namespace else name)

    def list(self, kind: str) -> Iterable[Obj]:
        """Every watched object of ``kind``."""
        return self.store.list_kind(kind)

    def version(self, kind: str) -> int:
        """Changes whenever the informers store or remove an object of ``kind`` (``VersionedLister``)."""
        return self.store.version(kind)
