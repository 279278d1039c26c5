"""DynamicResources under faults, py-scheduler only (issue 16 item 4's faults), and GPUScore ranking a
Pod that gets its GPU by claim (item 3).

The simulated driver and the object builders are test_dra.py's (:class:`tests.e2e.test_dra.Run`).
The binding cycle is held between Reserve and PreBind with the test-only gang Permit plugin
(tests/gang_permit.py): a Pod labelled with a gang waits at Permit, reserved (its devices in flight,
nothing written to its claim, ``nominatedNodeName`` set) until its mate arrives.

After each case: no device is in two allocations, and every bound Pod's claims are allocated and
reserved for it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.helpers import PAUSE_IMAGE, Testbed, unique_name, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess
from tests.e2e.test_dra import G, Run, V, gpu, no_device_twice
from tests.gang_permit import GANG_LABEL

Obj = dict[str, Any]

pytestmark = pytest.mark.timeout(300)


def gang_config(testbed: Testbed, name: str) -> str:
    """A profile ``name`` with the gang Permit plugin (two members, two minutes)."""
    cfg = testbed.dir / f"{name}.config.yaml"
    cfg.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                               "profiles": [{"schedulerName": name,
                                             "plugins": {"permit": {"enabled": [{"name": "GangPermit"}]}},
                                             "pluginConfig": [{"name": "GangPermit",
                                                               "args": {"minMember": 2, "timeoutSeconds": 120}}]}]}))
    return str(cfg)


def gang_scheduler(testbed: Testbed, name: str, lease: str, suffix: str = "") -> SchedulerProcess:
    """py-scheduler's CLI with the test-only GangPermit registered (not started)."""
    sched = SchedulerProcess(testbed.kubeconfig, testbed.dir / "logs" / f"{name}{suffix}.log", lease_name=lease,
                             verbosity=4, extra_args=["--config", gang_config(testbed, name)])
    sched.argv[1:3] = ["-m", "tests.gang_permit"]
    return sched


PY = "py-dra-faults"


@pytest.fixture(scope="module")
async def py_faults(testbed: Testbed, controller_manager: None) -> AsyncIterator[SchedulerProcess]:
    sched = gang_scheduler(testbed, PY, unique_name(PY))
    sched.start()
    try:
        await sched.wait_leading()
        yield sched
    finally:
        sched.terminate()


class FRun(Run):
    """:class:`Run` whose Pods may carry labels (a gang) and annotations (GPUScore's)."""

    async def add_pod(self, short: str, *, claims: list[str] = (), templates: list[str] = (),  # type: ignore[override,assignment]
                      requests: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                      annotations: dict[str, str] | None = None, on: str | None = None) -> None:
        """``on``: the short name of the only node the Pod may go to."""
        refs = [{"name": f"c{i}", "resourceClaimName": self.n(c)} for i, c in enumerate(claims)]
        refs += [{"name": f"t{i}", "resourceClaimTemplateName": self.n(t)} for i, t in enumerate(templates)]
        selector = {"dra-run": self.tag, **({"kubernetes.io/hostname": self.n(on)} if on else {})}
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.n(short), "namespace": "default", "labels": dict(labels or {}),
                             "annotations": dict(annotations or {})},
                "spec": {"schedulerName": self.scheduler,
                         "nodeSelector": selector,
                         "terminationGracePeriodSeconds": 0, "resourceClaims": refs,
                         "containers": [{"name": "main", "image": PAUSE_IMAGE}]}}
        await client.CoreV1Api(self.api).create_namespaced_pod("default", body)
        self.pods.append(self.n(short))

    async def waiting_at_permit(self, short: str, timeout: float = 60.0) -> str:
        """Wait until the Pod is reserved on a node and held (nominated, not bound); returns the node."""

        async def held() -> str | None:
            p = await client.CoreV1Api(self.api).read_namespaced_pod(self.n(short), "default")
            return str(p.status.nominated_node_name) if p.status.nominated_node_name and not p.spec.node_name \
                else None

        node: str = await wait_for(held, timeout=timeout, interval=0.1, what=f"{self.n(short)} held at Permit")
        return node

    async def claims_of(self, short: str) -> list[Obj]:
        """The claims of a Pod: named ones and those generated for it (pod.status.resourceClaimStatuses)."""
        pod = await client.CoreV1Api(self.api).read_namespaced_pod(self.n(short), "default")
        names = [rc.resource_claim_name for rc in pod.spec.resource_claims or [] if rc.resource_claim_name]
        names += [s.resource_claim_name for s in (pod.status.resource_claim_statuses or []) if s.resource_claim_name]
        out = []
        for name in names:
            try:
                out.append(await self.custom.get_namespaced_custom_object(G, V, "default", "resourceclaims", name))
            except ApiException as e:
                if e.status != 404:
                    raise
        return out

    async def check_invariants(self) -> None:
        """No device in two allocations; every bound Pod's claims allocated and reserved for it."""
        await no_device_twice(self)
        core = client.CoreV1Api(self.api)
        for name in self.pods:
            pod = await core.read_namespaced_pod(name, "default")
            if not pod.spec.node_name:
                continue
            short = name.removeprefix(f"{self.tag}-")
            claims = await self.claims_of(short)
            assert len(claims) == len(pod.spec.resource_claims or []), (name, claims)
            for c in claims:
                st = c.get("status") or {}
                assert st.get("allocation"), f"{name} bound, claim {c['metadata']['name']} not allocated"
                assert pod.metadata.uid in {r.get("uid") for r in st.get("reservedFor") or []}, (name, st)

    async def remove_slice(self, node: str) -> None:
        await self.custom.delete_cluster_custom_object(G, V, "resourceslices", self.n(node))
        self.cluster = [(p, n) for p, n in self.cluster if not (p == "resourceslices" and n == self.n(node))]


