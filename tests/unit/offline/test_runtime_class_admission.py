"""Snapshot Pods go through the API server's RuntimeClass admission (issue 30, item 1:
``plugin/pkg/admission/runtimeclass/admission.go``): ``spec.overhead`` from the class's
``overhead.podFixed``, its ``scheduling`` nodeSelector / tolerations merged, refusals reported.

The comparison with a real API server is ``tests/e2e/test_snapshot_defaults.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offline_objects import node, pod, write_list
from typer.testing import CliRunner

from py_scheduler.cli import app
from py_scheduler.offline.loader import SnapshotError, parse_objects

runner = CliRunner()

Obj = dict[str, Any]


def _rc(name: str, *, overhead: Obj | None = None, node_selector: dict[str, str] | None = None,
        tolerations: list[Obj] | None = None) -> Obj:
    rc: Obj = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}
    if overhead is not None:
        rc["overhead"] = {"podFixed": overhead}
    if node_selector is not None or tolerations is not None:
        rc["scheduling"] = {k: v for k, v in (("nodeSelector", node_selector), ("tolerations", tolerations))
                            if v is not None}
    return rc


def _simulate(tmp_path: Path, objs: list[Obj]) -> dict[str, Any]:
    res = runner.invoke(app, ["simulate", str(write_list(tmp_path / "s.yaml", objs)), "-o", "json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def test_simulate_refuses_a_node_with_room_for_the_containers_but_not_the_overhead(tmp_path: Path) -> None:
    """1.5 CPU / 3Gi of containers fit a 2 CPU / 4Gi node; with the kata class's 1 CPU / 2Gi overhead
    (which the API server sets on the Pod and NodeResourcesFit adds) they do not."""
    kata = _rc("kata", overhead={"cpu": "1", "memory": "2Gi"})
    vm = pod("vm", cpu="1500m", memory="3Gi", spec={"runtimeClassName": "kata"})
    plain = pod("plain", cpu="1500m", memory="3Gi")
    doc = _simulate(tmp_path, [node("small", cpu="2", memory="4Gi"), kata, vm])
    (p,) = doc["placements"]
    assert p["node"] is None
    assert "Insufficient cpu" in p["message"] and "Insufficient memory" in p["message"]
    # the same containers without the class fit, and with a larger node the overhead is counted
    assert _simulate(tmp_path, [node("small", cpu="2", memory="4Gi"), kata, plain])["placements"][0]["node"] == "small"
    doc = _simulate(tmp_path, [node("small", cpu="2", memory="4Gi"), node("big", cpu="4", memory="8Gi"), kata, vm])
    assert doc["placements"][0]["node"] == "big"
    (big,) = [n for n in doc["nodes"] if n["name"] == "big"]
    assert big["after"]["milli_cpu_requested"] - big["before"]["milli_cpu_requested"] == 2500, big


def test_simulate_follows_the_classs_node_selector_and_tolerations(tmp_path: Path) -> None:
    """The class's ``scheduling.nodeSelector`` is merged into the Pod's (which keeps its own keys) and
    its tolerations let the Pod onto the tainted sandbox nodes."""
    gvisor = _rc("gvisor", node_selector={"sandbox": "gvisor"},
                 tolerations=[{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}])
    taint = [{"key": "sandbox", "value": "gvisor", "effect": "NoSchedule"}]
    nodes = [node("plain", cpu="8"),
             node("sandbox-a", cpu="2", labels={"sandbox": "gvisor", "zone": "a"}, taints=taint),
             node("sandbox-b", cpu="2", labels={"sandbox": "gvisor", "zone": "b"}, taints=taint)]
    p = pod("p", cpu="1", spec={"runtimeClassName": "gvisor", "nodeSelector": {"zone": "b"}})
    (out,) = _simulate(tmp_path, [*nodes, gvisor, p])["placements"]
    assert out["node"] == "sandbox-b", out
    data = parse_objects([gvisor, pod("p", spec={"runtimeClassName": "gvisor", "nodeSelector": {"zone": "b"}})], "t")
    spec = data.pods[0]["spec"]
    assert spec["nodeSelector"] == {"zone": "b", "sandbox": "gvisor"}
    assert {"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    # without the class, the Pod cannot go to a sandbox node and the plain node does not match zone b
    (out,) = _simulate(tmp_path, [*nodes, pod("p", cpu="1", spec={"nodeSelector": {"zone": "b"}})])["placements"]
    assert out["node"] is None


def test_merge_tolerations_drops_the_ones_a_wider_toleration_covers() -> None:
    """``MergeTolerations``: a class tolerating everything (``operator: Exists``, no key) leaves only
    that toleration; the DefaultTolerationSeconds ones and the Pod's own are covered by it."""
    everything = _rc("all", tolerations=[{"operator": "Exists"}])
    data = parse_objects([everything, pod("p", spec={"runtimeClassName": "all", "tolerations": [
        {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]})], "t")
    assert data.pods[0]["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_refusals_are_reported_for_the_pod_not_raised(tmp_path: Path) -> None:
    """What the plugin refuses (class missing, conflicting nodeSelector, an overhead that differs from
    the class's or without a class) is that Pod's result; the other Pods are placed."""
    classes = [_rc("kata", overhead={"cpu": "250m"}), _rc("gvisor", node_selector={"sandbox": "gvisor"})]
    pods = [pod("missing", spec={"runtimeClassName": "nope"}),
            pod("conflict", spec={"runtimeClassName": "gvisor", "nodeSelector": {"sandbox": "kata"}}),
            pod("other-overhead", spec={"runtimeClassName": "kata", "overhead": {"cpu": "1"}}),
            pod("same-overhead", spec={"runtimeClassName": "kata", "overhead": {"cpu": "0.25"}}),
            pod("no-class-overhead", spec={"overhead": {"cpu": "1"}}),
            pod("fine", cpu="1")]
    doc = _simulate(tmp_path, [node("n", labels={"sandbox": "kata"}), *classes, *pods])
    got = {p["pod"]: (p["node"], p["message"]) for p in doc["placements"]}
    assert got["default/fine"][0] == "n" and got["default/same-overhead"][0] == "n"
    msgs = {k: m for k, (n, m) in got.items() if n is None}
    assert set(msgs) == {"default/missing", "default/conflict", "default/other-overhead",
                         "default/no-class-overhead"}
    assert 'pods "missing" is forbidden: pod rejected: RuntimeClass "nope" not found' in msgs["default/missing"]
    assert ("conflict: runtimeClass.scheduling.nodeSelector[sandbox] = gvisor; pod.spec.nodeSelector[sandbox] = kata"
            in msgs["default/conflict"])
    assert "Pod's Overhead doesn't match RuntimeClass's defined Overhead" in msgs["default/other-overhead"]
    assert "Pod Overhead set without corresponding RuntimeClass defined Overhead" in msgs["default/no-class-overhead"]
    assert all(m.startswith("not created: the API server refuses it: ") for m in msgs.values())
    res = runner.invoke(app, ["explain", "--snapshot", str(tmp_path / "s.yaml"), "--pod", "missing", "-o", "json"])
    assert res.exit_code == 0, res.output
    assert 'RuntimeClass "nope" not found' in json.loads(res.stdout)["message"]


def test_bound_pods_are_never_refused_and_a_malformed_class_is_a_snapshot_error() -> None:
    """A bound Pod of a class missing from the dump runs, so the API server admitted it: it is loaded
    and counted. A RuntimeClass whose overhead is not a quantity names itself."""
    data = parse_objects([node("n"), pod("b", cpu="1", node_name="n", spec={"runtimeClassName": "gone"}),
                          pod("p", spec={"runtimeClassName": "gone"})], "t")
    assert list(data.rejected) == ["default/p"]
    assert data.snapshot().node_info_map["n"].requested.milli_cpu == 1000
    try:
        parse_objects([_rc("bad", overhead={"cpu": "lots"})], "t")
    except SnapshotError as exc:
        assert "RuntimeClass bad" in str(exc) and "overhead.podFixed.cpu" in str(exc)
    else:
        raise AssertionError("a malformed RuntimeClass loaded")


def test_requests_the_api_server_would_refuse_are_reported_not_placed(tmp_path: Path) -> None:
    """``validateResourceRequirements``: a GPU request without a limit (the usual hand-written
    mistake: an extended resource cannot be overcommitted) or above its limit is the Pod's result; a
    GPU limit alone (defaulting copies it to the request) and a cpu request under its limit are placed."""
    def res(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
        return {"containers": [{"name": "c", "resources": {k: v for k, v in (("requests", requests),
                                                                              ("limits", limits)) if v}}]}

    pods = [pod("gpu-no-limit", spec=res({"nvidia.com/gpu": "1"})),
            pod("gpu-below", spec=res({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"})),
            pod("cpu-above", spec=res({"cpu": "1500m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"})),
            pod("gpu-limit", spec=res(None, {"nvidia.com/gpu": "1"})),
            pod("cpu-under", spec=res({"cpu": "500m"}, {"cpu": "1"}))]
    doc = _simulate(tmp_path, [node("n", extra={"nvidia.com/gpu": "4"}), *pods])
    got = {p["pod"]: (p["node"], p["message"]) for p in doc["placements"]}
    assert got["default/gpu-limit"][0] == got["default/cpu-under"][0] == "n", got
    prefix = "not created: the API server refuses it: "
    assert got["default/gpu-no-limit"] == (None, prefix + 'Pod "gpu-no-limit" is invalid: spec.containers[0].'
                                           "resources.limits: Required value: Limit must be set for non "
                                           "overcommitable resources")
    assert got["default/gpu-below"] == (None, prefix + 'Pod "gpu-below" is invalid: spec.containers[0].resources.'
                                        'requests: Invalid value: "1": must be equal to nvidia.com/gpu limit of 2')
    assert got["default/cpu-above"] == (None, prefix + 'Pod "cpu-above" is invalid: spec.containers[0].resources.'
                                        'requests: Invalid value: "1500m": must be less than or equal to cpu '
                                        "limit of 1")
