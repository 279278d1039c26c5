"""The Helm chart on real nodes (issue 33, item 1): ``helm install`` ends with the Deployment rolled out
by the kubelets and a Pod bound by the installed scheduler and Running; ``helm upgrade`` with a changed
config value rolls the scheduler's Pods; ``helm uninstall`` removes the release.

tests/e2e/test_helm_chart.py checks the chart's objects against deploy/ and the install on an
API-only bed; this module is what only kubelets can show: Pods that start, pass their probes and lead.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, unique_name, wait_for
from tests.e2e.realnodes.support import admission_rejections, busybox_pod, wait_pod_phase

GO_TOOLS = ("helm",)  # built by tests/e2e/conftest.py before the tests run (outside their timeout)
REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "py-scheduler"

pytestmark = [pytest.mark.timeout(600)]


def _run(*argv: str, timeout: float = 240) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    assert out.returncode == 0, \
        f"{' '.join(argv[:4])}... exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def helm() -> str:
    import gotools  # tests/e2e/testbed (on sys.path: tests.e2e.helpers puts it there)

    return str(gotools.build(gotools.TOOLS["helm"]))


async def test_helm_install_rolls_out_on_real_nodes_binds_upgrades_and_uninstalls(
        realnodes: Testbed, realnodes_core: client.CoreV1Api, py_scheduler_image: str, helm: str) -> None:
    name, ns = unique_name("helm"), unique_name("helm-ns")
    kc = ("--kubeconfig", str(realnodes.kubeconfig))
    values = ("--set", f"leaderElection.resourceName={name}", "--set", f"metricsReader.serviceAccount.namespace={ns}")
    _run("kubectl", *kc, "create", "namespace", ns)
    dep = f"{name}-py-scheduler"

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(_run("kubectl", *kc, "-n", ns, "get", "pods", "-o", "json"))["items"]
        return [p for p in items if p["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "py-scheduler"]

    try:
        _run(helm, *kc, "install", name, str(CHART), "-n", ns, *values)
        _run("kubectl", *kc, "-n", ns, "rollout", "status", f"deployment/{dep}", "--timeout=240s", timeout=260)
        first = {p["metadata"]["name"] for p in pods()}
        assert first, "no scheduler Pod after the rollout"
        for p in pods():  # started and ready by the kubelet's probes, not restarted
            statuses = p["status"]["containerStatuses"]
            assert all(s["ready"] and s["restartCount"] == 0 for s in statuses), statuses

        # the installed scheduler leads and binds a Pod that a kubelet then runs
        pod_name = unique_name("helm-pod")
        await realnodes_core.create_namespaced_pod(ns, busybox_pod(pod_name, ["sleep", "3600"]))
        pod = await wait_pod_phase(realnodes_core, pod_name, ("Running",), namespace=ns, timeout=180)
        assert pod.spec.node_name in realnodes.nodes.names()
        assert not admission_rejections([pod])

        # a config change rolls the scheduler's Pods (the config checksum is in the Pod template)
        _run(helm, *kc, "upgrade", name, str(CHART), "-n", ns, *values, "--reuse-values", "--set", "gpu.modelWeight=50")
        _run("kubectl", *kc, "-n", ns, "rollout", "status", f"deployment/{dep}", "--timeout=240s", timeout=260)

        def rolled() -> bool:
            now = pods()
            return bool(now) and not first & {p["metadata"]["name"] for p in now} and all(
                s["ready"] for p in now for s in p["status"].get("containerStatuses", []))

        await wait_for(rolled, timeout=120, what="every scheduler Pod replaced after the config change")

        # the new Pods lead and bind too
        second = unique_name("helm-pod")
        await realnodes_core.create_namespaced_pod(ns, busybox_pod(second, ["sleep", "3600"]))
        await wait_pod_phase(realnodes_core, second, ("Running",), namespace=ns, timeout=180)

        _run(helm, *kc, "uninstall", name, "-n", ns, "--wait", "--timeout", "120s", timeout=150)
        await wait_for(lambda: not pods(), timeout=120, what="the release's Pods gone after helm uninstall")
        assert subprocess.run([helm, *kc, "status", name, "-n", ns], capture_output=True).returncode != 0
    finally:
        subprocess.run([helm, *kc, "uninstall", name, "-n", ns], capture_output=True, timeout=120)
        subprocess.run(["kubectl", *kc, "delete", "namespace", ns, "--wait=false"], capture_output=True, timeout=60)
