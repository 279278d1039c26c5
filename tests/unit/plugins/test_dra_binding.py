"""DynamicResources' binding cycle (PreBind / Unreserve) against an in-memory API that enforces
resourceVersion preconditions, as the real one does (the e2e tests run it on the bed).

Covers: allocation + finalizer + reservation written, a conflict re-read and retried, conflicts
that persist, a claim deleted or allocated elsewhere meanwhile, Unreserve taking the reservation
back, binding conditions waited for (ready, failed, timed out), PreBindPreFlight's Skip.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, Mapping
from typing import Any

from bench.parity_lib.runner import MinChoice
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import ProfileConfig, build_framework
from py_scheduler.framework.handle import APIConflict, APINotFound, Handle
from py_scheduler.framework.types import Code, PodInfo
from py_scheduler.plugins import registry
from py_scheduler.plugins.dynamic_resources import STATE_KEY, DynamicResources
from py_scheduler.plugins.dynamic_resources.binding import FINALIZER
from py_scheduler.plugins.dynamic_resources.dra_manager import forget_stale_in_flight, gather_allocated_state
from tests.unit.plugins.test_dynamic_resources import (
    G,
    Obj,
    _snapshot,
    claim,
    ctr,
    dclass,
    dev,
    ex,
    node,
    pod,
    rslice,
    uses,
)


class FakeAPI:
    """ResourceClaims by path; ``update`` checks resourceVersion and bumps it; ``conflicts`` makes
    the next N writes fail with 409 after bumping the stored version (someone else wrote)."""

    def __init__(self, claims: Iterable[Obj]) -> None:
        self.objs: dict[str, Obj] = {}
        self.rv = 100
        for c in claims:
            c = copy.deepcopy(c)
            c["metadata"]["resourceVersion"] = self._next()
            self.objs[self._path(c)] = c
        self.conflicts = 0
        self.writes: list[tuple[str, str]] = []
        self.patches: list[tuple[str, Obj, str]] = []

    def _next(self) -> str:
        self.rv += 1
        return str(self.rv)

    @staticmethod
    def _path(c: Mapping[str, Any]) -> str:
        m = c["metadata"]
        return f"/apis/resource.k8s.io/v1/namespaces/{m['namespace']}/resourceclaims/{m['name']}"

    async def get(self, path: str) -> Obj | None:
        o = self.objs.get(path)
        return copy.deepcopy(o) if o is not None else None

    async def create(self, path: str, obj: Obj) -> Obj:
        new = copy.deepcopy(obj)
        meta = new["metadata"]
        meta["name"] = meta.pop("generateName") + "x7k2q"
        meta["uid"] = "uid-created"
        meta["resourceVersion"] = self._next()
        self.objs[f"{path}/{meta['name']}"] = new
        self.writes.append(("create", path))
        return copy.deepcopy(new)

    async def update(self, path: str, obj: Obj) -> Obj:
        base = path.removesuffix("/status")
        cur = self.objs.get(base)
        if cur is None:
            raise APINotFound(404, "NotFound", "not found")
        if self.conflicts > 0:
            self.conflicts -= 1
            cur["metadata"]["resourceVersion"] = self._next()
            raise APIConflict(409, "Conflict", "the object has been modified; please apply your changes to the "
                                               "latest version and try again")
        if obj["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise APIConflict(409, "Conflict", "the object has been modified")
        new = copy.deepcopy(cur)
        if path.endswith("/status"):
            new["status"] = copy.deepcopy(obj.get("status"))
        else:
            new["metadata"]["finalizers"] = list(obj["metadata"].get("finalizers") or [])
        new["metadata"]["resourceVersion"] = self._next()
        self.objs[base] = new
        self.writes.append(("update", path))
        return copy.deepcopy(new)

    async def patch(self, path: str, patch: Obj, content_type: str = "application/merge-patch+json") -> Obj:
        self.patches.append((path, patch, content_type))
        base = path.removesuffix("/status")
        if "/pods/" in path or "status" not in patch:
            return {}
        cur = self.objs[base]
        drop = {d["uid"] for d in patch["status"]["reservedFor"]}
        cur["status"]["reservedFor"] = [r for r in cur["status"].get("reservedFor") or [] if r["uid"] not in drop]
        return copy.deepcopy(cur)

    async def delete(self, path: str, uid: str | None = None) -> None:
        assert uid is None or self.objs[path]["metadata"]["uid"] == uid
        del self.objs[path]

    async def bind(self, namespace: str, name: str, uid: str, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> None:
        raise NotImplementedError


class Lister:
    """The informers' view: whatever the fake API holds now."""

    def __init__(self, api: FakeAPI) -> None:
        self.api = api

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.api.objs.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}")

    def list(self, kind: str) -> Iterable[Obj]:
        return list(self.api.objs.values())


