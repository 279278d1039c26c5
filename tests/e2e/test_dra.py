"""DynamicResources end to end, side by side with kube-scheduler v1.37.2 (issue 16, item 4).

Every case runs twice at once on the same bed: once for py-scheduler (profile ``py-dra``) and once
for upstream kube-scheduler (profile ``kube-dra``, a second kube-scheduler on its own Lease). Each run
has its own simulated DRA driver (``<tag>.gpu.example.com``: ResourceSlices and a DeviceClass made by
the test, as upstream's scheduler_perf DRA workloads do), its own Nodes (a label its Pods select) and
its own claims. The outcomes (each Pod's node, each claim's allocated devices and reservation, the
FailedScheduling message) are reduced to run-independent names and must be equal.

kube-controller-manager runs for this module: its resourceclaim controller creates the claims of
ResourceClaimTemplates (and removes reservations of deleted Pods). After each case the claims of both
runs are checked for a device held by two allocations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.helpers import (
    PAUSE_IMAGE,
    Testbed,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    unique_name,
    wait_for,
    wait_for_failed_scheduling,
)
from tests.e2e.scheduler_proc import SchedulerProcess, serving_profile

PY = "py-dra"
KUBE = "kube-dra"
G, V = "resource.k8s.io", "v1"

Obj = dict[str, Any]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def kube_dra(testbed: Testbed, controller_manager: None) -> Iterator[str]:
    """An upstream kube-scheduler serving profile ``kube-dra`` on its own Lease."""
    testbed.start_kube_scheduler(KUBE, config={
        "leaderElection": {"leaderElect": True, "resourceNamespace": "kube-system", "resourceName": KUBE},
        "profiles": [{"schedulerName": KUBE}]})
    yield KUBE
    testbed.stop_kube_scheduler(KUBE)


@pytest.fixture(scope="module")
async def py_dra(testbed: Testbed, controller_manager: None) -> AsyncIterator[SchedulerProcess]:
    """py-scheduler serving profile ``py-dra``."""
    async with serving_profile(testbed, PY, verbosity=4) as sched:
        yield sched


def gpu(name: str, memory: str = "80Gi", **extra: Any) -> Obj:
    """A device as NVIDIA's GPU DRA driver publishes one (product, a memory capacity)."""
    attrs = {"productName": {"string": "NVIDIA H100 80GB HBM3" if memory == "80Gi" else "NVIDIA A100-SXM4-40GB"},
             **extra.pop("attributes", {})}
    return {"name": name, "attributes": attrs, "capacity": {"memory": {"value": memory}}, **extra}


