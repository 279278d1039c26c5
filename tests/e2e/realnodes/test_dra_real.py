"""DRA on real nodes: upstream's DRA test driver prepares what py-scheduler allocated (issue 29, item 3).

Every node runs ``dra-test-driver kubelet-plugin`` (tests/e2e/testbed/dra_driver.py): driver
``test-driver.cdi.k8s.io``, one pool per node, devices ``device-00`` .. ``device-03``. Each case runs
first with py-scheduler, then (after its Pods and claims are gone) with kube-scheduler
(``default-scheduler``); both runs must allocate the same devices (parity on real nodes), and in both
the kubelet must have had the driver prepare them: each busybox container prints its environment
(``claim_<claim>_<request>=true``, ``user_<k>=<v>`` from opaque config, set by the driver's CDI spec)
and the device metadata files the driver's kubelet-plugin framework mounts
(``/var/run/kubernetes.io/dra-device-attributes/.../*-metadata.json``, naming pool and device); those
must be exactly the devices in the claim's ``status.allocation``.

Pods select node 0 by hostname so that both schedulers face one node (two empty nodes tie, and
kube-scheduler picks among ties at random). The driver publishes devices without attributes, so the
CEL selectors here test the driver and its (empty) attribute map; a selector that asks for an
attribute the driver lacks leaves the Pod unschedulable with both schedulers.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, bed, unique_name, wait_for
from tests.e2e.realnodes.support import BUSYBOX_IMAGE, delete_pods, kubectl, wait_pod_phase
from tests.e2e.scheduler_proc import SchedulerProcess, running_scheduler

sys.path.insert(0, str(Path(bed.__file__).resolve().parent))
import dra_driver  # tests/e2e/testbed
import nodes

pytestmark = pytest.mark.timeout(300)

SCHEDULERS = ("py-scheduler", "default-scheduler")
DRIVER = dra_driver.DRIVER
CLASS = "dra-test-driver"
ADMIN_NS = "dra-admin"
G, V = "resource.k8s.io", "v1"
Obj = dict[str, Any]
REPORT = ('env | grep -E "^(claim_|user_|admin_)" | sort; '
          'for f in $(find /var/run/kubernetes.io -name "*.json" 2>/dev/null); do '
          'echo "META $(tr -d "\\n" < $f)"; done; '
          'echo READY; sleep 3600')


@pytest.fixture(scope="module")
def dra_nodes(realnodes: Testbed) -> Iterator[nodes.Nodes]:
    """The drivers running on every node, a DeviceClass for them and a namespace allowing admin access."""
    ns = nodes.Nodes(realnodes)
    dra_driver.start_all(ns)
    kubectl(realnodes, "apply", "-f", "-", input_json={"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": f"{G}/{V}", "kind": "DeviceClass", "metadata": {"name": CLASS},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": ADMIN_NS, "labels": {"resource.kubernetes.io/admin-access": "true"}}}]})
    yield ns
    kubectl(realnodes, "delete", "deviceclass", CLASS, "--ignore-not-found", check=False)
    kubectl(realnodes, "delete", "namespace", ADMIN_NS, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
async def py_sched(realnodes: Testbed, dra_nodes: nodes.Nodes) -> AsyncIterator[SchedulerProcess]:
    async with running_scheduler(realnodes, unique_name("py-sched-dra"), verbosity=2) as proc:
        await proc.wait_synced()
        yield proc


class Case:
    """One scheduler's run of a case: creates claims/templates/Pods (named ``<tag>-...``), checks
    containers against allocations, cleans up."""

    def __init__(self, tb: Testbed, core: client.CoreV1Api, ns: nodes.Nodes, scheduler: str,
                 namespace: str = "default", node: int = 0) -> None:
        self.tb, self.core, self.ns, self.scheduler, self.namespace = tb, core, ns, scheduler, namespace
        self.node = node
        self.tag = unique_name("py" if scheduler == "py-scheduler" else "kube")
        self.pods: list[str] = []
        self.claims: list[str] = []
        self.templates: list[str] = []

    def n(self, short: str) -> str:
        return f"{self.tag}-{short}"

    def apply(self, obj: Obj) -> None:
        kubectl(self.tb, "apply", "-n", self.namespace, "-f", "-", input_json=obj)

    def claim(self, short: str, spec: Obj) -> str:
        name = self.n(short)
        self.apply({"apiVersion": f"{G}/{V}", "kind": "ResourceClaim", "metadata": {"name": name},
                    "spec": {"devices": spec}})
        self.claims.append(name)
        return name

    def template(self, short: str, spec: Obj) -> str:
        name = self.n(short)
        self.apply({"apiVersion": f"{G}/{V}", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
                    "spec": {"spec": {"devices": spec}}})
        self.templates.append(name)
        return name

    def pod(self, short: str, *, claim: str | None = None, template: str | None = None) -> str:
        name = self.n(short)
        ref = {"name": "c", **({"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template})}
        self.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "schedulerName": self.scheduler, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False, "nodeSelector": {"kubernetes.io/hostname": self.ns.name(self.node)},
            "resourceClaims": [ref],
            "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", REPORT], "resources": {"claims": [{"name": "c"}]}}]}})
        self.pods.append(name)
        return name

    def read_claim(self, name: str) -> Obj | None:
        out = kubectl(self.tb, "get", "resourceclaim", "-n", self.namespace, name, "-o", "json",
                      "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def pod_claim(self, pod: str) -> str:
        """The claim a Pod uses (generated from a template: read from ``status.resourceClaimStatuses``)."""
        p = json.loads(kubectl(self.tb, "get", "pod", "-n", self.namespace, pod, "-o", "json"))
        for ref in p["spec"]["resourceClaims"]:
            if ref.get("resourceClaimName"):
                return str(ref["resourceClaimName"])
        return str(p["status"]["resourceClaimStatuses"][0]["resourceClaimName"])

    async def running(self, pod: str, timeout: float = 60.0) -> tuple[Obj, dict[str, Any]]:
        """Wait until ``pod`` runs and has reported; check its container against its claim's allocation.
        Returns ``(claim, report)``."""
        await wait_pod_phase(self.core, pod, ["Running"], namespace=self.namespace, timeout=timeout)
        logs = await wait_for(lambda: (lambda s: s if "READY" in s else None)(
            kubectl(self.tb, "logs", "-n", self.namespace, pod)), timeout=30, interval=0.3, what=f"{pod} report")
        claim_name = self.pod_claim(pod)
        claim = self.read_claim(claim_name)
        assert claim is not None, claim_name
        results = claim["status"]["allocation"]["devices"]["results"]
        env = [line for line in logs.splitlines() if re.match(r"^(claim|user|admin)_", line)]
        seen = sorted((d["pool"], d["name"]) for line in logs.splitlines() if line.startswith("META ")
                      for r in json.loads(line[5:]).get("requests", []) for d in r.get("devices", []))
        allocated = sorted((r["pool"], r["device"]) for r in results)
        assert seen == allocated, f"{pod}: container sees {seen}, {claim_name} allocates {allocated}\n{logs}"
        bases = sorted({r["request"].split("/")[0] for r in results})
        want = [re.sub(r"[^a-zA-Z0-9]", "_", f"claim_{claim_name}_{b}") + "=true" for b in bases]
        assert [e for e in env if e.startswith("claim_")] == want, f"{pod}: {env} != {want}"
        return claim, {"env": env, "devices": seen}

    def reduced(self, claim: Obj) -> list[tuple[str, str, str, bool]]:
        """A claim's allocation without run-specific names: (request, pool-as-node-index, device, admin)."""
        idx = {n: f"node-{i}" for i, n in enumerate(self.ns.names())}
        return sorted((r["request"], idx.get(r["pool"], r["pool"]), r["device"], bool(r.get("adminAccess")))
                      for r in claim["status"]["allocation"]["devices"]["results"])

    async def cleanup(self) -> None:
        await delete_pods(self.core, self.pods, self.namespace)
        for kind, names in (("resourceclaim", self.claims), ("resourceclaimtemplate", self.templates)):
            if names:
                kubectl(self.tb, "delete", kind, "-n", self.namespace, "--ignore-not-found", "--wait=false", *names)

        async def gone() -> bool:
            pods = await self.core.list_namespaced_pod(self.namespace)
            left = [p.metadata.name for p in pods.items if p.metadata.name.startswith(self.tag)]
            out = json.loads(kubectl(self.tb, "get", "resourceclaims", "-n", self.namespace, "-o", "json"))
            claims = [c["metadata"]["name"] for c in out["items"] if c["metadata"]["name"].startswith(self.tag)]
            return not left and not claims
        await wait_for(gone, timeout=60, interval=0.5, what=f"{self.tag}'s Pods and claims gone")


