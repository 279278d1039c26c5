"""Hostile snapshot and configuration files found by the twentieth session's new-user trial: each ends
in one line naming the file, object and field (exit 2), or, for a pending Pod, in that Pod's own
message while the others are placed; never a segmentation fault, a traceback or a silent wrong answer."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from offline_objects import node, pod, write_list
from typer.testing import CliRunner

from py_scheduler.cli import app
from py_scheduler.framework.config import ConfigError, load_config
from py_scheduler.offline.loader import SnapshotError, load_snapshot_file
from py_scheduler.plugins import registry

REPO = Path(__file__).resolve().parents[3]
BIG = "9" * 4301  # one digit past Python's limit for int(str) (sys.get_int_max_str_digits)


def _simulate(*args: str) -> Any:
    return CliRunner().invoke(app, ["simulate", *args])


def _bad_alone(tmp_path: Path, bad: dict[str, Any]) -> str:
    """Simulate Pod ``bad`` beside a Pod ``good`` on one node: ``good`` is placed, ``bad`` is not, no
    traceback, exit 0. Returns ``bad``'s message."""
    path = write_list(tmp_path / "s.yaml", [node("n1"), bad, pod("good", cpu="1")])
    out = _simulate(str(path), "-o", "json")
    assert out.exit_code == 0 and "Traceback" not in out.output, out.output
    placed = {p["pod"]: p for p in json.loads(out.stdout)["placements"]}
    assert placed["default/good"]["node"] == "n1"
    assert placed["default/bad"]["node"] is None
    return str(placed["default/bad"]["message"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", ["x: " + "[" * 30000 + "]" * 30000, "- " * 30000 + "a\n",
                                  "x: " + "{a: " * 30000 + "1" + "}" * 30000],
                         ids=["flow-lists", "block-lists", "flow-maps"])
def test_deep_nesting_is_refused_not_a_segmentation_fault(tmp_path: Path, text: str) -> None:
    """libyaml composed nodes by C recursion: about 25 000 levels in 60 KB overflowed the C stack and
    killed the process with no message (exit 139). Run in a child process, as that crash would end pytest."""
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "py_scheduler.cli", "simulate", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "invalid YAML: nested too deeply" in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_an_integer_past_the_digit_limit_is_one_line(tmp_path: Path, fmt: str) -> None:
    n = node("n1")
    n["metadata"]["annotations"] = {"x": "y"}
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [n]}).replace('"y"', BIG)
    path = tmp_path / f"big.{fmt}"
    path.write_text(text if fmt == "json" else "# YAML: not read as JSON first\n" + text)
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: invalid {fmt.upper()}: ") and "Exceeds the limit (4300 digits)" in msg, msg
    assert "set_int_max_str_digits" not in msg and "\n" not in msg
    out = _simulate(str(path))
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output


@pytest.mark.parametrize("body", ["x: " + "[" * 5000 + "]" * 5000, f"percentageOfNodesToScore: {BIG}"],
                         ids=["deep", "big-int"])
def test_a_hostile_config_file_is_one_line(tmp_path: Path, body: str) -> None:
    """5000 levels: past the recursion limit whether or not celpy raised it to 2500 on import."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" + body + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg, registry=registry)
    assert str(err.value).startswith(f"{cfg}: invalid YAML: ") and "\n" not in str(err.value)
    snap = write_list(tmp_path / "s.yaml", [node("n1"), pod("web", cpu="1")])
    out = _simulate("--config", str(cfg), str(snap))
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output


@pytest.mark.parametrize(("disabled", "message"), [
    ("[{name: '*'}]", "only one queue sort plugin required for profile with scheduler name 'default-scheduler', "
                      "but got 0"),
    ("[{name: DefaultBinder}]", "at least one bind plugin is needed for profile with scheduler name "
                                "'default-scheduler'"),
])
def test_a_profile_that_cannot_sort_or_bind_is_refused_as_upstream(tmp_path: Path, disabled: str,
                                                                    message: str) -> None:
    """NewFramework (framework/runtime/framework.go) refuses such a profile; before, a profile with
    every plugin disabled placed a 64-CPU Pod on a tainted 1-CPU node."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                   f"profiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n"
                   f"      disabled: {disabled}\n")
    snap = write_list(tmp_path / "s.yaml", [node("n1", cpu="1"), pod("big", cpu="64")])
    out = _simulate("--config", str(cfg), str(snap))
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output, out.output