@dataclass
class Run:
    """The objects of one case for one scheduler: its driver, Nodes, class, slices, claims and Pods."""

    api: client.ApiClient
    scheduler: str
    tag: str = field(default_factory=lambda: unique_name("dra"))
    nodes: list[str] = field(default_factory=list)
    cluster: list[tuple[str, str]] = field(default_factory=list)  # (plural, name) of cluster-scoped objects
    claims: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def driver(self) -> str:
        return f"{self.tag}.gpu.example.com"

    @property
    def device_class(self) -> str:
        return f"{self.tag}-gpu"

    def n(self, short: str) -> str:
        return f"{self.tag}-{short}"

    async def _cluster(self, plural: str, obj: Obj) -> None:
        await self.custom.create_cluster_custom_object(G, V, plural, {"apiVersion": f"{G}/{V}", **obj})
        self.cluster.append((plural, obj["metadata"]["name"]))

    async def add_nodes(self, count: int, extended: str | None = None) -> None:
        for i in range(1, count + 1):
            name = self.n(f"n{i}")
            await create_node(self.api, name, labels={"dra-run": self.tag})
            self.nodes.append(name)

    async def add_class(self, extended_resource: str | None = None) -> None:
        spec: Obj = {"selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]}
        if extended_resource:
            spec["extendedResourceName"] = extended_resource
        await self._cluster("deviceclasses", {"kind": "DeviceClass", "metadata": {"name": self.device_class},
                                              "spec": spec})

    async def add_slice(self, node: str, devices: list[Obj], *, count: int = 1, counters: list[Obj] | None = None,
                        suffix: str = "") -> None:
        """A ResourceSlice of ``node``'s pool (``counters``: a counter-set slice of the same pool)."""
        spec: Obj = {"driver": self.driver, "nodeName": self.n(node),
                     "pool": {"name": self.n(node), "generation": 1, "resourceSliceCount": count}}
        if counters is not None:
            spec["sharedCounters"] = counters
        else:
            spec["devices"] = devices
        await self._cluster("resourceslices", {"kind": "ResourceSlice",
                                               "metadata": {"name": self.n(f"{node}{suffix}")}, "spec": spec})

    async def add_taint_rule(self, node: str, device: str, effect: str = "NoSchedule") -> None:
        await self._cluster("devicetaintrules", {"kind": "DeviceTaintRule", "metadata": {"name": self.n("taint")},
                                                 "spec": {"deviceSelector": {"driver": self.driver,
                                                                             "pool": self.n(node), "device": device},
                                                          "taint": {"key": "maintenance", "effect": effect}}})

    def request(self, count: int = 1, selectors: list[str] = (), **extra: Any) -> Obj:  # type: ignore[assignment]
        ex: Obj = {"deviceClassName": self.device_class, "allocationMode": "ExactCount", "count": count, **extra}
        if selectors:
            ex["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        return ex

    async def add_claim(self, short: str, requests: list[Obj], constraints: list[Obj] | None = None) -> None:
        spec: Obj = {"devices": {"requests": [{"name": f"r{i}", "exactly": r} for i, r in enumerate(requests)]}}
        if constraints:
            spec["devices"]["constraints"] = constraints
        await self.custom.create_namespaced_custom_object(G, V, "default", "resourceclaims", {
            "apiVersion": f"{G}/{V}", "kind": "ResourceClaim", "metadata": {"name": self.n(short)}, "spec": spec})
        self.claims.append(self.n(short))

    async def add_template(self, short: str, requests: list[Obj]) -> None:
        spec: Obj = {"devices": {"requests": [{"name": f"r{i}", "exactly": r} for i, r in enumerate(requests)]}}
        await self.custom.create_namespaced_custom_object(G, V, "default", "resourceclaimtemplates", {
            "apiVersion": f"{G}/{V}", "kind": "ResourceClaimTemplate", "metadata": {"name": self.n(short)},
            "spec": {"spec": spec}})
        self.templates.append(self.n(short))

    async def add_pod(self, short: str, *, claims: list[str] = (), templates: list[str] = (),  # type: ignore[assignment]
                      requests: dict[str, str] | None = None) -> None:
        refs = [{"name": f"c{i}", "resourceClaimName": self.n(c)} for i, c in enumerate(claims)]
        refs += [{"name": f"t{i}", "resourceClaimTemplateName": self.n(t)} for i, t in enumerate(templates)]
        spec: Obj = {"nodeSelector": {"dra-run": self.tag}}
        if refs:
            spec["resourceClaims"] = refs
        if requests:  # extended resources: limits equal to requests (they cannot be overcommitted)
            spec["containers"] = [{"name": "main", "image": PAUSE_IMAGE,
                                   "resources": {"requests": dict(requests), "limits": dict(requests)}}]
        await create_pod(self.api, self.n(short), scheduler_name=self.scheduler, spec=spec)
        self.pods.append(self.n(short))

    async def node_of(self, short: str) -> str | None:
        pod = await client.CoreV1Api(self.api).read_namespaced_pod(self.n(short), "default")
        return pod.spec.node_name or None

    async def bound(self, short: str, timeout: float = 60.0) -> str:
        node: str = await wait_for(lambda: self.node_of(short), timeout=timeout, interval=0.1,
                                   what=f"{self.n(short)} bound by {self.scheduler}")
        return node

    async def failed_scheduling(self, short: str, needle: str, timeout: float = 60.0) -> str:
        """The first FailedScheduling message about ``short`` containing ``needle``."""
        return await wait_for_failed_scheduling(self.api, self.n(short), needle, timeout=timeout)

    async def all_claims(self) -> list[Obj]:
        """Every claim of the run (named ones and those the controller made from templates)."""
        out = await self.custom.list_namespaced_custom_object(G, V, "default", "resourceclaims")
        return [c for c in out["items"] if c["metadata"]["name"].startswith(self.tag)]

    def norm(self, text: str | None) -> str | None:
        if text is None:
            return None
        text = text.replace(self.tag, "X")
        text = re.sub(r"(X-[a-z0-9-]+?)-t\d+-[a-z0-9]{5}\b", r"\1-tN-GEN", text)  # claims from templates
        text = re.sub(r"extended-resources-[a-z0-9]{5}\b", "extended-resources-GEN", text)
        return re.sub(r"0/\d+ nodes", "0/N nodes", text)

    async def outcome(self) -> Obj:
        """Per Pod its node; per claim its allocated devices (pool/device) and who it is reserved for."""
        out: Obj = {"pods": {}, "claims": {}}
        core = client.CoreV1Api(self.api)
        for p in self.pods:
            pod = await core.read_namespaced_pod(p, "default")
            out["pods"][self.norm(p)] = self.norm(pod.spec.node_name)
        for c in await self.all_claims():
            st = c.get("status") or {}
            results = ((st.get("allocation") or {}).get("devices") or {}).get("results") or []
            out["claims"][self.norm(c["metadata"]["name"])] = {
                "devices": sorted(f"{self.norm(r['pool'])}/{r['device']}" for r in results),
                "reserved": sorted(self.norm(r["name"]) or "" for r in st.get("reservedFor") or [])}
        return out

    async def cleanup(self) -> None:
        await asyncio.gather(*(delete_pod(self.api, p) for p in self.pods), return_exceptions=True)
        for c in await self.all_claims():
            with contextlib.suppress(ApiException):
                meta = c["metadata"]
                if meta.get("finalizers"):
                    await self.custom.patch_namespaced_custom_object(
                        G, V, "default", "resourceclaims", meta["name"], {"metadata": {"finalizers": None}})
                await self.custom.delete_namespaced_custom_object(G, V, "default", "resourceclaims", meta["name"])
        for t in self.templates:
            with contextlib.suppress(ApiException):
                await self.custom.delete_namespaced_custom_object(G, V, "default", "resourceclaimtemplates", t)
        for plural, name in self.cluster:
            with contextlib.suppress(ApiException):
                await self.custom.delete_cluster_custom_object(G, V, plural, name)
        for n in self.nodes:
            await delete_node(self.api, n)


Case = Callable[[Run], Awaitable[Obj]]


async def no_device_twice(r: Run) -> None:
    """No device is in two allocations (shares of a multi-allocatable device aside)."""
    seen: dict[tuple[str, str], str] = {}
    for c in await r.all_claims():
        for res in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
            if res.get("shareID") or res.get("adminAccess"):
                continue
            key = (res["pool"], res["device"])
            assert key not in seen, f"{key} allocated to {seen[key]} and {c['metadata']['name']}"
            seen[key] = c["metadata"]["name"]


async def side_by_side(api: client.ApiClient, case: Case) -> tuple[Obj, Obj]:
    """Run ``case`` for py-scheduler and for kube-scheduler at once; returns both results."""
    runs = [Run(api, PY), Run(api, KUBE)]
    try:
        py, kube = await asyncio.gather(*(case(r) for r in runs))
        for r in runs:
            await no_device_twice(r)
        return py, kube
    finally:
        for r in runs:
            await r.cleanup()


# -- the cases -------------------------------------------------------------------------------------------

async def test_vllm_pod_with_a_template_for_one_80gb_gpu(api_client: client.ApiClient, py_dra: SchedulerProcess,
                                                        kube_dra: str) -> None:
    """The claim comes from a ResourceClaimTemplate (the resourceclaim controller creates it); only the
    node with an 80 GB GPU fits."""

    async def case(r: Run) -> Obj:
        await r.add_nodes(2)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0", "40Gi"), gpu("gpu-1", "40Gi")])
        await r.add_slice("n2", [gpu("gpu-0", "80Gi")])
        await r.add_template("one-80gb", [r.request(selectors=[
            f'device.capacity["{r.driver}"].memory.compareTo(quantity("80Gi")) >= 0'])])
        await r.add_pod("vllm", templates=["one-80gb"])
        await r.bound("vllm")
        return await r.outcome()

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    assert py["pods"] == {"X-vllm": "X-n2"}
    (claim,) = py["claims"].values()
    assert claim == {"devices": ["X-n2/gpu-0"], "reserved": ["X-vllm"]}


async def test_tp2_pod_gets_two_gpus_sharing_an_nvlink_domain(api_client: client.ApiClient,
                                                              py_dra: SchedulerProcess, kube_dra: str) -> None:
    """``matchAttribute`` on the NVLink domain: first fit skips the GPUs of the other domain."""

    async def case(r: Run) -> Obj:
        await r.add_nodes(1)
        await r.add_class()
        await r.add_slice("n1", [gpu(f"gpu-{i}", attributes={"nvlinkDomain": {"string": d}})
                                 for i, d in enumerate("abba")])
        await r.add_claim("tp2", [r.request(count=2)], constraints=[{"matchAttribute": f"{r.driver}/nvlinkDomain"}])
        await r.add_pod("tp2", claims=["tp2"])
        await r.bound("tp2")
        return await r.outcome()

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    assert py["claims"]["X-tp2"]["devices"] == ["X-n1/gpu-0", "X-n1/gpu-3"]


def _mig_slices(r: Run) -> list[tuple[list[Obj], dict[str, Any]]]:
    """One A100 80GB split into partitions: the whole GPU, seven 1g.10gb and two 3g.40gb, all drawing on
    the GPU's memory and multiprocessor counters (a counter-set slice and a device slice, one pool)."""
    devs = [gpu("gpu-0", attributes={"profile": {"string": "whole"}},
                consumesCounters=[{"counterSet": "gpu-0", "counters": {
                    "memory": {"value": "80Gi"}, "multiprocessors": {"value": "98"}}}])]
    for prof, n, mem, mp in (("1g", 7, "10Gi", "14"), ("3g", 2, "40Gi", "42")):
        devs += [gpu(f"gpu-0-{prof}-{i}", mem, attributes={"profile": {"string": prof}},
                     consumesCounters=[{"counterSet": "gpu-0", "counters": {
                         "memory": {"value": mem}, "multiprocessors": {"value": mp}}}]) for i in range(n)]
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "98"}}}]
    return [([], {"count": 2, "counters": counters, "suffix": "-counters"}), (devs, {"count": 2})]


