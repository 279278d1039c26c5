"""In-memory stand-ins for the API adapter (``py_scheduler.app.client.kube.Kube``) used by the app unit tests."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from py_scheduler.app.client.wire import Conflict, KubeError, NotFound

Obj = dict[str, Any]

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "%(server)s", insecure-skip-tls-verify: true%(cluster_extra)s}
users:
- name: u
  user: {%(user)s}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


def kubeconfig_file(tmp_path: Path, server: str = "https://api.example.test:6443", user: str = "token: abc",
                    cluster_extra: str = "") -> Path:
    """``tmp_path/kubeconfig``: one cluster at ``server`` (``cluster_extra``: more of its fields, each
    starting with ", "), one user (``user``: its fields), current."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG % {"server": server, "user": user, "cluster_extra": cluster_extra})
    return path


class FakeKube:
    """Records every write; Leases live in a dict with resourceVersion checks like the API."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.bind_error: KubeError | None = None
        self.bound_annotations: dict[str, dict[str, str]] = {}
        self.lease_error: KubeError | None = None
        self.events: list[Obj] = []
        self.status_patches: list[tuple[str, Obj]] = []
        self.deleted: list[tuple[str, str | None]] = []
        self.leases: dict[str, Obj] = {}
        self._rv = 100
        self.lists: dict[str, tuple[list[Obj], str]] = {}
        self.watch_feeds: dict[str, asyncio.Queue[Any]] = {}
        self.watch_calls: list[tuple[str, dict[str, Any]]] = []
        self.list_calls: list[str] = []
        self.objects: dict[str, Obj] = {}
        """API path -> object, for :meth:`request` (what PreBind plugins read and write)."""

    # generic requests (KubeAPIClient): GET / PUT with resourceVersion precondition (a status
    # subresource replaces only the status) / merge PATCH / DELETE on ``objects``
    def put_object(self, path: str, obj: Obj) -> None:
        stored = copy.deepcopy(obj)
        self._rv += 1
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self.objects[path] = stored

    async def request(self, method: str, path: str, *, body: Any = None, fence: Any = None, **_: Any) -> Any:
        if fence is not None and method != "GET":
            fence()
        self.calls.append((method.lower(), path))
        base = path.removesuffix("/status")
        cur = self.objects.get(base)
        if method == "GET":
            if cur is None:
                raise NotFound(404, "NotFound", path)
            return copy.deepcopy(cur)
        if cur is None:
            raise NotFound(404, "NotFound", path)
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                raise Conflict(409, "Conflict", "the object has been modified")
            new = copy.deepcopy(cur)
            if path.endswith("/status"):
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new["metadata"] = copy.deepcopy(body["metadata"])
                new["spec"] = copy.deepcopy(body.get("spec"))
            self.put_object(base, new)
            return copy.deepcopy(self.objects[base])
        if method == "DELETE":
            del self.objects[base]
            return {}
        raise NotImplementedError(method)

    # pods
    async def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None,
                   fence: Any = None) -> None:
        if fence is not None:
            fence()
        self.calls.append(("bind", (f"{namespace}/{name}", node, uid)))
        self.bound_annotations[f"{namespace}/{name}"] = dict(annotations or {})
        if self.bind_error is not None:
            raise self.bind_error

    async def patch_pod_status(self, namespace: str, name: str, patch: Obj, low_priority: bool = False) -> Obj:
        self.calls.append(("status", f"{namespace}/{name}"))
        self.status_patches.append((f"{namespace}/{name}", patch))
        return {}

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None,
                         grace_period_seconds: int | None = None) -> None:
        self.calls.append(("delete", f"{namespace}/{name}"))
        self.deleted.append((f"{namespace}/{name}", uid))

    # events
    async def create_event(self, namespace: str, event: Obj) -> Obj:
        self.calls.append(("event", event["reason"]))
        self.events.append(event)
        return event

    async def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        self.calls.append(("event-series", name))
        for ev in self.events:
            if ev["metadata"]["name"] == name:
                ev["series"] = patch["series"]
                return ev
        raise NotFound(404, "NotFound", name)

    # lists
    async def list_objects(self, path: str, **_: Any) -> tuple[list[Obj], str]:
        if path not in self.lists:
            raise NotFound(404, "NotFound", path)
        items, rv = self.lists[path]
        return copy.deepcopy(items), rv

    # streaming (the reflector): LIST pages from ``lists``; a watch yields what is put into
    # ``watch_feed(path)``: an event dict, an exception (raised), or None (the server ends the watch)
    async def list_pages(self, path: str, *, limit: int = 500, **_: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        self.list_calls.append(path)
        items, rv = await self.list_objects(path)
        for i in range(0, max(len(items), 1), limit):
            yield items[i:i + limit], rv

    def watch_feed(self, path: str) -> asyncio.Queue[Any]:
        return self.watch_feeds.setdefault(path, asyncio.Queue())

    async def watch(self, path: str, query: Any, **_: Any) -> AsyncIterator[Obj]:
        self.watch_calls.append((path, dict(query)))
        feed = self.watch_feed(path)
        while True:
            ev = await feed.get()
            if ev is None:
                return
            if isinstance(ev, BaseException):
                raise ev
            yield ev

    # leases
    async def get_lease(self, namespace: str, name: str, timeout: float = 0) -> Obj | None:
        if self.lease_error is not None:
            raise self.lease_error
        lease = self.leases.get(f"{namespace}/{name}")
        return copy.deepcopy(lease) if lease is not None else None

    async def create_lease(self, namespace: str, lease: Obj, timeout: float = 0) -> Obj:
        if self.lease_error is not None:
            raise self.lease_error
        key = f"{namespace}/{lease['metadata']['name']}"
        if key in self.leases:
            raise Conflict(409, "AlreadyExists", key)
        self._rv += 1
        stored = copy.deepcopy(lease)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self.leases[key] = stored
        return copy.deepcopy(stored)

    async def update_lease(self, namespace: str, name: str, lease: Obj, timeout: float = 0) -> Obj:
        if self.lease_error is not None:
            raise self.lease_error
        key = f"{namespace}/{name}"
        cur = self.leases.get(key)
        if cur is None:
            raise NotFound(404, "NotFound", key)
        if lease["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        self._rv += 1
        stored = copy.deepcopy(lease)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self.leases[key] = stored
        return copy.deepcopy(stored)