@pytest.mark.parametrize("volumes", [5, True, "x", [5], [None]])
def test_a_pending_pods_malformed_volumes_name_the_field(tmp_path: Path, volumes: object) -> None:
    bad = pod("bad", cpu="1", spec={"volumes": volumes})
    assert "for spec.volumes: expected a list of volumes" in _bad_alone(tmp_path, bad)


def _dra(slice_devices: list[Any] | None = None, cls_spec: Any = None, claim_devices: Any = None) -> list[Any]:
    objs: list[Any] = [node("n1")]
    objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-gpu"},
                 "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                          "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                          "devices": slice_devices if slice_devices is not None else [{"name": "gpu-0"}]}})
    objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
                 "spec": cls_spec if cls_spec is not None else
                 {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}})
    objs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "c1", "namespace": "default"},
                 "spec": {"devices": claim_devices if claim_devices is not None else
                          {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}})
    p = pod("a")
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c1"}]
    objs.append(p)
    return objs


def _exactly(**fields: Any) -> Any:
    return {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", **fields}}]}


@pytest.mark.parametrize(("objs", "message"), [
    (_dra(slice_devices=[{"name": "gpu-0", "attributes": 5}]),
     "ResourceSlice n1-gpu: invalid value 5 for spec.devices[0].attributes: expected a map of maps"),
    (_dra(slice_devices=[{"name": "gpu-0", "capacity": {"memory": "80Gi"}}]),
     "ResourceSlice n1-gpu: invalid value {'memory': '80Gi'} for spec.devices[0].capacity: expected a map of maps"),
    (_dra(slice_devices=[5]), "ResourceSlice n1-gpu: invalid value [5] for spec.devices: expected a list of maps"),
    (_dra(cls_spec={"selectors": 5}), "DeviceClass gpu: invalid value 5 for spec.selectors: expected a list of maps"),
    (_dra(claim_devices={"requests": 5}),
     "ResourceClaim default/c1: invalid value 5 for spec.devices.requests: expected a list of maps"),
    (_dra(claim_devices={"requests": [], "constraints": 5}),
     "ResourceClaim default/c1: invalid value 5 for spec.devices.constraints: expected a list of maps"),
    (_dra(claim_devices=_exactly(selectors=[{"cel": {"expression": None}}])),
     "ResourceClaim default/c1: invalid value None for spec.devices.requests[0].exactly.selectors[0].cel.expression: "
     "expected a string"),
    (_dra(claim_devices=_exactly(count=-1)),
     "ResourceClaim default/c1: invalid value -1 for spec.devices.requests[0].exactly.count: expected a "
     "non-negative integer"),
    (_dra(claim_devices=_exactly(count="x")),
     "ResourceClaim default/c1: invalid value 'x' for spec.devices.requests[0].exactly.count"),
], ids=["attributes", "capacity-values", "devices", "class-selectors", "requests", "constraints", "null-expression",
        "count-negative", "count-string"])
def test_a_malformed_dra_object_names_itself_and_the_field(tmp_path: Path, objs: list[Any], message: str) -> None:
    """Before, the claim's Pod got a bare Python exception (``AttributeError: 'int' object has no
    attribute 'items'``) after a traceback, and a null CEL expression was no selector at all."""
    path = write_list(tmp_path / "s.yaml", objs)
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(path)
    assert message in str(err.value), str(err.value)
    out = _simulate(str(path))
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output


@pytest.mark.parametrize("request_fields", [{"count": 1, "selectors": [{"cel": {"expression": "true"}}]},
                                            {"allocationMode": "All", "count": 0}, {"count": 0},
                                            {"selectors": None, "tolerations": None}],
                         ids=["count-1", "all-count-0", "count-0-defaulted", "nulls"])
def test_well_formed_dra_objects_still_load_and_place(tmp_path: Path, request_fields: dict[str, Any]) -> None:
    """``count: 0`` is what ``allocationMode: All`` requires, and the API server defaults it to 1
    otherwise; a null list is an omitted one."""
    objs = _dra(slice_devices=[{"name": "gpu-0", "attributes": {"model": {"string": "a100"}},
                                "capacity": {"memory": {"value": "80Gi"}}}],
                claim_devices=_exactly(**request_fields))
    out = _simulate(str(write_list(tmp_path / "s.yaml", objs)), "-o", "json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["placements"][0]["node"] == "n1"


def test_a_nodes_malformed_image_list_names_the_node_and_field(tmp_path: Path) -> None:
    n = node("n1")
    n["status"]["images"] = 5
    with pytest.raises(SnapshotError, match=r"Node n1: invalid value 5 for status.images: expected a list of images"):
        load_snapshot_file(write_list(tmp_path / "s.yaml", [n]))


def test_a_null_label_or_annotation_value_is_an_empty_string_as_the_api_decodes_it(tmp_path: Path) -> None:
    """``node-role.kubernetes.io/worker:`` with nothing after it is YAML null; Go decodes it as ""."""
    n = node("n1")
    n["metadata"]["labels"]["node-role.kubernetes.io/worker"] = None
    p = pod("web", cpu="1", annotations={"note": "x"})
    p["metadata"]["annotations"]["note"] = None
    out = _simulate(str(write_list(tmp_path / "s.yaml", [n, p])), "-o", "json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["placements"][0]["node"] == "n1"


@pytest.mark.parametrize("value", [True, 1, 1.5])
def test_a_non_string_label_on_a_node_is_refused(tmp_path: Path, value: object) -> None:
    """An unquoted ``gpu: true`` in YAML: no selector ever matched the node, and nothing said why."""
    n = node("n1")
    n["metadata"]["labels"]["gpu"] = value
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(write_list(tmp_path / "s.yaml", [n, pod("web", cpu="1")]))
    assert f"Node n1: invalid value {value!r} for metadata.labels['gpu']: not a string (quote it in YAML)" \
        in str(err.value)


@pytest.mark.parametrize(("field", "patch", "message"), [
    ("labels", {"metadata": {"labels": {"app": ["web"]}}},
     "invalid value ['web'] for metadata.labels['app']: not a string"),
    ("annotations", {"metadata": {"annotations": {"gpu-scheduler/gpu-count": []}}},
     "invalid value [] for metadata.annotations['gpu-scheduler/gpu-count']: not a string"),
    ("priority", {"spec": {"priority": "1000"}}, "invalid value '1000' for spec.priority: expected an integer"),
    ("priority-bool", {"spec": {"priority": True}}, "invalid value True for spec.priority: expected an integer"),
    ("weight", {"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": -5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}}},
     "invalid value -5 for spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
     "must be in the range 1-100"),
    ("anti-weight", {"spec": {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1000, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {}}}]}}}},
     "invalid value 1000 for spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
     ".weight: must be in the range 1-100"),
])
def test_a_pending_pod_the_api_server_could_not_decode_is_refused_alone(tmp_path: Path, field: str, patch: Any,
                                                                         message: str) -> None:
    """docs/explain_simulate.md: a pending Pod with a malformed field is not a snapshot error. Before,
    a list-valued label stopped the whole run, and a quoted priority silently counted as 0."""
    bad = pod("bad", cpu="1")
    for part, fields in patch.items():
        bad.setdefault(part, {}).update(copy.deepcopy(fields))
    assert _bad_alone(tmp_path, bad) == f"not created: the API server refuses it: {message}"
    bound = copy.deepcopy(bad)
    bound["spec"]["nodeName"] = "n1"
    with pytest.raises(SnapshotError, match=r"Pod default/bad: invalid value"):
        load_snapshot_file(write_list(tmp_path / "b.yaml", [node("n1"), bound]))