async def both(tb: Testbed, core: client.CoreV1Api, ns: nodes.Nodes, play: Any,
               namespace: str = "default") -> list[Any]:
    """Run ``play(case)`` for py-scheduler, clean up, then for kube-scheduler; both results."""
    out = []
    for scheduler in SCHEDULERS:
        case = Case(tb, core, ns, scheduler, namespace)
        try:
            out.append(await play(case))
        finally:
            await case.cleanup()
    return out


EXACT2 = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 2}}],
          "config": [{"opaque": {"driver": DRIVER, "parameters": {"a": "b"}}}]}


async def test_template_exact_count_then_reuse(realnodes: Testbed, realnodes_core: client.CoreV1Api,
                                               dra_nodes: nodes.Nodes, py_sched: SchedulerProcess) -> None:
    """A template claim for 2 devices: prepared (env + metadata = allocation, opaque config as user_a=b);
    the Pod deleted -> its generated claim deleted -> a new Pod gets the same devices again."""
    async def play(c: Case) -> Any:
        t = c.template("two", EXACT2)
        first = c.pod("a", template=t)
        claim, report = await c.running(first)
        assert "user_a=b" in report["env"]
        assert len(report["devices"]) == 2
        await delete_pods(c.core, [first])
        gen = claim["metadata"]["name"]
        await wait_for(lambda: c.read_claim(gen) is None, timeout=60, interval=0.5, what=f"{gen} deleted")
        again, _ = await c.running(c.pod("b", template=t))
        assert c.reduced(again) == c.reduced(claim), "freed devices not reused"
        return c.reduced(claim)

    py, kube = await both(realnodes, realnodes_core, dra_nodes, play)
    assert py == kube
    assert [d for _, _, d, _ in py] == ["device-00", "device-01"]