def cluster(*claims: Obj, devices: list[Obj] | None = None) -> list[Obj]:
    return [node("a"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("s-a", G, "pa", node="a", devices=devices or [dev("g0"), dev("g1")]), *claims,
            pod("p", uses(*[c["metadata"]["name"] for c in claims]))]


def reserved(objs: list[Obj]) -> tuple[DynamicResources, Any, PodInfo]:
    """Schedule the one pending Pod and run Reserve; returns the plugin, the cycle state, the Pod."""
    snap = _snapshot(objs)
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    p = next(o for o in objs if o["kind"] == "Pod")
    pi = PodInfo(p)
    res = Algorithm(rng=MinChoice()).schedule(fw, snap, pi, explain=True)
    assert res.selected == "a" and res.state is not None
    assert fw.run_reserve(res.state, pi, "a").is_success()
    plugin = fw.plugins["DynamicResources"]
    assert isinstance(plugin, DynamicResources)
    return plugin, res.state, pi


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_pre_bind_writes_finalizer_allocation_and_reservation() -> None:
    c = claim("c", [{"name": "r", "exactly": ex()}])
    objs = cluster(c)
    plugin, state, pi = reserved(objs)
    api = FakeAPI([c])
    plugin.handle = Handle.detached(objects=Lister(api), client=api)
    assert plugin.pre_bind_pre_flight(state, pi, "a").is_success()
    st = run(plugin.pre_bind(state, pi, "a"))
    assert st.is_success(), st
    stored = api.objs[FakeAPI._path(c)]
    assert stored["metadata"]["finalizers"] == [FINALIZER]
    alloc = stored["status"]["allocation"]
    assert alloc["devices"]["results"] == [{"request": "r", "driver": G, "pool": "pa", "device": "g0"}]
    assert alloc["allocationTimestamp"].endswith("Z")
    assert stored["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert api.writes == [("update", FakeAPI._path(c)), ("update", FakeAPI._path(c) + "/status")]


class Behind:
    """An informer view set by hand (``claims``: what the watch has delivered so far)."""

    def __init__(self, *claims: Obj) -> None:
        self.claims = {f'{c["metadata"]["namespace"]}/{c["metadata"]["name"]}': c for c in claims}

    def get(self, kind: str, key: str) -> Obj | None:
        return self.claims.get(key)

    def list(self, kind: str) -> Iterable[Obj]:
        return list(self.claims.values())


def test_a_written_allocation_stays_in_flight_until_the_informer_reaches_the_write() -> None:
    """Upstream assumes the written claim (AssumeClaimAfterAPICall) and the informer's newer object
    replaces it. Found side by side: a Pod deleted right after binding, its named claim then
    deallocated, left the device in flight for ever (the next Pod: "is in the process of being
    allocated", another claim: "cannot allocate all claims"), where kube-scheduler reused it."""
    c = claim("c", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c))
    api = FakeAPI([c])
    plugin.handle = Handle.detached(client=api)
    before = copy.deepcopy(api.objs[FakeAPI._path(c)])
    assert run(plugin.pre_bind(state, pi, "a")).is_success()
    written = api.objs[FakeAPI._path(c)]
    assert plugin.in_flight_claims() == ["default/c"]
    forget_stale_in_flight(Behind(before), plugin._in_flight)  # the watch has not brought the write yet
    assert plugin.in_flight_claims() == ["default/c"]
    assert gather_allocated_state(Behind(before), plugin._in_flight).dedicated == {(G, "pa", "g0")}
    deallocated = copy.deepcopy(written)
    deallocated["status"] = {}
    deallocated["metadata"]["resourceVersion"] = str(int(written["metadata"]["resourceVersion"]) + 5)
    forget_stale_in_flight(Behind(deallocated), plugin._in_flight)  # the Pod went, the controller deallocated
    assert plugin.in_flight_claims() == []
    assert gather_allocated_state(Behind(deallocated), plugin._in_flight).dedicated == set()


def test_conflict_rereads_and_retries_then_gives_up_after_five() -> None:
    c = claim("c", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c))
    api = FakeAPI([c])
    api.conflicts = 2
    plugin.handle = Handle.detached(client=api)
    assert run(plugin.pre_bind(state, pi, "a")).is_success()
    assert api.objs[FakeAPI._path(c)]["status"]["reservedFor"][0]["uid"] == "uid-p"

    plugin, state, pi = reserved(cluster(c))
    api = FakeAPI([c])
    api.conflicts = 10
    plugin.handle = Handle.detached(client=api)
    st = run(plugin.pre_bind(state, pi, "a"))
    assert st.code == Code.ERROR
    assert st.message() == ("add finalizer to claim default/c: the object has been modified; please apply your "
                            "changes to the latest version and try again")
    assert api.conflicts == 5  # five tries, as client-go's DefaultRetry


