"""The reflector (``py_scheduler.app.client.reflector``, the watch machinery of every kind) against the real
kube-apiserver of the test bed: the Pods, then a cluster-scoped kind (Nodes) across a 410 gap.

One reflector over the Pods of a fresh namespace (its namespaced path keeps other tests' Pods out; a
``metadata.namespace=`` field selector on the cluster-wide path does not do: kube-apiserver 1.37's
paged LIST then repeats the first page, its continue key being relative to the namespace):
it LISTs in pages, WATCHes, survives watches the server closes (``timeoutSeconds`` of 2-4 s), is
stopped while Pods change, etcd is compacted and kube-apiserver restarted (as in the fault suite's
watch-gap scenario), and resumes from a resourceVersion the server no longer has: ``410 Gone`` -> a
re-LIST whose reconcile deletes what vanished. Every step ends with the store
equal to a fresh LIST (same keys, same resourceVersions).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from py_scheduler.app.client.informers import KINDS_BY_NAME, ObjectStore, WatchedKind
from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.reflector import Reflector
from py_scheduler.framework.events import Resource
from tests.e2e.faults.scenarios import etcd_compact
from tests.e2e.helpers import (
    NamespacedPods,
    Testbed,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    unique_name,
    wait_for,
)

Obj = dict[str, Any]


def _rvs(objs: list[Obj], wk: WatchedKind) -> dict[str, str]:
    return {wk.key(o): str(o["metadata"]["resourceVersion"]) for o in objs}


async def test_reflector_lists_watches_rewatches_and_relists_after_410(
        testbed: Testbed, api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    ns = unique_name("reflector")
    await core.create_namespace({"metadata": {"name": ns}})
    wk = NamespacedPods("Pod", "v1", "pods", True, Resource.POD, "status.phase!=Succeeded,status.phase!=Failed", ns=ns)
    kube = await Kube.connect(testbed.kubeconfig)
    store = ObjectStore()
    deltas: list[tuple[Obj | None, Obj | None]] = []
    gaps: list[str] = []
    reflector = Reflector(kube, wk, store, lambda _wk, old, new: deltas.append((old, new)),
                          on_relist_start=gaps.append, min_watch_timeout=2, page_limit=3)

    async def same_as_fresh_list() -> bool:
        items = [o async for page, _ in kube.list_pages(wk.list_path, field_selector=wk.field_selector)
                 for o in page]
        assert _rvs(store.list_kind("Pod"), wk) == _rvs(items, wk)
        return True

    names = [unique_name("rp") for _ in range(7)]
    try:
        for n in names[:5]:
            await create_pod(api_client, n, ns, scheduler_name="nobody")
        # LIST (in pages of 3) then WATCH
        stop = asyncio.Event()
        task = asyncio.ensure_future(reflector.run(stop))
        await asyncio.wait_for(reflector.listed.wait(), timeout=30)
        assert len(store.list_kind("Pod")) == 5 and len(deltas) == 5
        await same_as_fresh_list()
        # changes arrive through the watch
        for n in names[5:]:
            await create_pod(api_client, n, ns, scheduler_name="nobody")
        await delete_pod(api_client, names[0], ns)
        await core.patch_namespaced_pod(names[1], ns, {"metadata": {"labels": {"touched": "yes"}}})
        await wait_for(same_as_fresh_list, timeout=30, what="the watch to deliver creations, a deletion, a patch")
        assert store.get("Pod", f"{ns}/{names[1]}")["metadata"]["labels"] == {"touched": "yes"}  # type: ignore[index]
        # the server ends each watch after 2-4 s: the reflector re-watches from its resourceVersion
        watches = reflector.watches
        await wait_for(lambda: reflector.watches >= watches + 2, timeout=30, what="two watches closed by the server")
        await core.patch_namespaced_pod(names[2], ns, {"metadata": {"labels": {"after": "rewatch"}}})
        await wait_for(same_as_fresh_list, timeout=30, what="an event on a re-opened watch")
        assert reflector.lists == 1 and gaps == []
        # a gap: stopped while Pods change, history compacted, then resumed from a too old resourceVersion
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        await delete_pod(api_client, names[3], ns)
        await delete_pod(api_client, names[4], ns)
        late = unique_name("rp-late")
        await create_pod(api_client, late, ns, scheduler_name="nobody")
        names.append(late)
        old_rv = reflector.last_rv
        rev = await asyncio.to_thread(etcd_compact, testbed)
        assert int(old_rv) < rev
        # a fresh watch cache starts at etcd's current revision: old_rv is older than anything it holds
        # (and etcd's history before ``rev`` is gone), so the resumed watch gets 410 Gone
        await asyncio.to_thread(testbed.restart_apiserver)
        before = reflector.lists
        stop = asyncio.Event()
        task = asyncio.ensure_future(reflector.run(stop))
        await wait_for(lambda: reflector.lists > before, timeout=30, what="the re-list after 410")
        assert gaps and "410" in gaps[0]
        assert store.get("Pod", f"{ns}/{names[3]}") is None and store.get("Pod", f"{ns}/{late}") is not None
        await same_as_fresh_list()
        # and it watches again afterwards
        await core.patch_namespaced_pod(late, ns, {"metadata": {"labels": {"after": "relist"}}})
        await wait_for(same_as_fresh_list, timeout=30, what="an event after the re-list")
        stop.set()
        await asyncio.wait_for(task, timeout=10)
    finally:
        for n in names:
            await delete_pod(api_client, n, ns, wait=False)
        await kube.close()


async def test_node_deleted_during_a_watch_gap_becomes_a_delete_event(
        testbed: Testbed, api_client: client.ApiClient) -> None:
    """The Node kind through the same machinery: a Node deleted while no watch ran (etcd compacted,
    kube-apiserver restarted) reaches the handler as ``(old, None)`` from the re-LIST after 410, and
    a Node modified in the same gap as ``(old, new)``."""
    wk = KINDS_BY_NAME["Node"]
    kube = await Kube.connect(testbed.kubeconfig)
    store = ObjectStore()
    deltas: list[tuple[Obj | None, Obj | None]] = []
    gaps: list[str] = []
    reflector = Reflector(kube, wk, store, lambda _wk, old, new: deltas.append((old, new)),
                          on_relist_start=gaps.append, min_watch_timeout=2, page_limit=2)
    gone, kept = unique_name("gap-gone"), unique_name("gap-kept")
    try:
        await create_node(api_client, gone)
        await create_node(api_client, kept)
        stop = asyncio.Event()
        task = asyncio.ensure_future(reflector.run(stop))
        await asyncio.wait_for(reflector.listed.wait(), timeout=30)
        assert store.get("Node", gone) is not None and store.get("Node", kept) is not None
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        # the gap
        await delete_node(api_client, gone)
        await client.CoreV1Api(api_client).patch_node(kept, {"metadata": {"labels": {"during": "gap"}}})
        old_rv = reflector.last_rv
        rev = await asyncio.to_thread(etcd_compact, testbed)
        assert int(old_rv) < rev
        await asyncio.to_thread(testbed.restart_apiserver)
        deltas.clear()
        before = reflector.lists
        stop = asyncio.Event()
        task = asyncio.ensure_future(reflector.run(stop))
        await wait_for(lambda: reflector.lists > before, timeout=30, what="the Node re-list after 410")
        assert gaps and "410" in gaps[0]
        deleted = [old for old, new in deltas if new is None and old is not None]
        assert [o["metadata"]["name"] for o in deleted] == [gone]
        updated = [(old, new) for old, new in deltas if old is not None and new is not None
                   and new["metadata"]["name"] == kept]
        assert len(updated) == 1 and "during" not in (updated[0][0]["metadata"].get("labels") or {})
        assert updated[0][1]["metadata"]["labels"]["during"] == "gap"
        assert store.get("Node", gone) is None
        stop.set()
        await asyncio.wait_for(task, timeout=10)
    finally:
        await delete_node(api_client, gone)
        await delete_node(api_client, kept)
        await kube.close()