def test_control_characters_in_names_are_shown_not_sent_to_the_terminal(tmp_path: Path) -> None:
    """A Pod named with terminal escapes (set the window title, clear the screen) printed them raw in
    the placement table; JSON output already escaped them."""
    evil = "bad\x1b]0;pwned\x07\x1b[2J"
    gated = pod("gated\x1b[2J", spec={"schedulingGates": [{"name": "wait\x1b[2J"}]})
    path = write_list(tmp_path / "s.yaml", [node("n1"), pod(evil, cpu="1"), pod("huge", cpu="64"), gated])
    for args in (["simulate", str(path)], ["explain", "--snapshot", str(path)]):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
        assert "\x1b" not in out.output and "\x07" not in out.output, repr(out.output)
        assert "bad\\x1b]0;pwned\\x07\\x1b[2J" in out.output, out.output
        assert "gated\\x1b[2J" in out.output, out.output  # the note on the gated Pod
    out = CliRunner().invoke(app, ["explain", "--snapshot", str(path), "--pod", "gated\x1b[2J"])
    assert "\x1b" not in out.output and "wait\\x1b[2J" in out.output, repr(out.output)


@pytest.mark.parametrize("containers", [5, True])
def test_a_pending_pods_non_list_containers_name_the_field(tmp_path: Path, containers: object) -> None:
    bad = pod("bad")
    bad["spec"]["containers"] = containers
    message = f"invalid value {containers!r} for spec.containers: expected a list of containers"
    assert _bad_alone(tmp_path, bad) == message


