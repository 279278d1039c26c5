"""``kubectl py-scheduler`` run by the real kubectl (which finds ``kubectl-py_scheduler`` on PATH)
against the real test bed: ``explain POD`` / ``decisions POD`` with ``-n``, ``--context``,
``--kubeconfig`` / ``KUBECONFIG`` and ``-o json|yaml|wide``, ``simulate FILE``, ``--version``.

The plugin on PATH is the console script the package installs next to this interpreter when it is
there (``pip install -e .`` made it), else a launcher of ``python -m py_scheduler.kubectl_plugin``;
either way in a directory of its own, and with PYTHONPATH on this checkout. Our Nodes carry a taint
only our Pods tolerate and a label our Pods select, so other tests' Nodes and Pods cannot change
the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.e2e.helpers import (
    Testbed,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    unique_name,
    wait_for_pod_scheduled,
)
from tests.e2e.scheduler_proc import running_scheduler

REPO = Path(__file__).resolve().parents[2]
PLUGIN = "kubectl-py_scheduler"
NOBODY = "nobody-serves-this-scheduler"
_SERVING = re.compile(r"serving /metrics\S* .*? on (?P<host>\S+):(?P<port>\d+)")


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding only ``kubectl-py_scheduler``, to put first on PATH."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not installed (the plugin is run by the real kubectl)"
    bin_dir = tmp_path_factory.mktemp("plugin-bin")
    installed = Path(sysconfig.get_path("scripts")) / PLUGIN
    if installed.is_file():
        (bin_dir / PLUGIN).symlink_to(installed)
    else:
        (bin_dir / PLUGIN).write_text(f'#!/bin/sh\nexec "{sys.executable}" -m py_scheduler.kubectl_plugin "$@"\n')
        (bin_dir / PLUGIN).chmod(0o755)
    return bin_dir


async def kubectl(plugin_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``kubectl py-scheduler ARGS`` with the plugin first on PATH; (exit status, stdout, stderr)."""
    base = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PY_SCHEDULER_TOKEN")}
    full_env = {**base, "PATH": f"{plugin_path}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO),
                **(env or {})}
    proc = await asyncio.create_subprocess_exec("kubectl", "py-scheduler", *args, cwd=REPO, env=full_env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _contexts_kubeconfig(bed_kubeconfig: Path, path: Path, namespace: str) -> Path:
    """The bed's admin kubeconfig plus a context ``bed-ns`` (namespace ``namespace``) and a current
    context ``nowhere`` on a server that does not answer: only ``--context bed-ns`` reaches the bed."""
    doc = yaml.safe_load(bed_kubeconfig.read_text())
    ctx = doc["contexts"][0]["context"]
    doc["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}})
    doc["contexts"] = [{"name": "nowhere", "context": {"cluster": "nowhere", "user": ctx["user"]}},
                       {"name": "bed-ns", "context": {**ctx, "namespace": namespace}}]
    doc["current-context"] = "nowhere"
    path.write_text(yaml.safe_dump(doc))
    return path


def _isolated(tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    taint = {"key": "e2e-kubectl", "value": tag, "effect": "NoSchedule"}
    spec = {"nodeSelector": {"e2e-kubectl": tag},
            "tolerations": [{"key": "e2e-kubectl", "operator": "Equal", "value": tag, "effect": "NoSchedule"}]}
    return taint, spec


async def test_explain_through_kubectl_with_namespace_context_and_outputs(
        testbed: Testbed, api_client: client.ApiClient, plugin_path: Path, tmp_path: Path) -> None:
    tag = unique_name("kplug")
    ns, big, small, pod = tag, f"{tag}-big", f"{tag}-small", f"{tag}-p"
    core = client.CoreV1Api(api_client)
    taint, spec = _isolated(tag)
    kc = str(testbed.kubeconfig)
    await core.create_namespace({"metadata": {"name": ns}})
    try:
        for name, cpu in ((big, "4"), (small, "1")):
            await create_node(api_client, name, {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                              labels={"e2e-kubectl": tag}, taints=[taint])
        await create_pod(api_client, pod, ns, requests={"cpu": "2"}, scheduler_name=NOBODY, spec=spec)

        # -n and -o json: one indented document, explain's keys
        code, out, err = await kubectl(plugin_path, "explain", pod, "-n", ns, "-o", "json", "--kubeconfig", kc)
        assert code == 0, err
        doc = json.loads(out)
        assert out.startswith('{\n    "pod"')
        assert doc["pod"] == f"{ns}/{pod}" and doc["selected"] == big and doc["feasible"] == [big]
        assert doc["filtered"][small] == ["Insufficient cpu"]
        # -o yaml: the same document; --namespace and pod/NAME as kubectl spells them
        code, out, err = await kubectl(plugin_path, "explain", f"pod/{pod}", "--namespace", ns, "-o", "yaml",
                                       "--kubeconfig", kc)
        assert code == 0, err
        assert yaml.safe_load(out) == doc
        # the tables (default and wide): the selected node marked
        for extra in ([], ["-o", "wide"]):
            code, out, err = await kubectl(plugin_path, "explain", pod, "-n", ns, "--kubeconfig", kc, *extra)
            assert code == 0, err
            assert f"Pod {ns}/{pod}" in out and "NodeResourcesFit" in out
            assert big in next(row for row in out.splitlines() if "✔ selected" in row)

        # without -n: the context's namespace (none here: default), where the Pod is not
        code, out, err = await kubectl(plugin_path, "explain", pod, "--kubeconfig", kc)
        assert code == 2 and out == "" and f"Pod default/{pod} not found" in err and "Traceback" not in err

        # --context: its cluster and its namespace; the current context's server does not answer
        multi = _contexts_kubeconfig(testbed.kubeconfig, tmp_path / "contexts.kubeconfig", ns)
        code, out, err = await kubectl(plugin_path, "explain", pod, "--context", "bed-ns", "-o", "json",
                                       "--kubeconfig", str(multi))
        assert code == 0, err
        assert json.loads(out)["pod"] == f"{ns}/{pod}" and json.loads(out)["selected"] == big
        code, out, err = await kubectl(plugin_path, "explain", pod, "-n", ns, "-o", "json", "--kubeconfig", str(multi))
        assert code == 2 and out == "" and "127.0.0.1:9" in err and "Traceback" not in err, err
        code, out, err = await kubectl(plugin_path, "explain", pod, "--context", "no-such", "--kubeconfig", str(multi))
        assert code == 2 and "no-such" in err and "Traceback" not in err, err
        # KUBECONFIG (no --kubeconfig), as kubectl reads it
        code, out, err = await kubectl(plugin_path, "explain", pod, "--context", "bed-ns", "-o", "json",
                                       env={"KUBECONFIG": str(multi)})
        assert code == 0, err
        assert json.loads(out)["selected"] == big
    finally:
        await delete_pod(api_client, pod, ns)
        for name in (big, small):
            await delete_node(api_client, name)
        await core.delete_namespace(ns)


async def test_decisions_and_recorded_explain_through_kubectl(
        testbed: Testbed, api_client: client.ApiClient, plugin_path: Path) -> None:
    tag = unique_name("kplug-dec")
    ns, node, pod = tag, f"{tag}-n", f"{tag}-p"
    core = client.CoreV1Api(api_client)
    taint, spec = _isolated(tag)
    kc = str(testbed.kubeconfig)
    await core.create_namespace({"metadata": {"name": ns}})
    try:
        await create_node(api_client, node, {"cpu": "4", "memory": "8Gi", "pods": "110"},
                          labels={"e2e-kubectl": tag}, taints=[taint])
        async with running_scheduler(testbed, "kubectl-plugin", lease_namespace=ns,
                                     extra_args=["--metrics-bind-address", "127.0.0.1:0", "--plain-http"]) as sched:
            m = _SERVING.search(sched.log())
            assert m, sched.log()[-2000:]
            url = f"http://127.0.0.1:{m.group('port')}"
            await create_pod(api_client, pod, ns, requests={"cpu": "1"}, scheduler_name="py-scheduler", spec=spec)
            uid = (await wait_for_pod_scheduled(api_client, pod, ns)).metadata.uid
            where = ["-n", ns, "--kubeconfig", kc, "--decisions-url", url]

            code, out, err = await kubectl(plugin_path, "decisions", pod, *where, "-o", "json")
            assert code == 0, err
            doc = json.loads(out)
            assert doc["pod"] == f"{ns}/{pod}" and doc["uid"] == uid
            assert [(d["attempt"], d["result"], d["selected"], d["uid"]) for d in doc["decisions"]] == [
                (1, "scheduled", node, uid)]
            code, out, err = await kubectl(plugin_path, "decisions", pod, *where, "-o", "yaml")
            assert code == 0, err
            assert yaml.safe_load(out) == doc

            code, out, err = await kubectl(plugin_path, "decisions", pod, *where)
            assert code == 0, err
            header, row = out.splitlines()
            assert header.split() == ["ATTEMPT", "RESULT", "NODE", "TIME", "MESSAGE"]
            assert row.split()[:3] == ["1", "scheduled", node] and row.split()[-1] == "<none>"
            code, out, err = await kubectl(plugin_path, "decisions", pod, *where, "-o", "wide")
            assert code == 0, err
            header, row = out.splitlines()
            assert header.split() == ["ATTEMPT", "RESULT", "NODE", "TIME", "DURATION", "PROFILE", "UID", "EVALUATED",
                                      "FEASIBLE", "REJECTED-BY", "MESSAGE"]
            cells = row.split()
            assert cells[:3] == ["1", "scheduled", node] and cells[5:7] == ["py-scheduler", uid], row
            assert re.fullmatch(r"\d+\.\dms", cells[4]) and cells[8] == "1", row

            # explain of the bound Pod: the recorded decision
            code, out, err = await kubectl(plugin_path, "explain", pod, *where, "-o", "json")
            assert code == 0, err
            rec = json.loads(out)
            assert rec["recorded"] is True and rec["selected"] == node and rec["uid"] == uid

            # a Pod with no record: says why, exit 2
            code, out, err = await kubectl(plugin_path, "decisions", f"{tag}-absent", *where)
            assert code == 2 and out == "" and f"Pod {ns}/{tag}-absent not found" in err
            assert f"error: no recorded decisions for {ns}/{tag}-absent" in err and "Traceback" not in err
    finally:
        await delete_pod(api_client, pod, ns)
        await delete_node(api_client, node)
        await core.delete_namespace(ns)


async def test_simulate_and_version_through_kubectl(plugin_path: Path) -> None:
    example = str(REPO / "py_scheduler" / "offline" / "examples" / "cluster.yaml")
    code, out, err = await kubectl(plugin_path, "simulate", example, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["scheduled"] > 0 and doc["scheduled"] + doc["unschedulable"] == len(doc["placements"])
    code, out, err = await kubectl(plugin_path, "simulate", example, "-o", "yaml")
    assert code == 0 and yaml.safe_load(out) == doc, err
    code, out, err = await kubectl(plugin_path, "simulate", example, "-o", "wide")
    assert code == 0, err
    assert f"{doc['scheduled']} of {len(doc['placements'])} pending Pods scheduled" in out
    assert out.count("cells: normalized score × weight") >= doc["scheduled"]  # explain's table per Pod
    code, out, err = await kubectl(plugin_path, "--version")
    assert code == 0 and re.fullmatch(r"kubectl py-scheduler \S+ \(kube-scheduler v1\.37\.2 default profile\)\n",
                                      out), (out, err)
