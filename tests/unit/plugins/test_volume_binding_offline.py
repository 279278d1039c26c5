"""Offline explain / simulate run VolumeBinding's PreBind against the in-memory API
(``py_scheduler.offline.memapi``): unbound WaitForFirstConsumer claims are bound (static PVs) or
provisioned on the chosen node, in memory, so the snapshot schedules as a live cluster would and later
Pods see the claims bound."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from py_scheduler.cli import app
from py_scheduler.offline.engine import OfflineScheduler
from py_scheduler.offline.loader import load_snapshot_file, parse_objects
from py_scheduler.plugins.helpers import storage as st
from tests.unit.plugins.volume_objects import Obj, node, pod, pv, pvc, pvc_vol, storage_class

HOST = "kubernetes.io/hostname"


def host_affinity(name: str) -> list[Obj]:
    return [{"matchExpressions": [{"key": HOST, "operator": "In", "values": [name]}]}]


def cluster() -> list[Obj]:
    return [node("n1"), node("n2"), node("n3"),
            storage_class("local", provisioner="kubernetes.io/no-provisioner"),
            storage_class("standard", provisioner="rancher.io/local-path"),
            pv("local-n2", "10Gi", "local", affinity=host_affinity("n2")),
            pvc("data", "5Gi", sc="local"), pvc("cache", "1Gi", sc="standard", modes=("ReadWriteMany",)),
            pod("db", [pvc_vol("v", "data")]), pod("vllm-0", [pvc_vol("v", "cache")], ts="2024-01-01T00:00:01Z"),
            pod("vllm-1", [pvc_vol("v", "cache")], ts="2024-01-01T00:00:02Z")]


def test_engine_binds_static_and_provisions_dynamic_claims_in_memory() -> None:
    data = parse_objects(cluster(), "test")
    sched = OfflineScheduler.from_data(data, None)
    outcomes = {o.key: o for o in sched.run([p for p in data.pods])}
    # The static local PV is on n2: the Pod goes there and the claim is bound to it.
    assert outcomes["default/db"].result.selected == "n2"
    objects = sched.snapshot.objects
    data_claim = objects.get("PersistentVolumeClaim", "default/data")
    assert data_claim is not None and data_claim["spec"]["volumeName"] == "local-n2"
    assert st.is_pvc_fully_bound(data_claim) and data_claim["status"]["phase"] == "Bound"
    bound_pv = objects.get("PersistentVolume", "local-n2")
    assert bound_pv is not None and bound_pv["spec"]["claimRef"]["name"] == "data"
    # The dynamic claim was provisioned on the first Pod's node; the second Pod follows the PV there.
    first = outcomes["default/vllm-0"].result.selected
    assert first is not None and outcomes["default/vllm-1"].result.selected == first
    cache = objects.get("PersistentVolumeClaim", "default/cache")
    assert cache is not None and st.annotations_of(cache)[st.ANN_SELECTED_NODE] == first
    assert cache["spec"]["volumeName"] == "pvc-uid-pvc-cache"
    assert ("update", "PersistentVolumeClaim", "default/cache") in sched.api.writes  # type: ignore[union-attr]


def test_simulate_cli_places_pods_with_unbound_wffc_claims(tmp_path: Path) -> None:
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster()}))
    assert load_snapshot_file(path).pods
    res = CliRunner().invoke(app, ["simulate", str(path), "-o", "json"])
    assert res.exit_code == 0, res.output
    placements = {p["pod"]: p for p in json.loads(res.stdout)["placements"]}
    assert placements["default/db"]["node"] == "n2"
    assert placements["default/vllm-0"]["node"] == placements["default/vllm-1"]["node"] is not None


def test_claim_bound_to_a_missing_pv_is_not_placed() -> None:
    data = parse_objects([node("n1"), pvc("c1", volume="ghost", bound=True), pod("a", [pvc_vol("v", "c1")])], "t")
    sched = OfflineScheduler.from_data(data, None)
    (o,) = sched.run(list(data.pods))
    assert o.result.selected is None
    # Upstream's default profile: VolumeZone's PreFilter looks the PV up first (oracle-checked).
    assert (o.result.message or "").startswith('0/1 nodes are available: persistentvolume "ghost" not found.')