async def allocated_devices(r: FRun, short: str) -> list[str]:
    return sorted(res["device"] for c in await r.claims_of(short)
                  for res in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
                  or [])


# -- GPUScore for a DRA Pod ---------------------------------------------------------------------------

async def test_gpu_score_prefers_the_requested_model_for_a_dra_pod(api_client: client.ApiClient,
                                                                   py_faults: SchedulerProcess) -> None:
    """Two A100 40GB nodes and one with two H100 80GB; two Pods whose claims accept any GPU and whose
    ``gpu-model: H100`` annotation asks for H100 first. kube-scheduler scores the three nodes alike for
    them (a 1-in-9 chance both land on the H100 node); GPUScore reads ``productName`` from the devices
    the claims would get and puts both there, each on its own GPU."""
    r = FRun(api_client, PY)
    try:
        await r.add_nodes(3)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0", "40Gi"), gpu("gpu-1", "40Gi")])
        await r.add_slice("n2", [gpu("gpu-0", "40Gi"), gpu("gpu-1", "40Gi")])
        await r.add_slice("n3", [gpu("gpu-0", "80Gi"), gpu("gpu-1", "80Gi")])
        await r.add_template("one", [r.request()])
        for p in ("p1", "p2"):
            await r.add_pod(p, templates=["one"], annotations={"gpu-scheduler/gpu-model": "H100"})
            assert await r.bound(p) == r.n("n3")
        assert sorted([*await allocated_devices(r, "p1"), *await allocated_devices(r, "p2")]) == ["gpu-0", "gpu-1"]
        scores = py_faults.plugin_scores(r.n("p1"))
        gs = {n: s for (pl, n), s in scores.items() if pl == "GPUScore"}
        if gs:  # logged at --v 4: the H100 node ranks first
            assert max(gs, key=lambda n: gs[n]) == r.n("n3"), gs
        await r.check_invariants()
    finally:
        await r.cleanup()


# -- faults -------------------------------------------------------------------------------------------------

async def test_leader_killed_between_reserve_and_pre_bind(testbed: Testbed, api_client: client.ApiClient,
                                                          controller_manager: None) -> None:
    """The leader reserves a GPU for a Pod (held at Permit: nothing written yet) and is SIGKILLed. The
    standby takes the Lease, schedules the Pod again from the API's state (the dead leader's in-flight
    allocation died with it: the claim shows none), and when the gang's mate arrives both bind, each
    with its own GPU of the node's two."""
    name = "py-dra-le"
    lease = unique_name(name)
    a = gang_scheduler(testbed, name, lease, "-a")
    b = gang_scheduler(testbed, name, lease, "-b")
    r = FRun(api_client, name)
    gang = {GANG_LABEL: "le"}
    a.start()
    try:
        await a.wait_leading()
        b.start()
        await r.add_nodes(1)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0"), gpu("gpu-1")])
        await r.add_template("one", [r.request()])
        await r.add_pod("p", templates=["one"], labels=gang)
        assert await r.waiting_at_permit("p") == r.n("n1")
        (claim,) = await r.claims_of("p")
        assert not (claim.get("status") or {}).get("allocation"), "written before PreBind"
        a.kill()
        await b.wait_leading(timeout=60)
        await r.add_pod("mate", templates=["one"], labels=gang)
        for p in ("p", "mate"):
            assert await r.bound(p, timeout=120) == r.n("n1")
        assert sorted([*await allocated_devices(r, "p"), *await allocated_devices(r, "mate")]) == ["gpu-0", "gpu-1"]
        await r.check_invariants()
        assert b.alive() and "Traceback" not in b.log()
    finally:
        a.terminate()
        b.terminate()
        await r.cleanup()


