"""Real nodes (issue 27, items 1 and 2): kubelets register and go Ready, a Pod py-scheduler binds is
run by containerd from an image the bed built (no registry), its log is read through the kubelet, and
Pods reach the ``kubernetes`` Service and a ClusterIP Service through kube-proxy, across nodes.

Every assertion reads what only a kubelet/container runtime produces (Pod phases, container exit
codes, logs, Node status), so these fail with API-only Nodes.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, unique_name, wait_for
from tests.e2e.realnodes.support import BUSYBOX_IMAGE, busybox_pod, delete_pods, kubectl, wait_pod_phase
from tests.e2e.scheduler_proc import running_scheduler

pytestmark = pytest.mark.timeout(240)


async def test_nodes_register_ready_with_the_pinned_versions(realnodes: Testbed,
                                                              realnodes_core: client.CoreV1Api) -> None:
    names = realnodes.nodes.names()
    nodes = {n.metadata.name: n for n in (await realnodes_core.list_node()).items}
    assert sorted(nodes) == sorted(names)
    for i, name in enumerate(names):
        node = nodes[name]
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", node.status.conditions
        info = node.status.node_info
        assert info.kubelet_version == "v1.37.2"
        assert info.kube_proxy_version in ("", "v1.37.2")  # deprecated field, may be empty
        assert info.container_runtime_version.startswith("containerd://2."), info.container_runtime_version
        addresses = {(a.type, a.address) for a in node.status.addresses}
        assert ("InternalIP", realnodes.nodes.net.node_ip(i)) in addresses
        # the node lifecycle controller lifted the not-ready taint the node was created with
        assert not [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")], node.spec.taints
        assert int(node.status.allocatable["pods"]) == 40


async def test_pod_bound_by_py_scheduler_runs_and_logs(realnodes: Testbed, realnodes_core: client.CoreV1Api) -> None:
    done, sleeper = unique_name("hello"), unique_name("sleeper")
    async with running_scheduler(realnodes, unique_name("py-sched-nodes")):
        try:
            await realnodes_core.create_namespaced_pod(
                "default", busybox_pod(done, ["sh", "-c", "echo hello from $(hostname); exit 0"],
                                       requests={"cpu": "10m", "memory": "16Mi"}))
            await realnodes_core.create_namespaced_pod(
                "default", busybox_pod(sleeper, ["sleep", "3600"], requests={"cpu": "10m"}))
            pod = await wait_pod_phase(realnodes_core, done, ["Succeeded"])
            assert pod.spec.node_name in realnodes.nodes.names()
            terminated = pod.status.container_statuses[0].state.terminated
            assert terminated is not None and terminated.exit_code == 0
            assert kubectl(realnodes, "logs", done).strip() == f"hello from {done}"
            running = await wait_pod_phase(realnodes_core, sleeper, ["Running"])
            assert running.status.pod_ip and running.status.container_statuses[0].ready
            assert kubectl(realnodes, "exec", sleeper, "--", "cat", "/proc/1/cmdline").split("\0")[:2] == \
                ["sleep", "3600"]
            events = await realnodes_core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={done},reason=Scheduled")
            assert [e.source.component or e.reporting_component for e in events.items] != []
        finally:
            await delete_pods(realnodes_core, [done, sleeper])


async def _run_client(core: client.CoreV1Api, name: str, script: str, node: str) -> str:
    """Run ``script`` in a busybox Pod on ``node`` (bound by nodeName: this test is about the network);
    returns its log once it Succeeded."""
    await core.create_namespaced_pod("default", busybox_pod(name, ["sh", "-c", script], node_name=node))
    try:
        await wait_pod_phase(core, name, ["Succeeded"], timeout=60)
        return str(await core.read_namespaced_pod_log(name, "default"))
    except AssertionError as e:
        log = await core.read_namespaced_pod_log(name, "default")
        raise AssertionError(f"{e}\nlog of {name}:\n{log}") from None


async def test_pods_reach_services_through_kube_proxy(realnodes: Testbed, realnodes_core: client.CoreV1Api) -> None:
    names = realnodes.nodes.names()
    server, svc = unique_name("web"), unique_name("web")
    clients: list[str] = []
    page = f"served by {server}"
    await realnodes_core.create_namespaced_pod("default", busybox_pod(
        server, ["sh", "-c", f"mkdir -p /www && echo '{page}' > /www/index.html && exec httpd -f -p 8080 -h /www"],
        node_name=names[1], labels={"app": server}, ports=[8080]))
    service: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": svc},
                               "spec": {"selector": {"app": server}, "ports": [{"port": 80, "targetPort": 8080}]}}
    await realnodes_core.create_namespaced_service("default", service)
    try:
        await wait_pod_phase(realnodes_core, server, ["Running"])
        cluster_ip = (await realnodes_core.read_namespaced_service(svc, "default")).spec.cluster_ip

        async def endpoints_ready() -> bool:
            out = kubectl(realnodes, "get", "endpointslices", "-l", f"kubernetes.io/service-name={svc}",
                          "-o", "jsonpath={.items[*].endpoints[*].conditions.ready}")
            return "true" in out

        await wait_for(endpoints_ready, timeout=30, what=f"ready endpoints of {svc}")
        # the kubernetes Service: kube-proxy DNATs 10.0.0.1:443 to the API server (via the bridge proxy)
        script = ("for i in $(seq 20); do nc -w 2 10.0.0.1 443 </dev/null && echo api-reachable && break; "
                  "sleep 0.5; done; "
                  # HTTP by hand: Debian's static busybox wget crashes in glibc's resolver (static NSS)
                  f"for i in $(seq 20); do printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {cluster_ip} 80 "
                  f"| grep -q '{page}' && echo '{page}' && exit 0; sleep 0.5; done; exit 1")
        for i, node in enumerate(names):  # same node as the backend and the other one
            c = unique_name(f"client{i}")
            clients.append(c)
            log = await _run_client(realnodes_core, c, script, node)
            assert "api-reachable" in log and page in log, log
    finally:
        await realnodes_core.delete_namespaced_service(svc, "default")
        await delete_pods(realnodes_core, [server, *clients])


async def test_image_archive_imported_into_every_node_runs(realnodes: Testbed,
                                                           realnodes_core: client.CoreV1Api) -> None:
    """``Nodes.import_image`` (what ``import_py_scheduler_image`` and ``testbed import-image`` use):
    an archive imported and tagged into every node's containerd runs with ``imagePullPolicy: Never``."""
    n = realnodes.nodes
    archive = n.state["images"][BUSYBOX_IMAGE]
    tag = f"localhost/imported/{unique_name('img')}:1"
    n.import_image(archive, tags=[(BUSYBOX_IMAGE, tag)])
    for i in range(n.count):
        assert tag in n.ctr(i, "images", "ls", "-q")
    names = []
    try:
        for i, node in enumerate(n.names()):
            pod = busybox_pod(unique_name(f"imported{i}"), ["echo", "imported"], node_name=node)
            pod["spec"]["containers"][0]["image"] = tag
            names.append(pod["metadata"]["name"])
            await realnodes_core.create_namespaced_pod("default", pod)
        for name in names:
            await wait_pod_phase(realnodes_core, name, ["Succeeded"])
            assert kubectl(realnodes, "logs", name).strip() == "imported"
    finally:
        await delete_pods(realnodes_core, names)
