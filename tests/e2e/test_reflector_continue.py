"""The Pod reflector's paged LIST when its ``continue`` token expires in the middle (real
kube-apiserver of the test bed): pages of 2, and after the first page a Pod is deleted, another
created and etcd's history compacted past the list's resourceVersion. kube-apiserver then refuses
the next page with ``410 Expired`` ("The provided continue parameter is too old ...") when it serves
continuations from etcd; client-go's pager (``tools/pager/pager.go``) restarts the list, and so must
the reflector: it ends with the store equal to a fresh LIST (the deleted Pod gone, the created one
present, nothing swept on the partial list) and watches from the new list's resourceVersion. The
test bed's kube-apiserver (1.37) serves the continuation from its watch cache's snapshot instead:
no 410, the pages stay one consistent snapshot from before the gap and the watch delivers the gap;
the same end state is asserted either way. The 410 restart itself is covered without a server by
``tests/unit/app/test_reflector_adversarial.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from py_scheduler.app.client.informers import ObjectStore
from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.reflector import Reflector
from py_scheduler.app.client.wire import KubeError
from py_scheduler.framework.events import Resource
from tests.e2e.faults.scenarios import etcd_compact
from tests.e2e.helpers import NamespacedPods, Testbed, create_pod, delete_pod, unique_name, wait_for

Obj = dict[str, Any]



class CompactingSource:
    """The real adapter, with a hook after the first page of the first LIST (the gap maker)."""

    def __init__(self, kube: Kube, after_first_page: Any) -> None:
        self.kube = kube
        self.after_first_page = after_first_page
        self.lists = 0
        self.expired: list[KubeError] = []
        self.listed: list[list[str]] = []  # the names each LIST returned (over its pages)

    async def list_pages(self, path: str, **kw: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        self.lists += 1
        first = self.lists == 1
        pages = 0
        self.listed.append([])
        try:
            async for page in self.kube.list_pages(path, **kw):
                self.listed[-1] += [o["metadata"]["name"] for o in page[0]]
                yield page
                pages += 1
                if first and pages == 1:
                    await self.after_first_page()
        except KubeError as exc:
            if exc.status == 410:
                self.expired.append(exc)
            raise

    def watch(self, path: str, query: dict[str, Any], **kw: Any) -> AsyncIterator[Obj]:
        return self.kube.watch(path, query, **kw)


async def test_continue_token_expiring_mid_list_restarts_the_list(
        testbed: Testbed, api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    ns = unique_name("refl-cont")
    await core.create_namespace({"metadata": {"name": ns}})
    wk = NamespacedPods("Pod", "v1", "pods", True, Resource.POD, "status.phase!=Succeeded,status.phase!=Failed", ns=ns)
    kube = await Kube.connect(testbed.kubeconfig)
    names = sorted(unique_name("rc") for _ in range(7))
    late = unique_name("rc-late")

    async def gap() -> None:
        # after page 1 (names[0], names[1]): names[5] deleted, one Pod created, history compacted
        await delete_pod(api_client, names[5], ns)
        await create_pod(api_client, late, ns, scheduler_name="nobody")
        await asyncio.to_thread(etcd_compact, testbed)

    source = CompactingSource(kube, gap)
    store = ObjectStore()
    reflector = Reflector(source, wk, store, lambda *_: None, min_watch_timeout=30, page_limit=2,
                          backoff_initial=0.1, backoff_max=0.5)

    async def same_as_fresh_list() -> bool:
        items = [o async for page, _ in kube.list_pages(wk.list_path, field_selector=wk.field_selector)
                 for o in page]
        want = {wk.key(o): str(o["metadata"]["resourceVersion"]) for o in items}
        have = {wk.key(o): str(o["metadata"]["resourceVersion"]) for o in store.list_kind("Pod")}
        return have == want

    stop = asyncio.Event()
    task: asyncio.Future[None] | None = None
    try:
        for n in names:
            await create_pod(api_client, n, ns, scheduler_name="nobody")
        task = asyncio.ensure_future(reflector.run(stop))
        await asyncio.wait_for(reflector.listed.wait(), timeout=60)
        if source.expired:  # served from etcd: the 410 on the continuation restarted the list
            assert source.lists == 2 and "continue" in source.expired[0].message
            assert names[5] not in source.listed[1] and late in source.listed[1]  # a list after the gap
        else:  # one consistent snapshot from before the gap (the watch cache's); the watch delivers the gap
            assert source.lists == 1 and source.listed[0] == names
        await wait_for(same_as_fresh_list, timeout=30, what="the store to equal a fresh LIST")
        assert store.get("Pod", f"{ns}/{names[5]}") is None and store.get("Pod", f"{ns}/{late}") is not None
        # and the watch runs from the list's resourceVersion
        await core.patch_namespaced_pod(late, ns, {"metadata": {"labels": {"after": "list"}}})
        await wait_for(same_as_fresh_list, timeout=30, what="an event on the watch after the list")
    finally:
        stop.set()
        if task is not None:
            await asyncio.wait_for(task, timeout=10)
        for n in [*names, late]:
            await delete_pod(api_client, n, ns, wait=False)
        await kube.close()
