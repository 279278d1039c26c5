"""docs/operations.md section 7 (the kind walk-through), step by step on the bed's real nodes, with the same
files: the image imported as ``kind load`` does, ``kubectl apply -k deploy/``, ``deploy/kind/label-gpu-nodes.sh``
(fake GPU profiles + the device-plugin DaemonSet), then each of ``deploy/kind/examples/``. The kubelets
judge the result: GPU Pods Running with the devices the plugin handed them, the CPU Deployment's replicas
Running, the unschedulable Pod Pending with py-scheduler's FailedScheduling event.

What differs from kind (said in the docs): 2 workers, so the script labels two of its three profiles
(A100, H100) and ``t4-batch-pod`` has no T4 node.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, pod_events, wait_for
from tests.e2e.realnodes.support import admission_rejections, kubectl

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "deploy" / "kind" / "examples"
PROFILE_LABEL = "gpu.py-scheduler.io/fake-profile"

pytestmark = [pytest.mark.timeout(600)]


async def test_kind_walkthrough_on_real_nodes(realnodes: Testbed, realnodes_api: client.ApiClient,
                                              realnodes_core: client.CoreV1Api, py_scheduler_image: str) -> None:
    tb, core = realnodes, realnodes_core
    names = tb.nodes.names()
    env = {**os.environ, "KUBECONFIG": str(tb.kubeconfig),
           "KUBECTL_CONTEXT": kubectl(tb, "config", "current-context").strip()}
    try:
        # step 2: install (the image is in every node, as after `kind load docker-image`)
        kubectl(tb, "apply", "-k", str(REPO / "deploy"))
        kubectl(tb, "-n", "kube-system", "rollout", "status", "deployment/py-scheduler", "--timeout=240s", timeout=260)

        # step 3: the label script, unchanged. The node first carries what a plugin with another profile
        # leaves behind (GFD labels of an 80 GB A100): the script must report what its plugins write now,
        # not that (a full CI run once printed the stale product, the walk-through running after
        # test_fake_gpus.py on the same nodes). Run twice: the second run finds the DaemonSet there.
        kubectl(tb, "label", "node", names[0], "--overwrite", "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count=8", "nvidia.com/gpu.replicas=1")
        for run in (1, 2):
            out = subprocess.run(["bash", str(REPO / "deploy" / "kind" / "label-gpu-nodes.sh")], env=env,
                                 capture_output=True, text=True, timeout=420, check=False)
            assert out.returncode == 0, f"label-gpu-nodes.sh run {run}: {out.stdout[-2000:]}\n{out.stderr[-2000:]}"
            assert f"{names[0]}: allocatable nvidia.com/gpu=8, product NVIDIA-A100-SXM4-40GB" in out.stdout, out.stdout
            assert f"{names[1]}: allocatable nvidia.com/gpu=4, product NVIDIA-H100-80GB-HBM3" in out.stdout, out.stdout

        # step 4: the examples
        for f in sorted(EXAMPLES.glob("*.yaml")):
            kubectl(tb, "apply", "-f", str(f))

        async def phase(name: str) -> client.V1Pod:
            return await core.read_namespaced_pod(name, "default")

        async def running(name: str) -> client.V1Pod | None:
            p = await phase(name)
            assert not admission_rejections([p]), admission_rejections([p])
            return p if p.status.phase == "Running" else None

        llm = await wait_for(lambda: running("llm-inference-pod"), timeout=120, what="llm-inference-pod Running")
        assert llm.spec.node_name == names[0]  # the A100 node
        indices = [int(i) for i in llm.metadata.annotations["gpu-scheduler/gpu-indices"].split(",")]
        assert len(indices) == 2 and (set(indices) <= {0, 1, 2, 3} or set(indices) <= {4, 5, 6, 7}), indices
        h100 = await wait_for(lambda: running("h100-preferred-pod"), timeout=120, what="h100-preferred-pod Running")
        assert h100.spec.node_name == names[1]  # H100 scores higher than A100

        async def web_running() -> bool:
            pods = (await core.list_namespaced_pod("default", label_selector="app=web")).items
            assert not admission_rejections(pods)
            return len(pods) == 3 and all(p.status.phase == "Running" for p in pods)

        await wait_for(web_running, timeout=120, what="the web Deployment's 3 replicas Running")

        for pending, reason in (("too-big-pod", "NVLink"), ("t4-batch-pod", "")):
            async def failed(name: str = pending, word: str = reason) -> bool:
                evs = [m for r, m in await pod_events(realnodes_api, name) if r == "FailedScheduling"]
                return bool(evs) and word in evs[-1]

            await wait_for(failed, timeout=60, what=f"{pending}'s FailedScheduling event")
            assert (await phase(pending)).status.phase == "Pending"
    finally:
        for f in sorted(EXAMPLES.glob("*.yaml")):
            kubectl(tb, "delete", "-f", str(f), "--ignore-not-found", "--wait=false", check=False)
        kubectl(tb, "delete", "-k", str(REPO / "deploy" / "kind" / "fake-gpus"), "--ignore-not-found", check=False)
        kubectl(tb, "delete", "-k", str(REPO / "deploy"), "--ignore-not-found", "--wait=true", "--timeout=60s",
                check=False, timeout=90)
        kubectl(tb, "-n", "kube-system", "delete", "lease", "py-scheduler", "--ignore-not-found", check=False)
        for n in names:
            kubectl(tb, "label", "node", n, f"{PROFILE_LABEL}-", check=False)
