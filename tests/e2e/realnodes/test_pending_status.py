"""A pending Pod's request is its spec's, whatever its status says: py-scheduler and kube-scheduler side
by side on a real node, the kubelet judging.

kube-scheduler's NodeResourcesFit computes the Pod's request without ``UseStatusResources``
(noderesources/fit.go ``computePodResourceRequest``: "pod hasn't scheduled yet"); only Pods already on a
node count an in-place resize's status. A status can still be written onto a Pod no one has scheduled
(the status subresource accepts it), and py-scheduler used to read it:

- ``infeasible``: spec cpu = the node's allocatable + 1m, status ``PodResizePending=Infeasible``.
  kube-scheduler refuses it (Insufficient cpu); py-scheduler dropped the spec, bound it, and the kubelet
  rejected it (OutOfcpu).
- ``allocated``: spec cpu 100m, a container status claiming allocatable + 1m. kube-scheduler binds it
  and the kubelet runs it; py-scheduler refused it.

Each Pod waits behind a scheduling gate while its status is written; the gate is lifted after, so both
schedulers see the status before they try it. Found by an adversarial run on real nodes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, pod_events, unique_name, wait_for
from tests.e2e.realnodes.support import BUSYBOX_IMAGE, delete_pods, kubectl, rejected
from tests.e2e.scheduler_proc import running_scheduler

pytestmark = [pytest.mark.timeout(300)]


async def _outcome(api: client.ApiClient, core: client.CoreV1Api, name: str) -> str:
    """``Running`` once the kubelet runs the Pod, ``rejected <reason>`` when it refuses it, or the first
    FailedScheduling message."""

    async def settled() -> str | None:
        pod = await core.read_namespaced_pod(name, "default")
        if pod.spec.node_name:
            if rejected(pod) or (pod.status and pod.status.phase == "Failed"):
                return f"rejected {pod.status.reason}"
            return "Running" if pod.status and pod.status.phase == "Running" else None
        failed = [m for r, m in await pod_events(api, name) if r == "FailedScheduling"]
        return f"FailedScheduling: {failed[0]}" if failed else None

    return await wait_for(settled, timeout=90, interval=0.3, what=f"pod {name} bound and running, or refused")


async def _run(tb: Testbed, api: client.ApiClient, core: client.CoreV1Api, scheduler: str, node: str, cpu: str,
               status: dict[str, Any]) -> str:
    name = unique_name("pending-status")
    await core.create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "automountServiceAccountToken": False, "nodeSelector": {"kubernetes.io/hostname": node},
                 "schedulingGates": [{"name": "example.com/status-first"}],
                 "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                 "command": ["sleep", "3600"], "resources": {"requests": {"cpu": cpu}}}]}})
    try:
        kubectl(tb, "patch", "pod", name, "--subresource", "status", "--type", "merge", "-p",
                json.dumps({"status": status}))
        kubectl(tb, "patch", "pod", name, "--type", "json", "-p",
                json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]))
        return await _outcome(api, core, name)
    finally:
        await delete_pods(core, [name])

        async def gone() -> bool:
            try:
                await core.read_namespaced_pod(name, "default")
            except client.ApiException as e:
                return e.status == 404
            return False

        await wait_for(gone, timeout=90, interval=0.3, what=f"pod {name} gone (its cpu free again)")


async def test_a_pending_pods_status_does_not_change_its_request_side_by_side(
        realnodes: Testbed, realnodes_api: client.ApiClient, realnodes_core: client.CoreV1Api) -> None:
    node = realnodes.nodes.names()[0]
    allocatable = (await realnodes_core.read_node(node)).status.allocatable["cpu"]
    over = f"{int(allocatable) * 1000 + 1}m"
    cases = {
        "infeasible": (over, {"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]}),
        "allocated": ("100m", {"containerStatuses": [{
            "name": "app", "image": BUSYBOX_IMAGE, "imageID": "", "ready": False, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "allocatedResources": {"cpu": over}, "resources": {"requests": {"cpu": over}}}]}),
    }
    got: dict[tuple[str, str], str] = {}
    async with running_scheduler(realnodes, unique_name("py-sched-pending"), verbosity=2):
        for scheduler in ("default-scheduler", "py-scheduler"):
            for case, (cpu, status) in cases.items():
                got[(scheduler, case)] = await _run(realnodes, realnodes_api, realnodes_core, scheduler, node, cpu,
                                                    status)
    assert got[("default-scheduler", "infeasible")].startswith("FailedScheduling: 0/"), got
    assert "Insufficient cpu" in got[("default-scheduler", "infeasible")], got
    assert got[("default-scheduler", "allocated")] == "Running", got
    for case in cases:
        assert got[("py-scheduler", case)] == got[("default-scheduler", case)], (case, got)