def test_claim_deleted_or_allocated_meanwhile_fails_prebind() -> None:
    c = claim("c", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c))
    gone = copy.deepcopy(c)
    gone["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    api = FakeAPI([gone])
    api.conflicts = 1  # the first write conflicts; the re-read shows the deletion
    plugin.handle = Handle.detached(client=api)
    # The cycle's copy of the claim is not being deleted: only the re-read shows it.
    st = run(plugin.pre_bind(state, pi, "a"))
    assert st.code == Code.ERROR and st.message() == "claim default/c got deleted in the meantime"

    plugin, state, pi = reserved(cluster(c))
    other = copy.deepcopy(c)
    other["status"] = {"allocation": {"devices": {"results": [
        {"request": "r", "driver": G, "pool": "pa", "device": "g1"}]}}}
    api = FakeAPI([other])
    api.conflicts = 1
    plugin.handle = Handle.detached(client=api)
    st = run(plugin.pre_bind(state, pi, "a"))
    assert st.message() == "claim default/c got allocated elsewhere in the meantime"


async def test_unreserve_takes_the_reservation_back() -> None:
    c1 = claim("c1", [{"name": "r", "exactly": ex()}])
    c2 = claim("c2", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c1, c2))
    api = FakeAPI([c1])  # c2 is gone from the API: its write fails
    plugin.handle = Handle.detached(client=api)
    st = await plugin.pre_bind(state, pi, "a")
    assert st.code == Code.ERROR and "default/c2" in st.message()
    assert api.objs[FakeAPI._path(c1)]["status"]["reservedFor"]
    plugin.unreserve(state, pi, "a")
    await asyncio.wait_for(asyncio.gather(*plugin._tasks), 5)
    assert api.objs[FakeAPI._path(c1)]["status"]["reservedFor"] == []
    (path, patch, ctype), = api.patches
    assert path.endswith("/resourceclaims/c1/status") and ctype == "application/strategic-merge-patch+json"
    assert patch == {"metadata": {"uid": "uid-c1"}, "status": {"reservedFor": [{"$patch": "delete", "uid": "uid-p"}]}}
    assert plugin.in_flight_claims() == []


BOUND = dev("g0", bindingConditions=["attached"], bindingFailureConditions=["failed"])


