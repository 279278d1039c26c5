"""``simulate`` and ``explain`` show each placed Pod's DRA allocations (issue 30, Deliver 3).

One node with a shared GPU (consumable capacity: a share ID and consumed memory), two plain GPUs of
which only the ``small`` model is free for a prioritized-list claim (its second subrequest is chosen)
and an admin-access claim. Both commands must print, per claim, what the API would hold in
``status.allocation`` (``devices.results[]``: request or ``request/subrequest``, driver, pool,
device, ``consumedCapacity``, ``shareID``, ``adminAccess``), in ``-o json`` and in the table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from offline_objects import write_list
from typer.testing import CliRunner

from py_scheduler.cli import app
from tests.unit.plugins.test_dra_features import shared_gpu
from tests.unit.plugins.test_dynamic_resources import G, claim, dclass, dev, ex, node, pod, rslice, uses

runner = CliRunner()
Obj = dict[str, Any]


def row(*cells: str) -> str:
    """A regex matching table cells in order, whatever the borders between them."""
    return r"[\s│]+".join(cells)

PRIORITIZED = [{"name": "gpu", "firstAvailable": [
    {"name": "big", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
     "selectors": [{"cel": {"expression": f'device.attributes["{G}"].model == "h100"'}}]},
    {"name": "small", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
     "selectors": [{"cel": {"expression": f'device.attributes["{G}"].model == "l4"'}}]}]}]


def _snapshot(tmp_path: Path) -> Path:
    objs = [node("a"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("a", G, "pa", node="a", devices=[
                shared_gpu("shared-0"), dev("l4-0", {"model": {"string": "l4"}}),
                dev("mon-0", {"model": {"string": "monitor"}})]),
            claim("share", [{"name": "mem", "exactly": ex(
                sel=[f'device.attributes["{G}"].profile == "shared"'], capacity={"requests": {"memory": "30Gi"}})}]),
            claim("prio", PRIORITIZED),
            claim("admin", [{"name": "watch", "exactly": ex(
                sel=[f'device.attributes["{G}"].model == "monitor"'], adminAccess=True)}]),
            pod("p-share", uses("share"), ts="2024-01-01T00:00:01Z"),
            pod("p-prio", uses("prio"), ts="2024-01-01T00:00:02Z"),
            pod("p-admin", uses("admin"), ts="2024-01-01T00:00:03Z")]
    return write_list(tmp_path / "dra.yaml", objs)


def _results(allocations: list[Obj]) -> list[Obj]:
    return [r for a in allocations for r in a["allocation"]["devices"]["results"]]


def _check(by_pod: dict[str, list[Obj]]) -> None:
    share = by_pod["default/p-share"]
    assert [a["claim"] for a in share] == ["default/share"]
    (r,) = _results(share)
    assert (r["request"], r["driver"], r["pool"], r["device"]) == ("mem", G, "pa", "shared-0")
    assert r["consumedCapacity"] == {"memory": "30Gi"}
    assert re.fullmatch(r"[0-9a-f-]{36}", r["shareID"])
    (r,) = _results(by_pod["default/p-prio"])
    assert (r["request"], r["device"]) == ("gpu/small", "l4-0")  # the second subrequest was chosen
    (r,) = _results(by_pod["default/p-admin"])
    assert (r["request"], r["device"], r["adminAccess"]) == ("watch", "mon-0", True)
    node_sel = by_pod["default/p-prio"][0]["allocation"]["nodeSelector"]
    assert node_sel["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["a"]


def test_simulate_json_and_table_show_allocations(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    res = runner.invoke(app, ["simulate", str(snap), "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["scheduled"] == 3
    _check({p["pod"]: p.get("allocations", []) for p in doc["placements"]})
    table = runner.invoke(app, ["simulate", str(snap)])
    assert table.exit_code == 0, table.output
    out = table.stdout
    assert "DRA allocations" in out
    assert re.search(row("default/p-prio", "default/prio", "gpu/small", r"gpu\.example\.com", "pa", "l4-0"), out)
    assert re.search(row("default/p-share", "default/share", "mem", r"gpu\.example\.com", "pa", "shared-0",
                         "shareID=[0-9a-f-]{36}, consumed memory=30Gi"), out)
    assert re.search(row("default/p-admin", "default/admin", "watch", r"gpu\.example\.com", "pa", "mon-0",
                         "adminAccess"), out)


def test_explain_json_and_table_show_allocations(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    res = runner.invoke(app, ["explain", "--snapshot", str(snap), "-o", "json"])
    assert res.exit_code == 0, res.output
    docs = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    _check({d["pod"]: d.get("allocations", []) for d in docs})
    table = runner.invoke(app, ["explain", "--snapshot", str(snap), "--pod", "default/p-prio"])
    assert table.exit_code == 0, table.output
    # alone (nothing else placed), the first subrequest gets the whole shared H100
    assert re.search(row("default/p-prio", "default/prio", "gpu/big", r"gpu\.example\.com", "pa", "shared-0",
                         "shareID=[0-9a-f-]{36}, consumed memory=80Gi"), table.stdout)
