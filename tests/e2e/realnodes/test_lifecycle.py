"""Node lifecycle on real kubelets (issue 27, item 5).

Stop one kubelet: kube-controller-manager's node lifecycle controller marks the Node NotReady
(``Unknown``) and taints it ``unreachable`` (``testbed status`` shows that node's kubelet stopped, its
containerd running); py-scheduler places nothing there and the Deployment's Pods move to the other
node. Start it again: the Node is Ready, untainted and used again. Restart a kubelet while Pods run on
it: the Pods keep running, and py-scheduler still counts their requests (a Pod that only fits if it
forgot them stays Pending instead of being bound and refused by the kubelet).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, unique_name, wait_for, wait_for_failed_scheduling
from tests.e2e.realnodes.support import BUSYBOX_IMAGE, bed_status, busybox_pod, delete_pods, status_line, wait_pod_phase
from tests.e2e.scheduler_proc import running_scheduler

pytestmark = pytest.mark.timeout(300)

TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def _milli(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    container = {"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                 "resources": {"requests": {"cpu": "50m", "memory": "16Mi"}}}
    tolerations = [{"key": t, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2} for t in TAINTS]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"schedulerName": "py-scheduler", "terminationGracePeriodSeconds": 1,
                                           "automountServiceAccountToken": False, "tolerations": tolerations,
                                           "containers": [container]}}}}


async def _live_pods(core: client.CoreV1Api, app: str) -> list[Any]:
    pods = (await core.list_namespaced_pod("default", label_selector=f"app={app}")).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


async def test_stopped_kubelet_node_is_avoided_then_used_again(realnodes: Testbed, realnodes_api: client.ApiClient,
                                                               realnodes_core: client.CoreV1Api) -> None:
    core, apps, nodes = realnodes_core, client.AppsV1Api(realnodes_api), realnodes.nodes
    up, down = nodes.names()
    app, probe, back = unique_name("moving"), unique_name("avoid"), unique_name("back")
    async with running_scheduler(realnodes, unique_name("py-sched-life"), verbosity=2):
        await apps.create_namespaced_deployment("default", _deployment(app, 4))
        try:
            async def spread_running() -> list[Any] | None:
                pods = await _live_pods(core, app)
                ok = len(pods) == 4 and all(p.status.phase == "Running" for p in pods)
                return pods if ok and {p.spec.node_name for p in pods} == {up, down} else None

            await wait_for(spread_running, timeout=90, interval=0.5, what=f"{app} Running on both nodes")
            nodes.stop_kubelet(1)

            async def tainted() -> bool:
                node = await core.read_node(down)
                ready = next(c for c in node.status.conditions if c.type == "Ready")
                keys = {t.key for t in node.spec.taints or []}
                return ready.status != "True" and "node.kubernetes.io/unreachable" in keys

            await wait_for(tainted, timeout=60, interval=0.5, what=f"{down} NotReady and tainted unreachable")
            # `testbed status` says so too: that node's kubelet stopped, its containerd still running
            rc, lines = await asyncio.to_thread(bed_status, realnodes)
            assert rc == 0, lines  # stopped is not crashed
            containerd = realnodes.pid(nodes.proc(1, "containerd"))
            assert re.search(rf"\sNotReady\s.*\skubelet stopped pid \d+\s+containerd running pid {containerd}\s",
                             status_line(lines, "node", down)), lines
            assert re.match(rf"{nodes.proc(1, 'kubelet')}\s+stopped\s", status_line(lines, nodes.proc(1, "kubelet")))
            assert re.search(r"\sReady\s.*\skubelet running pid \d+\s+containerd running pid",
                             status_line(lines, "node", up)), lines
            await core.create_namespaced_pod("default", busybox_pod(probe, ["sleep", "3600"],
                                                                    requests={"cpu": "10m"}))

            async def moved() -> bool:
                pods = await _live_pods(core, app)
                return len(pods) == 4 and all(p.spec.node_name == up and p.status.phase == "Running" for p in pods)

            await wait_for(moved, timeout=90, interval=0.5, what=f"{app}'s Pods all Running on {up}")
            assert (await wait_pod_phase(core, probe, ["Running"])).spec.node_name == up

            nodes.start_kubelet(1)

            async def untainted() -> bool:
                node = await core.read_node(down)
                return not {t.key for t in node.spec.taints or []} & set(TAINTS)

            await wait_for(untainted, timeout=60, interval=0.5, what=f"{down} untainted")
            pod = busybox_pod(back, ["sleep", "3600"], requests={"cpu": "10m"})
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": down}
            await core.create_namespaced_pod("default", pod)
            assert (await wait_pod_phase(core, back, ["Running"])).spec.node_name == down
        finally:
            await apps.delete_namespaced_deployment(app, "default", propagation_policy="Background")
            await delete_pods(core, [probe, back])


async def test_kubelet_restart_keeps_pods_and_py_scheduler_accounting(realnodes: Testbed,
                                                                      realnodes_core: client.CoreV1Api) -> None:
    core, nodes = realnodes_core, realnodes.nodes
    node = nodes.name(0)
    keep, too_big = unique_name("keep"), unique_name("too-big")
    async with running_scheduler(realnodes, unique_name("py-sched-restart"), verbosity=2):
        try:
            alloc = _milli((await core.read_node(node)).status.allocatable["cpu"])
            async def settled() -> tuple[bool, list[Any]] | None:
                # the earlier tests' Pods still terminating here would be counted now and gone before
                # too_big is scheduled, leaving room for it (seen in a full CI run)
                items = (await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")).items
                return None if any(p.metadata.deletion_timestamp for p in items) else (True, items)

            _, pods = await wait_for(settled, timeout=120, what=f"no Pod terminating on {node}")
            used = sum(_milli(c.resources.requests.get("cpu", "0")) for p in pods
                       if p.status.phase in ("Running", "Pending") for c in p.spec.containers
                       if c.resources and c.resources.requests)
            big = (alloc - used) // 2  # the Pod that stays takes half of what is free
            pod = busybox_pod(keep, ["sleep", "3600"], requests={"cpu": f"{big}m"})
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            await core.create_namespaced_pod("default", pod)
            before = await wait_pod_phase(core, keep, ["Running"])
            container_id = before.status.container_statuses[0].container_id

            nodes.stop_kubelet(0)
            nodes.start_kubelet(0)
            after = await wait_pod_phase(core, keep, ["Running"])
            status = after.status.container_statuses[0]
            assert status.container_id == container_id and status.restart_count == 0

            # fits only if py-scheduler forgot `keep` (free is alloc - used - big < big + 10m)
            pod = busybox_pod(too_big, ["sleep", "3600"], requests={"cpu": f"{big + 10}m"})
            pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            await core.create_namespaced_pod("default", pod)
            await wait_for_failed_scheduling(core.api_client, too_big, "Insufficient cpu", timeout=30)
            assert (await core.read_namespaced_pod(too_big, "default")).spec.node_name is None
        finally:
            await delete_pods(core, [keep, too_big])