async def test_explicit_claims_selectors_and_prioritized_list(
        realnodes: Testbed, realnodes_core: client.CoreV1Api, dra_nodes: nodes.Nodes,
        py_sched: SchedulerProcess) -> None:
    """Explicit claims: a CEL selector on the driver's attributes, a firstAvailable list whose first
    choice cannot fit (5 > 4 devices), and a selector no device meets (Pod stays Pending)."""
    async def play(c: Case) -> Any:
        sel = c.claim("sel", {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": CLASS, "count": 1, "selectors": [{"cel": {"expression":
                f'device.driver == "{DRIVER}" && !("model" in device.attributes["{DRIVER}"])'}}]}}]})
        prio = c.claim("prio", {"requests": [{"name": "gpu", "firstAvailable": [
            {"name": "five", "deviceClassName": CLASS, "count": 5},
            {"name": "two", "deviceClassName": CLASS, "count": 2}]}]})
        none = c.claim("none", {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": CLASS, "selectors": [{"cel": {"expression":
                f'"model" in device.attributes["{DRIVER}"]'}}]}}]})
        out = []
        for claim in (sel, prio):
            got, _ = await c.running(c.pod(claim.rsplit("-", 1)[1], claim=claim))
            out.append(c.reduced(got))
        stuck = c.pod("none", claim=none)

        async def unschedulable() -> bool:
            p = await c.core.read_namespaced_pod(stuck, c.namespace)
            conds = {x.type: x for x in (p.status.conditions or [])}
            sch = conds.get("PodScheduled")
            return sch is not None and sch.status == "False" and sch.reason == "Unschedulable"
        await wait_for(unschedulable, timeout=30, interval=0.5, what=f"{stuck} Unschedulable")
        assert (c.read_claim(none) or {}).get("status", {}).get("allocation") is None
        return out

    py, kube = await both(realnodes, realnodes_core, dra_nodes, play)
    assert py == kube
    assert py[1] and all(r.startswith("gpu/two") for r, _, _, _ in py[1]) and len(py[1]) == 2