async def test_seven_1g_partitions_fit_one_gpu_and_the_eighth_pod_waits(api_client: client.ApiClient,
                                                                        py_dra: SchedulerProcess,
                                                                        kube_dra: str) -> None:
    async def case(r: Run) -> Obj:
        await r.add_nodes(1)
        await r.add_class()
        for devs, kw in _mig_slices(r):
            await r.add_slice("n1", devs, **kw)
        for i in range(8):
            await r.add_claim(f"c{i}", [r.request(selectors=[f'device.attributes["{r.driver}"].profile == "1g"'])])
        for i in range(8):
            await r.add_pod(f"p{i}", claims=[f"c{i}"])

        async def unbound() -> list[int]:
            return [i for i in range(8) if not await r.node_of(f"p{i}")]

        async def seven_bound() -> bool:
            return len(await unbound()) == 1

        await wait_for(seven_bound, timeout=90, interval=0.2, what="7 of 8 Pods bound")
        waiting = await unbound()
        assert len(waiting) == 1
        msg = await r.failed_scheduling(f"p{waiting[0]}", "cannot allocate all claims")
        out = await r.outcome()
        devices = sorted(d for c in out["claims"].values() for d in c["devices"])
        return {"devices": devices, "message": r.norm(msg).replace(f"X-p{waiting[0]}", "X-pN")}

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    assert py["devices"] == [f"X-n1/gpu-0-1g-{i}" for i in range(7)]
    assert py["message"].startswith("0/N nodes are available: 1 cannot allocate all claims")