def test_a_utf16_snapshot_is_read(tmp_path: Path) -> None:
    """What Windows PowerShell's ``kubectl get ... -o yaml > cluster.yaml`` writes: UTF-16 with a BOM."""
    text = write_list(tmp_path / "u8.yaml", [node("n1"), pod("web", cpu="1")]).read_text()
    path = tmp_path / "u16.yaml"
    path.write_bytes(text.encode("utf-16"))
    data = load_snapshot_file(path)
    assert [n["metadata"]["name"] for n in data.nodes] == ["n1"] and len(data.pods) == 1


def test_a_gang_member_the_api_server_refuses_is_no_member(tmp_path: Path) -> None:
    """A minCount-2 gang whose second member could not have been created (a quoted priority): the
    group waits for members, as the live scheduler's PreEnqueue holds it, instead of a group cycle."""
    group = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "g", "namespace":
             "default"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    members = [pod(f"m{i}", cpu="1", spec={"schedulingGroup": {"podGroupName": "g"}}) for i in range(2)]
    members[1]["spec"]["priority"] = "5"
    path = write_list(tmp_path / "s.yaml", [node("n1"), group, *members])
    out = CliRunner().invoke(app, ["simulate", str(path), "-o", "json", "--feature-gates", "GenericWorkload=true"])
    assert out.exit_code == 0, out.output
    by = {p["pod"]: p for p in json.loads(out.stdout)["placements"]}
    assert by["default/m0"]["node"] is None
    assert "waiting for minCount pods from a gang to appear in scheduling queue" in by["default/m0"]["message"]
    assert by["default/m1"]["message"].startswith("not created: the API server refuses it: ")


@pytest.mark.parametrize(("expression", "message"), [
    ('device.driver.matches("gpu(")', "CEL compile error: compilation failed: ERROR: <input>:1:23: invalid "
                                      'matches argument\n | device.driver.matches("gpu(")\n | ......................^'),
    ('matches(device.driver, "gpu(")', "CEL compile error: program instantiation failed: error parsing regexp: "
                                       "missing closing ): `gpu(`"),
    ('"gpu".matches(device.driver + "[")', "CEL runtime error: error parsing regexp: missing closing ]: `[`"),
], ids=["literal", "literal-global-form", "computed"])
def test_a_bad_regular_expression_names_itself_in_gos_words_and_prints_nothing_else(
        tmp_path: Path, expression: str, message: str) -> None:
    """Before: the Pod's message was celpy's bare "match error", and RE2 printed its own C++ log
    lines (``re2.cc:242] Error parsing '(': missing ): (``) on stderr. A child process, as those lines
    are written on file descriptor 2."""
    objs = _dra(claim_devices=_exactly(selectors=[{"cel": {"expression": expression}}]))
    path = write_list(tmp_path / "s.yaml", objs)
    out = subprocess.run([sys.executable, "-m", "py_scheduler.cli", "simulate", str(path), "-o", "json"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    # what simulate logs for a cycle that errs (upstream's "Error selecting node for pod"), nothing else
    assert out.stderr.startswith("Error selecting node for pod pod=default/a") and out.stderr.count("Error") == 1
    assert "re2" not in out.stderr and "absl" not in out.stderr, out.stderr[-2000:]
    placed = json.loads(out.stdout)["placements"][0]
    assert placed["node"] is None and message in placed["message"], placed


_WEIRD = {"matchExpressions": [{"key": "app", "operator": "Weird", "values": ["x"]}]}


@pytest.mark.parametrize(("affinity", "field", "why"), [
    ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": _WEIRD}]}},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector",
     '"Weird" is not a valid label selector operator'),
    ({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 5, "podAffinityTerm": {"topologyKey": "z", "namespaceSelector": {"matchLabels": {"a": "b c"}}}}]}},
     "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.namespaceSelector",
     'Invalid value: "b c"'),
], ids=["required-operator", "preferred-namespace-value"])
def test_a_bound_pods_malformed_affinity_selector_is_a_snapshot_error(tmp_path: Path, affinity: Any, field: str,
                                                                     why: str) -> None:
    """Before, upstream's NewPodInfo dropped the bound Pod's terms on the parse error: its required
    anti-affinity silently stopped keeping Pods off its node. The API server refuses such a Pod."""
    bound = pod("bound", node_name="n1", spec={"affinity": affinity})
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(write_list(tmp_path / "s.yaml", [node("n1"), bound, pod("p")]))
    assert f"Pod default/bound: invalid {field}: " in str(err.value) and why in str(err.value), str(err.value)