def _set_condition(api: FakeAPI, c: Obj, ctype: str, reason: str = "", message: str = "") -> None:
    stored = api.objs[FakeAPI._path(c)]
    stored["status"]["devices"] = [{"driver": G, "pool": "pa", "device": "g0", "conditions": [
        {"type": ctype, "status": "True", "reason": reason, "message": message,
         "lastTransitionTime": "2024-01-01T00:00:00Z"}]}]


async def test_binding_conditions_are_waited_for() -> None:
    c = claim("c", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c, devices=[BOUND]))
    api = FakeAPI([c])
    plugin.handle = Handle.detached(objects=Lister(api), client=api)
    plugin.binding_poll = 0.01
    task = asyncio.create_task(plugin.pre_bind(state, pi, "a"))

    async def written() -> None:
        while not api.objs[FakeAPI._path(c)].get("status", {}).get("reservedFor"):
            await asyncio.sleep(0.005)

    await asyncio.wait_for(written(), 5)
    assert not task.done()
    _set_condition(api, c, "attached")
    st = await asyncio.wait_for(task, 5)
    assert st.is_success()
    assert state.read(STATE_KEY).claims[0]["status"]["devices"][0]["conditions"][0]["type"] == "attached"


async def test_binding_failure_condition_fails_prebind() -> None:
    c = claim("c", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c, devices=[BOUND]))
    api = FakeAPI([c])
    plugin.handle = Handle.detached(objects=Lister(api), client=api)
    plugin.binding_poll = 0.01
    task = asyncio.create_task(plugin.pre_bind(state, pi, "a"))

    async def written() -> None:
        while not api.objs[FakeAPI._path(c)].get("status", {}).get("reservedFor"):
            await asyncio.sleep(0.005)

    await asyncio.wait_for(written(), 5)
    _set_condition(api, c, "failed", reason="NoFabric", message='switch "s1" down')
    st = await asyncio.wait_for(task, 5)
    assert st.code == Code.ERROR
    assert st.message() == 'device binding failed: claim=c, reason=NoFabric, message="switch \\"s1\\" down"'


async def test_binding_conditions_time_out() -> None:
    c = claim("c", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c, devices=[BOUND]))
    api = FakeAPI([c])
    plugin.handle = Handle.detached(objects=Lister(api), client=api)
    plugin.binding_poll = 0.01
    plugin.binding_timeout = 0.05
    st = await asyncio.wait_for(plugin.pre_bind(state, pi, "a"), 5)
    assert st.code == Code.ERROR and st.message().startswith("device binding timeout")


def test_pre_flight_skips_pods_without_claims() -> None:
    objs = [node("a"), pod("p")]
    snap = _snapshot(objs)
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    pi = PodInfo(objs[1])
    res = Algorithm(rng=MinChoice()).schedule(fw, snap, pi, explain=True)
    assert res.state is not None
    plugin = fw.plugins["DynamicResources"]
    assert plugin.pre_bind_pre_flight(res.state, pi, "a").code == Code.SKIP