async def test_two_pods_share_a_gpu_by_memory_and_the_third_does_not_fit(api_client: client.ApiClient,
                                                                         py_dra: SchedulerProcess,
                                                                         kube_dra: str) -> None:
    async def case(r: Run) -> Obj:
        await r.add_nodes(1)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0", allowMultipleAllocations=True)])
        for i in range(3):
            await r.add_claim(f"c{i}", [r.request(capacity={"requests": {"memory": "40Gi"}})])
        for i in range(2):
            await r.add_pod(f"p{i}", claims=[f"c{i}"])
            await r.bound(f"p{i}")
        await r.add_pod("p2", claims=["c2"])
        msg = await r.failed_scheduling("p2", "cannot allocate all claims")
        return {"message": r.norm(msg), **await r.outcome()}

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    assert py["claims"]["X-c0"]["devices"] == py["claims"]["X-c1"]["devices"] == ["X-n1/gpu-0"]
    assert py["claims"]["X-c2"]["devices"] == []


async def test_nvidia_gpu_request_served_by_dra(api_client: client.ApiClient, py_dra: SchedulerProcess,
                                                kube_dra: str) -> None:
    """A plain extended-resource request backed by a DeviceClass (DRAExtendedResource): the special
    claim is created with a generated name, allocated and reserved, the Pod's status maps it."""

    async def case(r: Run) -> Obj:
        resource = f"{r.tag}.example.com/gpu"
        await r.add_nodes(1)
        await r.add_class(extended_resource=resource)
        await r.add_slice("n1", [gpu("gpu-0"), gpu("gpu-1")])
        await r.add_pod("server", requests={resource: "1"})
        await r.bound("server")
        pod = await client.CoreV1Api(r.api).read_namespaced_pod(r.n("server"), "default")
        ext = (pod.to_dict().get("status") or {}).get("extended_resource_claim_status") or {}
        return {"ext": r.norm(json.dumps(ext, sort_keys=True)), **await r.outcome()}

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    (claim,) = py["claims"].values()
    assert claim == {"devices": ["X-n1/gpu-0"], "reserved": ["X-server"]}
    assert "container-0-request-" in py["ext"]