async def test_claim_deleted_mid_bind(api_client: client.ApiClient, py_faults: SchedulerProcess) -> None:
    """The Pod's claim is deleted while the Pod waits at Permit with the claim's allocation in flight.
    PreBind cannot write it (NotFound): the Pod is unreserved, not bound, and waits for its claim (held
    at DynamicResources' PreEnqueue, as upstream's, without another attempt); the device goes to the
    mate. Once the claim exists again the Pod binds with it allocated."""
    r = FRun(api_client, PY)
    gang = {GANG_LABEL: unique_name("del")}
    try:
        await r.add_nodes(1)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0"), gpu("gpu-1")])
        await r.add_claim("c", [r.request()])
        await r.add_claim("m", [r.request()])
        await r.add_pod("p", claims=["c"], labels=gang)
        await r.waiting_at_permit("p")
        await r.custom.delete_namespaced_custom_object(G, V, "default", "resourceclaims", r.n("c"))
        await r.add_pod("mate", claims=["m"], labels=gang)
        await r.bound("mate")
        await r.failed_scheduling("p", "")  # the PreBind failure; then DynamicResources' PreEnqueue holds it
        assert await r.node_of("p") is None
        await r.check_invariants()
        # The claim comes back: the Pod (no longer in a waiting gang: the mate is bound) is retried.
        r.claims.remove(r.n("c"))
        await r.add_claim("c", [r.request()])
        await r.add_pod("mate2", claims=[], labels=gang)
        assert await r.bound("p", timeout=120) == r.n("n1")
        assert await allocated_devices(r, "p") != await allocated_devices(r, "mate")
        await r.check_invariants()
        assert "Traceback" not in py_faults.log()
    finally:
        await r.cleanup()


async def test_resource_slice_removed(api_client: client.ApiClient, py_faults: SchedulerProcess) -> None:
    """A node's ResourceSlice is removed after one of its two GPUs was allocated: the bound Pod keeps its
    claim; a new Pod waits (no device to allocate); the slice comes back and the new Pod gets the
    other GPU, never the allocated one; a third Pod does not fit."""
    r = FRun(api_client, PY)
    try:
        await r.add_nodes(1)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0"), gpu("gpu-1")])
        await r.add_template("one", [r.request()])
        await r.add_pod("p", templates=["one"])
        await r.bound("p")
        first = await allocated_devices(r, "p")
        await r.remove_slice("n1")
        await r.add_pod("q", templates=["one"])
        await r.failed_scheduling("q", "cannot allocate all claims")
        assert await r.node_of("q") is None
        await r.add_slice("n1", [gpu("gpu-0"), gpu("gpu-1")])
        await r.bound("q", timeout=120)
        second = await allocated_devices(r, "q")
        assert len(first) == len(second) == 1 and first != second
        await r.add_pod("r", templates=["one"])
        await r.failed_scheduling("r", "cannot allocate all claims")
        assert await allocated_devices(r, "p") == first
        await r.check_invariants()
        assert "Traceback" not in py_faults.log()
    finally:
        await r.cleanup()


async def test_post_filter_deallocates_a_claim_allocated_where_the_pod_cannot_go(
        api_client: client.ApiClient, py_faults: SchedulerProcess) -> None:
    """A claim is allocated on n1's GPU and reserved for nobody (a driver may allocate without
    reserving; the resourceclaim controller leaves such a claim allocated). A Pod that may only run on
    n2 uses it: every node rejects the Pod ("resourceclaim not available on the node"), PostFilter
    deallocates the claim (upstream's ``deallocateOrDeletePodClaims``), and the next attempt allocates
    it on n2's GPU and binds."""
    r = FRun(api_client, PY)
    try:
        await r.add_nodes(2)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0")])
        await r.add_slice("n2", [gpu("gpu-0")])
        await r.add_claim("c", [r.request()])
        claim = await r.custom.get_namespaced_custom_object(G, V, "default", "resourceclaims", r.n("c"))
        n1 = r.n("n1")
        claim["status"] = {"allocation": {
            "devices": {"results": [{"request": "r0", "driver": r.driver, "pool": n1, "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [n1]}]}]}}}
        await r.custom.replace_namespaced_custom_object_status(G, V, "default", "resourceclaims", r.n("c"), claim)
        await r.add_pod("second", claims=["c"], on="n2")
        await r.failed_scheduling("second", "deallocation of ResourceClaim completed")
        assert await r.bound("second", timeout=120) == r.n("n2")
        (c,) = await r.claims_of("second")
        assert [res["pool"] for res in c["status"]["allocation"]["devices"]["results"]] == [r.n("n2")]
        await r.check_invariants()
        assert "Traceback" not in py_faults.log()
    finally:
        await r.cleanup()