def test_a_pending_pods_malformed_affinity_selector_refuses_it_alone(tmp_path: Path) -> None:
    bad = pod("bad", spec={"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": _WEIRD}]}}})
    msg = _bad_alone(tmp_path, bad)
    assert msg == ("not created: the API server refuses it: invalid spec.affinity.podAntiAffinity."
                   'requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector: "Weird" is not a valid label '
                   "selector operator"), msg


def test_a_key_given_twice_in_yaml_is_refused_as_strict_decoding_refuses_it(tmp_path: Path) -> None:
    """PyYAML kept the second ``labels:`` and dropped the first without a word. The message is
    sigs.k8s.io/yaml's YAMLToJSONStrict's (the API server's strict decoding of a YAML body)."""
    path = tmp_path / "dup.yaml"
    path.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {a: b}\n  labels: {c: d}\n")
    with pytest.raises(SnapshotError) as err:
        load_snapshot_file(path)
    assert str(err.value) == f'{path}: invalid YAML at line 6, column 3: key "labels" already set in map'
    out = _simulate(str(path))
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output


def test_keys_a_merge_brings_in_may_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems:\n- &n\n  apiVersion: v1\n  kind: Node\n  metadata: {name: n1}\n"
                    "  status: {allocatable: {cpu: '1', memory: 1Gi, pods: '10'}}\n- <<: *n\n  metadata: {name: n2}\n")
    data = load_snapshot_file(path)
    assert [n["metadata"]["name"] for n in data.nodes] == ["n1", "n2"]


def test_a_merged_anchor_used_again_before_it_is_built_is_no_duplicate(tmp_path: Path) -> None:
    """PyYAML flattens a merge in place, and builds nested mappings later: checked at construction,
    the anchor's merged ``tier`` and its own override looked like one key given twice (a review's case)."""
    text = """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: a, namespace: default}
  spec:
    containers: [{name: c, image: x}]
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels: &sel
              <<: {app: web, tier: fe}
              tier: be
- apiVersion: v1
  kind: Pod
  metadata:
    name: b
    namespace: default
    labels: {<<: *sel}
  spec:
    containers: [{name: c, image: x}]
"""
    path = tmp_path / "m3.yaml"
    path.write_text(text)
    data = load_snapshot_file(path)
    assert [p["metadata"].get("labels") for p in data.pods] == [None, {"app": "web", "tier": "be"}]


def test_a_null_selector_value_is_an_empty_string_not_a_refusal(tmp_path: Path) -> None:
    """``matchLabels: {app: }`` is ``app: ""`` to the API server (a review's case: it was refused)."""
    bound = pod("bound", node_name="n1", spec={"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": None}}},
            {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": [None]}]}}]}}})
    data = load_snapshot_file(write_list(tmp_path / "s.yaml", [node("n1"), bound, pod("p")]))
    assert [p["metadata"]["name"] for p in data.pods] == ["bound", "p"]
