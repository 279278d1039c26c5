"""Helpers for tests on real nodes (kubelet + containerd + kube-proxy, tests/e2e/testbed/nodes.py).

Importable by any test module (``from tests.e2e.realnodes.support import ...``); the session fixture
``realnodes`` (conftest.py next to this file) gives the :class:`bed.Testbed` they take.

* :func:`busybox_pod` - a Pod manifest (dict) running busybox with ``imagePullPolicy: Never``.
* :func:`wait_pod_phase` - poll until a Pod reaches one of some phases; fails early on a kubelet
  admission rejection (:data:`ADMISSION_REJECTIONS`) or when it reaches a phase not asked for.
* :func:`admission_rejections` - Pods whose ``status.reason`` says the kubelet refused them.
* :func:`kubectl` - run kubectl against the bed (admin kubeconfig); returns stdout.
* :func:`bed_status` / :func:`status_line` - run ``tests/e2e/testbed/testbed status DIR`` (the real
  command line) and pick the one line it prints for a process or a Node.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, wait_for

BUSYBOX_IMAGE = "docker.io/library/busybox:testbed"
"""Built by the bed from Debian's busybox-static and imported into every node (never pulled)."""

ADMISSION_REJECTIONS = ("OutOf", "UnexpectedAdmissionError", "NodeAffinity", "NodePorts", "NodeName",
                        "InvalidNodeInfo", "PodOSNotSupported", "NodeShutdown", "Evicted")
"""Prefixes of the ``status.reason`` a kubelet sets when it rejects (or evicts) a Pod it was bound to."""


def busybox_pod(name: str, command: Sequence[str], *, scheduler: str = "py-scheduler",
                requests: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
                restart_policy: str = "Never", node_name: str | None = None,
                ports: Sequence[int] = ()) -> dict[str, Any]:
    """A one-container busybox Pod; ``requests`` are also its limits' absence (Burstable/BestEffort)."""
    container: dict[str, Any] = {
        "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": list(command),
        "resources": {"requests": dict(requests)} if requests else {},
    }
    if ports:
        container["ports"] = [{"containerPort": p} for p in ports]
    spec: dict[str, Any] = {"schedulerName": scheduler, "restartPolicy": restart_policy,
                            "terminationGracePeriodSeconds": 1, "containers": [container],
                            "automountServiceAccountToken": False}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels or {"app": name})}, "spec": spec}


def rejected(pod: Any) -> bool:
    """Whether the kubelet refused (or evicted) ``pod`` (a V1Pod)."""
    reason = (pod.status and pod.status.reason) or ""
    return pod.status is not None and pod.status.phase == "Failed" and reason.startswith(ADMISSION_REJECTIONS)


def admission_rejections(pods: Iterable[Any]) -> list[str]:
    """``name: reason: message`` of every Pod the kubelet refused."""
    return [f"{p.metadata.name}: {p.status.reason}: {p.status.message}" for p in pods if rejected(p)]


async def wait_pod_phase(core: client.CoreV1Api, name: str, phases: Sequence[str], *, namespace: str = "default",
                         timeout: float = 60.0) -> Any:
    """The Pod once its phase is one of ``phases``; AssertionError on a rejection, an unexpected
    terminal phase or the timeout."""
    async def check() -> Any:
        pod = await core.read_namespaced_pod(name, namespace)
        phase = pod.status.phase if pod.status else None
        if phase in phases:
            return pod
        if rejected(pod) or phase in ("Failed", "Succeeded"):
            raise AssertionError(f"pod {name} is {phase} ({pod.status.reason}: {pod.status.message}); "
                                 f"containers: {pod.status.container_statuses}")
        return None

    return await wait_for(check, timeout=timeout, interval=0.3, what=f"pod {name} in {list(phases)}")


def kubectl(tb: Testbed, *args: str, timeout: float = 90.0, check: bool = True,
            input_json: Mapping[str, Any] | None = None) -> str:
    """``kubectl --kubeconfig <admin> ARGS`` (``input_json`` on stdin); stdout (AssertionError with
    stderr when ``check`` and it fails)."""
    out = subprocess.run(["kubectl", "--kubeconfig", str(tb.kubeconfig), *args], capture_output=True, text=True,
                         timeout=timeout, input=json.dumps(input_json) if input_json is not None else None)
    if check and out.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out.stdout


async def delete_pods(core: client.CoreV1Api, names: Iterable[str], namespace: str = "default") -> None:
    """Delete Pods (kubelets really stop them: grace 1 s), ignoring those already gone."""
    async def one(n: str) -> None:
        try:
            await core.delete_namespaced_pod(n, namespace, grace_period_seconds=1)
        except client.ApiException as e:
            if e.status != 404:
                raise
    await asyncio.gather(*(one(n) for n in names))


TESTBED_CLI = Path(__file__).resolve().parents[1] / "testbed" / "testbed"


def bed_status(tb: Testbed) -> tuple[int, list[str]]:
    """``tests/e2e/testbed/testbed status DIR`` for ``tb``, as a user runs it: exit status, stdout's lines."""
    out = subprocess.run([sys.executable, str(TESTBED_CLI), "status", str(tb.dir)], capture_output=True,
                         text=True, timeout=60, check=False)
    return out.returncode, out.stdout.splitlines()


def status_line(lines: Sequence[str], *first: str) -> str:
    """The one line of ``status``'s output whose first words are ``first`` (``"node-0-kubelet"``, or
    ``"node", NODE_NAME``); fails unless there is exactly one."""
    found = [ln for ln in lines if ln.split()[:len(first)] == list(first)]
    assert len(found) == 1, f"{len(found)} lines start with {' '.join(first)!r}:\n" + "\n".join(lines)
    return found[0]
