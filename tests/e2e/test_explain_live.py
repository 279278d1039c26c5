"""``py-scheduler explain --kubeconfig`` against the real test bed (etcd + kube-apiserver v1.37).

The Pods name a schedulerName nobody serves, so they stay pending while explain reads the live
cluster. Our Nodes carry a taint only our Pods tolerate and a unique label our Pods select, so other
tests' Nodes and Pods sharing the bed cannot change the outcome.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from tests.e2e.helpers import Testbed, create_node, create_pod, delete_node, delete_pod, unique_name

REPO = Path(__file__).resolve().parents[2]
NOBODY = "nobody-serves-this-scheduler"


async def _explain(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "py_scheduler.cli", "explain", "--kubeconfig", str(kubeconfig), *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _records(out: str) -> dict[str, dict[str, Any]]:
    recs = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {r["pod"]: r for r in recs}


async def test_explain_live_cluster(testbed: Testbed, api_client: client.ApiClient) -> None:
    tag = unique_name("explain")
    big, small = f"{tag}-big", f"{tag}-small"
    first, second = f"{tag}-a", f"{tag}-b"  # same creationTimestamp second: name order breaks the tie
    taint = {"key": "e2e-explain", "value": tag, "effect": "NoSchedule"}
    spec = {"nodeSelector": {"e2e-explain": tag},
            "tolerations": [{"key": "e2e-explain", "operator": "Equal", "value": tag, "effect": "NoSchedule"}]}
    try:
        await create_node(api_client, big, {"cpu": "4", "memory": "8Gi", "pods": "110"},
                          labels={"e2e-explain": tag}, taints=[taint])
        await create_node(api_client, small, {"cpu": "1", "memory": "8Gi", "pods": "110"},
                          labels={"e2e-explain": tag}, taints=[taint])
        for name in (first, second):
            await create_pod(api_client, name, requests={"cpu": "3", "memory": "1Gi"}, scheduler_name=NOBODY,
                             spec=spec)

        # one Pod: only the big node has room; a single feasible node is still scored
        code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{first}", "-o", "json")
        assert code == 0, err
        rec = _records(out)[f"default/{first}"]
        assert list(rec) == ["pod", "profile", "nodes_evaluated", "filtered", "feasible", "scores", "weights",
                             "skipped", "totals", "selected", "message"]
        assert rec["profile"] == "py-scheduler"  # nobody-serves-this: the default profile explains it
        assert rec["feasible"] == [big] and rec["selected"] == big and rec["message"] is None
        assert rec["filtered"][small] == ["Insufficient cpu"]
        assert set(rec["totals"]) == {big} and rec["totals"][big] > 0
        assert rec["scores"]["NodeResourcesFit"][big] > 0
        # every other node of the bed is rejected by our nodeSelector or taint, never feasible
        for node, reasons in rec["filtered"].items():
            assert node == small or reasons, node

        # every pending Pod in queue order: the second sees the first assumed on the big node
        code, out, err = await _explain(testbed.kubeconfig, "-o", "json")
        assert code == 0, err
        recs = _records(out)
        a, b = recs[f"default/{first}"], recs[f"default/{second}"]
        assert a["selected"] == big
        assert b["selected"] is None and b["feasible"] == []
        assert b["filtered"][big] == ["Insufficient cpu"] and b["filtered"][small] == ["Insufficient cpu"]
        assert b["message"].startswith("0/") and "2 Insufficient cpu" in b["message"]

        # the table names the plugins and marks the selected node
        code, out, err = await _explain(testbed.kubeconfig, "--pod", f"default/{first}")
        assert code == 0, err
        assert "NodeResourcesFit" in out and "✔ selected" in out
        line = next(row for row in out.splitlines() if "✔ selected" in row)
        assert big in line
    finally:
        for name in (first, second):
            await delete_pod(api_client, name)
        for name in (big, small):
            await delete_node(api_client, name)


async def test_explain_live_unknown_pod(testbed: Testbed) -> None:
    code, out, err = await _explain(testbed.kubeconfig, "--pod", "default/does-not-exist-" + unique_name("x"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "not found" in err and "Traceback" not in err