async def test_shared_claim_two_pods_then_deallocated_and_reused(
        realnodes: Testbed, realnodes_core: client.CoreV1Api, dra_nodes: nodes.Nodes,
        py_sched: SchedulerProcess) -> None:
    """One explicit claim used by two Pods: both see the same device; both deleted -> reservation and
    allocation removed (the claim stays) -> a third Pod gets it allocated again."""
    async def play(c: Case) -> Any:
        shared = c.claim("shared", {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]})
        a, b = c.pod("a", claim=shared), c.pod("b", claim=shared)
        first, ra = await c.running(a)
        _, rb = await c.running(b)
        assert ra["devices"] == rb["devices"] and len(ra["devices"]) == 1
        claim = c.read_claim(shared) or {}
        assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == sorted([a, b])
        await delete_pods(c.core, [a, b])

        def freed() -> bool:
            st = (c.read_claim(shared) or {}).get("status", {})
            return not st.get("reservedFor") and st.get("allocation") is None
        await wait_for(freed, timeout=60, interval=0.5, what=f"{shared} unreserved and deallocated")
        again, _ = await c.running(c.pod("c", claim=shared))
        assert c.reduced(again) == c.reduced(first)
        return c.reduced(first)

    py, kube = await both(realnodes, realnodes_core, dra_nodes, play)
    assert py == kube


async def test_admin_access_claim_sees_device_in_use(
        realnodes: Testbed, realnodes_core: client.CoreV1Api, dra_nodes: nodes.Nodes,
        py_sched: SchedulerProcess) -> None:
    """In a namespace labelled for admin access, an adminAccess claim gets a device another Pod's
    claim holds (all 4 held), and the driver prepares it for the admin's container too."""
    async def play(c: Case) -> Any:
        held = c.claim("held", {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": CLASS, "allocationMode": "All"}}]})
        admin = c.claim("admin", {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": CLASS, "adminAccess": True}}]})
        h, _ = await c.running(c.pod("held", claim=held))
        assert len(h["status"]["allocation"]["devices"]["results"]) == 4
        got, _ = await c.running(c.pod("admin", claim=admin))
        assert all(adm for _, _, _, adm in c.reduced(got))
        return c.reduced(h), c.reduced(got)

    py, kube = await both(realnodes, realnodes_core, dra_nodes, play, namespace=ADMIN_NS)
    assert py == kube


async def test_driver_down_pod_waits_then_starts(realnodes: Testbed, realnodes_core: client.CoreV1Api,
                                                 dra_nodes: nodes.Nodes, py_sched: SchedulerProcess) -> None:
    """Both drivers stopped: each claim is still allocated from its node's ResourceSlice (the kubelet
    wipes it only after 30 s) but the kubelet cannot prepare it, so the Pod waits with the kubelet's
    FailedPrepareDynamicResources message; started again, the driver prepares it and the Pod runs.
    Both schedulers at once (one device each, py-scheduler's Pod on node 0, kube-scheduler's on node 1:
    the kubelet's retry back-off makes this the slowest case)."""
    binary = dra_driver.build()
    cases = [Case(realnodes, realnodes_core, dra_nodes, s, node=k) for k, s in enumerate(SCHEDULERS)]
    for k in range(len(cases)):
        assert dra_driver.stop(dra_nodes, k)
    try:
        pods = [c.pod("down", template=c.template("one", {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": CLASS}}]})) for c in cases]

        async def kubelet_says(c: Case, pod: str) -> str | None:
            ev = await c.core.list_namespaced_event(c.namespace, field_selector=f"involvedObject.name={pod}")
            # an earlier one may be the Node authorizer not yet knowing the new claim ("no relationship")
            msgs = [e.message for e in ev.items if e.reason == "FailedPrepareDynamicResources"
                    and f"DRA driver {DRIVER} is not registered" in (e.message or "")]
            return msgs[0] if msgs else None
        for c, pod in zip(cases, pods, strict=True):
            await wait_for(lambda c=c, pod=pod: kubelet_says(c, pod), timeout=25, interval=0.5,
                           what=f"{pod}: kubelet's 'not registered'")
            p = await c.core.read_namespaced_pod(pod, c.namespace)
            assert p.status.phase == "Pending" and p.spec.node_name == c.ns.name(c.node), \
                f"{pod}: {p.status.phase} on {p.spec.node_name}: {p.status}"
    finally:
        await asyncio.gather(*(asyncio.to_thread(dra_driver.start, dra_nodes, k, binary)
                               for k in range(len(cases))))
    try:
        got = await asyncio.gather(*(c.running(pod, timeout=90) for c, pod in zip(cases, pods, strict=True)))
        py, kube = ([(r, d, a) for r, _, d, a in c.reduced(claim)] for c, (claim, _) in zip(cases, got, strict=True))
        assert py == kube == [("gpu", "device-00", False)]
    finally:
        await asyncio.gather(*(c.cleanup() for c in cases))