async def test_device_tainted_noschedule_is_not_allocated(api_client: client.ApiClient, py_dra: SchedulerProcess,
                                                          kube_dra: str) -> None:
    """A DeviceTaintRule taints n1's only GPU NoSchedule: the Pod's claim is allocated on n2."""

    async def case(r: Run) -> Obj:
        await r.add_nodes(2)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0")])
        await r.add_slice("n2", [gpu("gpu-0")])
        await r.add_taint_rule("n1", "gpu-0")
        await r.add_claim("c", [r.request()])
        await r.add_pod("p", claims=["c"])
        await r.bound("p")
        return await r.outcome()

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    assert py["pods"] == {"X-p": "X-n2"}


@pytest.mark.parametrize("next_claim", ["same", "another"])
async def test_a_device_freed_right_after_its_pod_bound_is_allocated_again(
        api_client: client.ApiClient, py_dra: SchedulerProcess, kube_dra: str, next_claim: str) -> None:
    """A Pod with a named claim binds and is deleted at once; kube-controller-manager deallocates the
    claim. The only GPU is then free: the next Pod, with the same claim or another one, gets it.
    py-scheduler kept the first allocation in flight for ever when the deallocation came before any
    other DRA Pod's PreFilter ("is in the process of being allocated" / "cannot allocate all claims")."""

    async def case(r: Run) -> Obj:
        await r.add_nodes(1)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0")])
        await r.add_claim("c", [r.request()])
        await r.add_pod("p0", claims=["c"])
        await r.bound("p0")
        await client.CoreV1Api(r.api).delete_namespaced_pod(r.n("p0"), "default", grace_period_seconds=0)
        r.pods.remove(r.n("p0"))

        async def deallocated() -> bool:
            c = await r.custom.get_namespaced_custom_object(G, V, "default", "resourceclaims", r.n("c"))
            st = c.get("status") or {}
            return not st.get("allocation") and not st.get("reservedFor")

        await wait_for(deallocated, timeout=60, what=f"{r.scheduler}: the claim deallocated")
        if next_claim == "another":
            await r.add_claim("d", [r.request()])
        await r.add_pod("p1", claims=["c" if next_claim == "same" else "d"])
        await r.bound("p1")
        return await r.outcome()

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    assert py["pods"] == {"X-p1": "X-n1"}
