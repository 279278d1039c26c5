"""Every Filter reason of upstream's in-tree plugins is carried, verbatim, by py-scheduler (issue 30,
item 6).

The reasons are read from kube-scheduler v1.37.2's Go source in the Go module cache (the test bed's
build fills it; ``go mod download`` in ``tests/e2e/testbed`` finds or fetches the pinned module):
every string constant named ``ErrReason...`` / ``errReason...`` of
``pkg/scheduler/framework/plugins/**`` and every literal reason of a ``fwk.NewStatus(fwk.Unschedulable
[AndUnresolvable], "...")``. Each must equal a string constant of the ``py_scheduler`` package (read
with ``ast``, so a reason split over two source lines still counts), except the reasons of features
py-scheduler does not implement, listed below with why.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from py_scheduler.offline.simulate import simulate_main

ROOT = Path(__file__).resolve().parents[3]
TESTBED_MODULE = ROOT / "tests" / "e2e" / "testbed"

NOT_IMPLEMENTED = {
    ("deferredpodscheduling/deferred_pod_scheduling.go", "node had resize preemption disabled"):
        "DeferredPodScheduling (InPlacePodVerticalScalingSchedulerPreemption, Alpha, off) is not implemented",
    ("deferredpodscheduling/deferred_pod_scheduling.go", "pod assigned to different node"):
        "DeferredPodScheduling is not implemented",
    ("deferredpodscheduling/deferred_pod_scheduling.go", "pod resize fits, waiting for Kubelet actuation"):
        "DeferredPodScheduling is not implemented",
    ("defaultpreemption/default_preemption.go", "waiting for the preemption for this pod group to be finished"):
        "pod group preemption (PreEnqueue of a PodGroup) is not implemented",
    ("dynamicresources/dynamicresources.go", "deallocation and deletion of ResourceClaims completed"):
        "PodGroupPostFilter (DRAWorkloadResourceClaims, Alpha) is not implemented",
    ("dynamicresources/dynamicresources.go", "deallocation of PodGroup ResourceClaim completed"):
        "PodGroupPostFilter (DRAWorkloadResourceClaims, Alpha) is not implemented",
}

_CONSTANT = re.compile(r'^\s*([eE]rr\w*)\s*(?:\w+\s*)?=\s*"((?:[^"\\]|\\.)*)"\s*$', re.MULTILINE)
_STATUS = re.compile(r'fwk\.NewStatus\(fwk\.(?:Unschedulable|UnschedulableAndUnresolvable),\s*"((?:[^"\\]|\\.)*)"\)')


@cache
def upstream_plugins_dir() -> Path:
    """``pkg/scheduler/framework/plugins`` of the k8s.io/kubernetes version the test bed pins."""
    out = subprocess.run(["go", "mod", "download", "-json", "k8s.io/kubernetes"], cwd=TESTBED_MODULE,
                         check=True, capture_output=True, text=True, timeout=600)
    return Path(json.loads(out.stdout)["Dir"]) / "pkg" / "scheduler" / "framework" / "plugins"


def upstream_reasons() -> list[tuple[str, str]]:
    """``(file under plugins/, reason)`` of every Filter reason constant and literal."""
    root = upstream_plugins_dir()
    out = []
    for f in sorted(root.rglob("*.go")):
        if f.name.endswith("_test.go"):
            continue
        src = f.read_text()
        rel = str(f.relative_to(root))
        out += [(rel, m.group(2)) for m in _CONSTANT.finditer(src)]
        out += [(rel, m.group(1)) for m in _STATUS.finditer(src)]
    return out


def python_strings() -> set[str]:
    strings: set[str] = set()
    for path in (ROOT / "py_scheduler").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
    return strings


def test_every_upstream_filter_reason_is_carried_verbatim() -> None:
    reasons = upstream_reasons()
    assert len(reasons) >= 30, reasons  # the grep found the plugins (v1.37.2 has 40 such strings)
    assert ("volumebinding/binder.go",
            "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)") in reasons
    ours = python_strings()
    missing = [r for r in reasons if r[1] not in ours and r not in NOT_IMPLEMENTED]
    assert not missing, f"upstream Filter reasons py-scheduler does not carry verbatim: {missing}"
    stale = [k for k in NOT_IMPLEMENTED if k not in reasons]
    assert not stale, f"listed as not implemented but no longer in upstream: {stale}"


def test_a_claim_bound_to_a_missing_pv_reads_as_upstreams_default_profile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30 item 6 asked for ``ErrReasonPVNotExist`` here. With the default profile upstream never
    gets that far: VolumeZone's PreFilter (after VolumeBinding's, which passes a claim that is not
    Lost) looks the PV up and returns the lister's NotFound as UnschedulableAndUnresolvable
    (``volumezone/volume_zone.go`` ``getErrorAsStatus``). kube-scheduler v1.37.2 on the test bed
    (this snapshot's objects, no kube-controller-manager) wrote exactly this FailedScheduling message;
    ``ErrReasonPVNotExist`` is VolumeBinding's Filter reason when VolumeZone is off
    (tests/unit/plugins/test_volume_binding.py)."""
    objs = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
             "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "data", "namespace": "default",
                          "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                      "volumeName": "pv-a", "storageClassName": ""}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
             "spec": {"containers": [{"name": "c", "image": "x"}],
                      "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}}]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    assert simulate_main(path, None, False, "json") == 0
    (placement,) = json.loads(capsys.readouterr().out)["placements"]
    assert placement["message"] == '0/1 nodes are available: persistentvolume "pv-a" not found. not found'