def test_offline_pre_bind_applies_in_memory() -> None:
    c = claim("c", [{"name": "r", "exactly": ex()}])
    plugin, state, pi = reserved(cluster(c))
    assert plugin.handle.client is None  # offline: no API client
    assert run(plugin.pre_bind(state, pi, "a")).is_success()
    written = state.snapshot.objects.get("ResourceClaim", "default/c")
    assert written["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert written["status"]["allocation"]["devices"]["results"][0]["device"] == "g0"


async def test_extended_resource_claim_created_bound_and_deleted_on_unreserve() -> None:
    objs = [node("b"), dclass("gpu", [f'device.driver == "{G}"'], ext="example.com/gpu"),
            rslice("s-b", G, "pb", node="b", devices=[dev("g0"), dev("g1")]),
            pod("p", containers=[ctr("server", 2)])]
    snap = _snapshot(objs)
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    pi = PodInfo(objs[-1])
    res = Algorithm(rng=MinChoice()).schedule(fw, snap, pi, explain=True)
    assert res.selected == "b" and res.state is not None
    assert fw.run_reserve(res.state, pi, "b").is_success()
    plugin = fw.plugins["DynamicResources"]
    api = FakeAPI([])
    plugin.handle = Handle.detached(client=api)
    st = await plugin.pre_bind(res.state, pi, "b")
    assert st.is_success(), st
    (_path, created), = api.objs.items()
    assert created["metadata"]["name"] == "p-extended-resources-x7k2q"
    assert created["metadata"]["ownerReferences"][0]["uid"] == "uid-p"
    assert created["spec"]["devices"]["requests"] == [{"name": "container-0-request-1", "exactly": {
        "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2}}]
    assert [r["device"] for r in created["status"]["allocation"]["devices"]["results"]] == ["g0", "g1"]
    assert created["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    pod_patch = next(p for p in api.patches if "/pods/" in p[0])
    assert pod_patch[1] == {"status": {"extendedResourceClaimStatus": {
        "requestMappings": [{"containerName": "server", "resourceName": "example.com/gpu",
                             "requestName": "container-0-request-1"}],
        "resourceClaimName": "p-extended-resources-x7k2q"}}}
    assert plugin.in_flight_claims() == ["default/p-extended-resources-x7k2q"]
    plugin.unreserve(res.state, pi, "b")
    await asyncio.wait_for(asyncio.gather(*plugin._tasks), 5)
    assert api.objs == {} and plugin.in_flight_claims() == []


# -- PostFilter: deallocateOrDeletePodClaims ------------------------------------------------------------
ON_GONE = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}]}


def _blocked(reserved: list[Obj] | None = None) -> tuple[list[Obj], Obj, FakeAPI]:
    """The cluster (its claim as the informer saw it: the API's resourceVersion), the claim, the API."""
    c = claim("c", [{"name": "r", "exactly": ex()}], reserved=reserved, allocation={
        "devices": {"results": [{"request": "r", "driver": G, "pool": "px", "device": "g0"}]},
        "nodeSelector": ON_GONE})
    api = FakeAPI([c])
    seen = copy.deepcopy(api.objs[FakeAPI._path(c)])
    return cluster(seen), seen, api


def _post_filter(objs: list[Obj], api: FakeAPI) -> Any:
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    plugin = fw.plugins["DynamicResources"]
    assert isinstance(plugin, DynamicResources)
    plugin.handle = Handle.detached(client=api)
    p = next(o for o in objs if o["kind"] == "Pod")

    async def go() -> Any:
        res = Algorithm(rng=MinChoice()).schedule(fw, _snapshot(objs), PodInfo(p), explain=True)
        await asyncio.gather(*plugin._tasks)
        return res

    return run(go())


def test_post_filter_deallocates_the_blocking_claim_through_the_status_subresource() -> None:
    objs, c, api = _blocked()
    res = _post_filter(objs, api)
    assert res.selected is None
    assert "resourceclaim not available on the node. deallocation of ResourceClaim completed" in res.message
    path = FakeAPI._path(c)
    assert api.writes == [("update", path + "/status")]
    assert "allocation" not in api.objs[path]["status"] and "reservedFor" not in api.objs[path]["status"]


def test_post_filter_deallocation_conflict_leaves_the_claim_and_is_logged(caplog: Any) -> None:
    objs, c, api = _blocked()
    api.conflicts = 1  # someone wrote the claim since the informer saw it: the precondition fails
    _post_filter(objs, api)
    assert api.objs[FakeAPI._path(c)]["status"]["allocation"]
    assert "deallocate resourceclaim=default/c" in caplog.text


def test_post_filter_leaves_a_claim_reserved_for_another_pod() -> None:
    objs, _c, api = _blocked(reserved=[{"resource": "pods", "name": "other", "uid": "uid-other"}])
    res = _post_filter(objs, api)
    assert api.writes == []
    assert "deallocation" not in (res.message or "")
