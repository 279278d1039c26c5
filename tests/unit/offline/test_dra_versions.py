"""Snapshots with older ``resource.k8s.io`` versions (issue 30, item 2): v1beta1 / v1beta2 objects are
converted to v1 as the API server converts them (``py_scheduler/offline/dra_versions.py``; the
round trip through the API server is ``tests/e2e/test_dra_versions.py``), other versions are refused
with one line naming the version.

Before: a v1beta1 slice's ``basic:`` wrapper was read as v1 and its attributes vanished ("CEL runtime
error: no such key: model"); a v1beta1 claim failed with "unknown request type".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.offline.dra_versions import to_v1
from py_scheduler.offline.simulate import simulate_main

Obj = dict[str, Any]
DRIVER = "gpu.example.com"


def _node(name: str) -> Obj:
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def _v1beta1_slice(node: str, model: str) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "basic": {"attributes": {"model": {"string": model}},
                                                             "capacity": {"memory": {"value": "80Gi"}}}}]}}


def _snapshot(tmp_path: Path, claim_version: str, request: Obj) -> Path:
    objs = [_node("n1"), _node("n2"), _v1beta1_slice("n1", "A100"), _v1beta1_slice("n2", "H100"),
            {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceClass", "metadata": {"name": "gpu"},
             "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
            {"apiVersion": f"resource.k8s.io/{claim_version}", "kind": "ResourceClaim",
             "metadata": {"name": "h100", "namespace": "default"}, "spec": {"devices": {"requests": [request]}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
             "spec": {"containers": [{"name": "c", "image": "x"}],
                      "resourceClaims": [{"name": "gpu", "resourceClaimName": "h100"}]}}]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    return path


H100 = f'device.attributes["{DRIVER}"].model == "H100"'


@pytest.mark.parametrize(("version", "request_"), [
    ("v1beta1", {"name": "r", "deviceClassName": "gpu", "selectors": [{"cel": {"expression": H100}}]}),
    ("v1beta2", {"name": "r", "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": H100}}]}}),
    ("v1beta1", {"name": "r", "deviceClassName": "", "firstAvailable": [
        {"name": "a100", "deviceClassName": "gpu", "selectors": [{"cel": {"expression": H100.replace("H", "A")}}],
         "count": 2},
        {"name": "h100", "deviceClassName": "gpu", "selectors": [{"cel": {"expression": H100}}]}]}),
])
def test_an_older_claim_on_older_slices_is_placed_by_the_device_attributes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, request_: Obj) -> None:
    assert simulate_main(_snapshot(tmp_path, version, request_), None, False, "json") == 0
    doc = json.loads(capsys.readouterr().out)
    (placement,) = doc["placements"]
    assert placement["node"] == "n2", placement


def test_an_unserved_version_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _snapshot(tmp_path, "v1alpha2", {"name": "r", "deviceClassName": "gpu"})
    assert simulate_main(path, None, False, "json") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "ResourceClaim default/h100: apiVersion resource.k8s.io/v1alpha2 is not a version of ResourceClaim" in err
    assert "resource.k8s.io/v1, resource.k8s.io/v1beta1, resource.k8s.io/v1beta2" in err


def test_conversion_of_v1beta1_shapes() -> None:
    """The fields upstream's conversion moves, with the version's and v1's defaults."""
    claim = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [
                 {"name": "admin", "deviceClassName": "gpu", "adminAccess": False, "allocationMode": "All",
                  "tolerations": [{"key": "k", "effect": "NoSchedule"}], "selectors": []},
                 {"name": "sel", "deviceClassName": "", "selectors": [{"cel": {"expression": "true"}}]},
                 {"name": "alt", "deviceClassName": "", "firstAvailable": [{"name": "s", "deviceClassName": "gpu"}]}]}}}
    assert to_v1("ResourceClaim", claim)["spec"]["devices"]["requests"] == [
        {"name": "admin", "exactly": {"deviceClassName": "gpu", "adminAccess": False, "allocationMode": "All",
                                      "tolerations": [{"key": "k", "effect": "NoSchedule", "operator": "Equal"}]}},
        {"name": "sel", "exactly": {"deviceClassName": "", "selectors": [{"cel": {"expression": "true"}}],
                                    "allocationMode": "ExactCount", "count": 1}},
        {"name": "alt", "firstAvailable": [{"name": "s", "deviceClassName": "gpu", "allocationMode": "ExactCount",
                                            "count": 1}]}]
    assert claim["spec"]["devices"]["requests"][0]["deviceClassName"] == "gpu"  # the input is not changed
    sl = to_v1("ResourceSlice", {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice", "metadata": {},
                                 "spec": {"driver": "d", "nodeName": "", "allNodes": True, "pool": {"name": "p"},
                                          "devices": [{"name": "a", "basic": {"attributes": {}, "allNodes": False,
                                                                              "taints": []}}, {"name": "b"}]}})
    assert sl == {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {},
                  "spec": {"driver": "d", "allNodes": True, "pool": {"name": "p"},
                           "devices": [{"name": "a", "allNodes": False}, {"name": "b"}]}}


def _one_gpu_snapshot(tmp_path: Path, taken: Obj) -> Path:
    """Node n1 with one GPU (a v1beta1 slice), a v1beta1 claim ``taken`` held by a bound Pod, and a
    pending Pod whose v1beta1 claim asks for any GPU."""
    objs = [_node("n1"), _v1beta1_slice("n1", "H100"),
            {"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
             "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
            taken,
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default", "uid": "u-h"},
             "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}],
                      "resourceClaims": [{"name": "gpu", "resourceClaimName": "taken"}]},
             "status": {"phase": "Running"}},
            {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
             "metadata": {"name": "wants", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu"}]}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
             "spec": {"containers": [{"name": "c", "image": "x"}],
                      "resourceClaims": [{"name": "gpu", "resourceClaimName": "wants"}]}}]
    path = tmp_path / "one-gpu.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    return path


def _taken_claim(allocated: bool) -> Obj:
    claim: Obj = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
                  "metadata": {"name": "taken", "namespace": "default"},
                  "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu"}]}}}
    if allocated:
        claim["status"] = {
            "allocation": {"devices": {"results": [{"request": "r", "driver": DRIVER, "pool": "n1",
                                                    "device": "gpu-0"}]},
                           "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                               {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "holder", "uid": "u-h"}]}
    return claim


@pytest.mark.parametrize("allocated", [True, False])
def test_an_allocated_v1beta1_claim_holds_its_device(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     allocated: bool) -> None:
    """A v1beta1 claim's ``status.allocation`` in a dump takes its device: the pending Pod asking for
    the node's only GPU is refused; without the allocation (control) it gets that GPU."""
    assert simulate_main(_one_gpu_snapshot(tmp_path, _taken_claim(allocated)), None, False, "json") == 0
    (placement,) = json.loads(capsys.readouterr().out)["placements"]
    assert placement["pod"] == "default/p"
    if allocated:
        assert placement["node"] is None, placement
        assert "cannot allocate all claims" in placement["message"], placement
    else:
        assert placement["node"] == "n1", placement
