"""InformerLister: the Handle's ObjectLister over the informer store (namespaced and cluster-scoped keys)."""

from __future__ import annotations

from py_scheduler.app.client.informers import KINDS, ObjectStore
from py_scheduler.app.client.lister import InformerLister


def test_reads_the_latest_watched_objects_by_kind_namespace_and_name() -> None:
    store = ObjectStore()
    kinds = {wk.kind: wk for wk in KINDS}
    pvc = {"metadata": {"name": "data", "namespace": "ml", "resourceVersion": "3"}}
    pv = {"metadata": {"name": "pv-1", "resourceVersion": "4"}}
    store.apply(kinds["PersistentVolumeClaim"], None, pvc)
    store.apply(kinds["PersistentVolume"], None, pv)
    lister = InformerLister(store)
    assert lister.get("PersistentVolumeClaim", "ml", "data") == pvc
    assert lister.get("PersistentVolume", "", "pv-1") == pv
    assert lister.get("PersistentVolumeClaim", "default", "data") is None
    newer = {"metadata": {"name": "pv-1", "resourceVersion": "5"}, "spec": {"claimRef": {"name": "data"}}}
    store.apply(kinds["PersistentVolume"], "MODIFIED", newer)
    assert lister.get("PersistentVolume", "", "pv-1") == newer
    assert list(lister.list("PersistentVolume")) == [newer]
