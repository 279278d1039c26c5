"""Snapshot loading: List / typed List / multi-document YAML / JSON, validation errors, defaults."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from offline_objects import node, pod, write_list, write_multidoc

from py_scheduler.offline.engine import queue_order
from py_scheduler.offline.loader import (
    SnapshotError,
    bundled_example_path,
    load_snapshot_file,
    note_skipped,
    pending_pods,
)


def _objects() -> list[dict]:
    return [
        node("n1"), node("n2", cpu="8"),
        pod("bound", cpu="1", node_name="n1", phase="Running"),
        pod("pending", cpu="500m"),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
         "spec": {"selector": {"app": "web"}}},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
         "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer"},
    ]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_v1_list(tmp_path: Path, fmt: str) -> None:
    data = load_snapshot_file(write_list(tmp_path / f"snap.{fmt}", _objects(), fmt))
    assert [n["metadata"]["name"] for n in data.nodes] == ["n1", "n2"]
    assert [p["metadata"]["name"] for p in data.pods] == ["bound", "pending"]
    assert data.objects.get("Service", "shop/web") is not None
    assert data.objects.get("PriorityClass", "high") is not None
    assert data.objects.get("StorageClass", "fast") is not None
    snap = data.snapshot()
    assert snap.get("n1").requested.milli_cpu == 1000
    assert snap.get("n2").allocatable.milli_cpu == 8000
    assert [p["metadata"]["name"] for p in pending_pods(data)] == ["pending"]


def test_multidoc_yaml_with_empty_documents_and_nested_lists(tmp_path: Path) -> None:
    objs = _objects()
    path = tmp_path / "snap.yaml"
    write_multidoc(path, objs[:3])
    nested = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "List", "items": objs[3:5]}]}
    path.write_text(path.read_text() + "---\n# only a comment\n---\n" + json.dumps(nested) + "\n")
    data = load_snapshot_file(path)
    assert len(data.nodes) == 2 and len(data.pods) == 2
    assert data.objects.get("Service", "shop/web") is not None


def test_typed_lists_without_item_kinds(tmp_path: Path) -> None:
    nodes = [node("n1"), node("n2")]
    for n in nodes:
        del n["kind"]
    p = pod("x")
    del p["kind"]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps([{"kind": "NodeList", "items": nodes}, {"kind": "PodList", "items": [p]}]))
    data = load_snapshot_file(path)
    assert [n["metadata"]["name"] for n in data.nodes] == ["n1", "n2"]
    assert len(data.pods) == 1


def test_single_json_object(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps(node("only")))
    data = load_snapshot_file(path)
    assert [n["metadata"]["name"] for n in data.nodes] == ["only"]
    assert data.pods == []


def test_empty_file_is_an_empty_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n---\n")
    data = load_snapshot_file(path)
    assert data.nodes == [] and data.pods == []
    assert data.snapshot().num_nodes() == 0


def test_defaults_uid_and_priority_from_priority_class(tmp_path: Path) -> None:
    objs = [
        {"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": "high"}, "value": 1000},
        {"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": "dflt"}, "value": 7,
         "globalDefault": True},
        pod("a", spec={"priorityClassName": "high"}),
        pod("b"),
        pod("c", priority=3, spec={"priorityClassName": "high"}),
    ]
    data = load_snapshot_file(write_list(tmp_path / "s.yaml", objs))
    prios = {p["metadata"]["name"]: p["spec"].get("priority") for p in data.pods}
    assert prios == {"a": 1000, "b": 7, "c": 3}
    uids = {p["metadata"]["uid"] for p in data.pods}
    assert len(uids) == 3 and "" not in uids
    again = load_snapshot_file(write_list(tmp_path / "s2.yaml", objs))
    assert {p["metadata"]["uid"] for p in again.pods} == uids  # stable across loads


def test_pending_pods_skip_bound_finished_gated_and_deleting(tmp_path: Path) -> None:
    deleting = pod("deleting")
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    objs = [node("n1"), pod("bound", node_name="n1"), pod("done", phase="Succeeded"),
            pod("gated", spec={"schedulingGates": [{"name": "wait"}]}), deleting, pod("ok", phase="Pending"),
            pod("fresh")]
    data = load_snapshot_file(write_list(tmp_path / "s.yaml", objs))
    assert [p["metadata"]["name"] for p in pending_pods(data)] == ["ok", "fresh"]


def test_queue_order_priority_then_age_then_file_order(tmp_path: Path) -> None:
    objs = [pod("late", created="2025-01-02T00:00:00Z"), pod("undated"), pod("early", created="2025-01-01T00:00:00Z"),
            pod("vip", priority=10, created="2025-01-03T00:00:00Z"), pod("undated2"), pod("low", priority=-5)]
    data = load_snapshot_file(write_list(tmp_path / "s.yaml", objs))
    order = [p["metadata"]["name"] for p in queue_order(pending_pods(data), data.order)]
    assert order == ["vip", "early", "late", "undated", "undated2", "low"]


def test_pending_pod_with_bad_quantity_loads(tmp_path: Path) -> None:
    data = load_snapshot_file(write_list(tmp_path / "s.yaml", [node("n1"), pod("bad", cpu="lots")]))
    assert len(pending_pods(data)) == 1


# -- errors: one line naming the file and the object ---------------------------------------------
def _error(path: Path) -> str:
    with pytest.raises(SnapshotError) as ei:
        load_snapshot_file(path)
    msg = str(ei.value)
    assert "\n" not in msg
    assert str(path) in msg
    return msg


def test_error_missing_file(tmp_path: Path) -> None:
    assert "no such file" in _error(tmp_path / "missing.yaml")


def test_error_bad_yaml_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: Node\nmetadata:\n  name: [unclosed\n")
    msg = _error(path)
    assert "invalid YAML" in msg and "line" in msg


def test_kinds_the_scheduler_does_not_read_are_skipped_and_counted(tmp_path: Path) -> None:
    """A ``kubectl get all,... -o yaml`` dump of a GPU Operator cluster: Secrets, Roles, the operator's
    ClusterPolicy (a custom resource), a DaemonSet, nested in lists or not. Its RuntimeClass is loaded
    (the RuntimeClass admission plugin reads it), not skipped."""
    path = write_multidoc(tmp_path / "s.yaml", [
        node("n1"),
        {"apiVersion": "x/v1", "kind": "Frobnicator", "metadata": {"name": "f"}},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"},
        {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1", "namespace": "gpu-operator"}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s2", "namespace": "gpu-operator"}},
            {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
             "spec": {"driver": {"enabled": True}}},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin"}},
        ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleList", "items": [{"metadata": {"name": "r"}}]},
    ])
    data = load_snapshot_file(path)
    assert [n["metadata"]["name"] for n in data.nodes] == ["n1"]
    assert data.skipped == {"Frobnicator": 1, "Secret": 2, "ClusterPolicy": 1, "DaemonSet": 1, "Role": 1}
    assert data.objects.get("RuntimeClass", "nvidia") is not None
    out = io.StringIO()
    note_skipped(data, out)
    assert out.getvalue() == (f"note: {path}: skipped 6 objects of kinds the scheduler does not read: ClusterPolicy "
                              "(1), DaemonSet (1), Frobnicator (1), Role (1), Secret (2)\n")


def test_every_kind_of_the_informers_table_is_loaded_not_skipped(tmp_path: Path) -> None:
    from py_scheduler.cache.kinds import KINDS

    objs = [{"apiVersion": wk.group_version, "kind": wk.kind,
             "metadata": {"name": "x", **({"namespace": "ns"} if wk.namespaced else {})}}
            for wk in KINDS if wk.kind not in ("Node", "Pod")]
    data = load_snapshot_file(write_list(tmp_path / "s.yaml", objs))
    assert data.skipped == {}
    for wk in KINDS:
        if wk.kind not in ("Node", "Pod"):
            assert data.objects.get(wk.kind, "ns/x" if wk.namespaced else "x") is not None, wk.kind


def test_ignored_kinds_are_dropped(tmp_path: Path) -> None:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"}}
    data = load_snapshot_file(write_list(tmp_path / "s.yaml", [node("n1"), dep]))
    assert len(data.nodes) == 1


def test_error_node_without_name(tmp_path: Path) -> None:
    n = node("x")
    del n["metadata"]["name"]
    msg = _error(write_list(tmp_path / "s.yaml", [node("n1"), n]))
    assert "Node at document 1 item 2: missing metadata.name" in msg


def test_error_object_without_metadata(tmp_path: Path) -> None:
    msg = _error(write_multidoc(tmp_path / "s.yaml", [{"apiVersion": "v1", "kind": "Pod", "spec": {}}]))
    assert "Pod at document 1: missing metadata" in msg


def test_error_metadata_of_the_wrong_type_is_not_called_missing(tmp_path: Path) -> None:
    """An unquoted numeric name (`name: 5`) or a metadata that is not a map is there, just malformed:
    the message says what is wrong with it rather than that it is missing."""
    n = node("x")
    n["metadata"]["name"] = 5
    msg = _error(write_list(tmp_path / "s.yaml", [n]))
    assert "Node at document 1 item 1: invalid value 5 for metadata.name: not a string" in msg
    msg = _error(write_multidoc(tmp_path / "t.yaml", [{"apiVersion": "v1", "kind": "Pod", "metadata": "p"}]))
    assert "Pod at document 1: metadata is not a map" in msg


@pytest.mark.parametrize("taints,where", [
    ("oops", "invalid value 'oops' for spec.taints: expected a list of taints"),
    ({"key": "a", "effect": "NoSchedule"}, "for spec.taints: expected a list of taints"),
    ([{"key": "a"}], "invalid value None for spec.taints[0].effect: expected one of NoSchedule, PreferNoSchedule, "
                     "NoExecute"),
])
def test_error_node_with_malformed_taints(tmp_path: Path, taints: object, where: str) -> None:
    """A hand-edited Node whose taints are not a list of maps with an effect used to be read as
    untainted, so simulate placed Pods the taint should have repelled."""
    n = node("n1")
    n["spec"] = {"taints": taints}
    msg = _error(write_list(tmp_path / "s.yaml", [n]))
    assert "Node n1: " in msg and where in msg


def test_error_bound_pod_with_bad_quantity_names_pod_and_field(tmp_path: Path) -> None:
    msg = _error(write_list(tmp_path / "s.yaml", [node("n1"), pod("web", "shop", cpu="2 cores", node_name="n1")]))
    assert "Pod shop/web" in msg and "spec.containers[0].resources.requests.cpu" in msg and "'2 cores'" in msg


def test_error_node_with_bad_allocatable(tmp_path: Path) -> None:
    msg = _error(write_list(tmp_path / "s.yaml", [node("n1", memory="16 gigs")]))
    assert "Node n1" in msg and "node.status.allocatable.memory" in msg


def test_error_duplicate_node(tmp_path: Path) -> None:
    assert "Node n1: duplicate Node" in _error(write_list(tmp_path / "s.yaml", [node("n1"), node("n1")]))


def test_error_document_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("- just\n- strings\n")
    assert "document 1 item 1: expected a Kubernetes object" in _error(path)


def test_error_labels_not_a_map(tmp_path: Path) -> None:
    n = node("n1")
    n["metadata"]["labels"] = ["a"]
    assert "Node n1: metadata.labels is not a map" in _error(write_list(tmp_path / "s.yaml", [n]))


def test_bundled_example_loads() -> None:
    path = bundled_example_path()
    assert path.is_file()
    data = load_snapshot_file(path)
    assert len(data.nodes) >= 6
    pend = pending_pods(data)
    assert len(pend) >= 10
    assert all(p["spec"].get("schedulerName") == "py-scheduler" for p in pend)


def test_unquoted_timestamps_stay_strings(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("kind: Pod\napiVersion: v1\nmetadata:\n  name: p\n  creationTimestamp: 2025-01-15T10:00:00Z\n"
                    "spec:\n  containers: [{name: c, image: x}]\n")
    data = load_snapshot_file(path)
    assert data.pods[0]["metadata"]["creationTimestamp"] == "2025-01-15T10:00:00Z"


@pytest.mark.parametrize(("field", "value"), [("affinity", "abc"), ("containers", [{"name": "c", "ports": "80"}])])
def test_bound_pod_with_wrongly_typed_field_never_escapes(tmp_path: Path, field: str, value: object) -> None:
    """A string where an object / list belongs: either tolerated or a SnapshotError naming the Pod,
    never another exception."""
    bad = pod("web", node_name="n1")
    bad["spec"][field] = value
    path = write_list(tmp_path / "s.yaml", [node("n1"), bad])
    try:
        load_snapshot_file(path).snapshot()
    except SnapshotError as exc:
        assert "Pod default/web (bound to n1)" in str(exc) and "\n" not in str(exc)
