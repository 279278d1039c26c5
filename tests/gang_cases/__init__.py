"""Gang case files (snapshot Lists of Nodes, PodGroups and pending Pods) that ``explain --snapshot`` (every
pending Pod), ``simulate`` and the live scheduler must place alike (issue 28): one pod group cycle, in
py_scheduler.core, for all three. Pod names sort in file order, so the live queue's initial order (the
list's) is the offline queue order (file order)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CASES = sorted(Path(__file__).parent.glob("*.json"))
GATES = "GenericWorkload=true"


def explain_placements(jsonl: str) -> dict[str, str | None]:
    """``explain -o json`` (JSON Lines) -> {namespace/name: node or None}."""
    return {r["pod"]: r["selected"] for r in map(json.loads, filter(None, jsonl.splitlines()))}


def simulate_placements(doc: str) -> dict[str, str | None]:
    """``simulate -o json`` -> {namespace/name: node or None}."""
    return {p["pod"]: p["node"] for p in json.loads(doc)["placements"]}


def gangs(case: Path) -> dict[str, list[str]]:
    """PodGroup name -> its members' ``namespace/name``."""
    out: dict[str, list[str]] = {}
    for o in json.loads(case.read_text())["items"]:
        g = (o.get("spec") or {}).get("schedulingGroup", {}).get("podGroupName") if o["kind"] == "Pod" else None
        if g:
            out.setdefault(g, []).append(f"default/{o['metadata']['name']}")
    return out


def occupancy(placements: dict[str, str | None]) -> list[int]:
    """Pods per used node, sorted: the placement up to renaming nodes (live tie-breaks are random)."""
    per: dict[str, int] = {}
    for node in placements.values():
        if node:
            per[node] = per.get(node, 0) + 1
    return sorted(per.values())


def check_whole_or_none(case: Path, placements: dict[str, Any]) -> None:
    for g, members in gangs(case).items():
        placed = [m for m in members if placements.get(m)]
        assert placed in ([], members), f"{case.name}: gang {g} placed in part: {placed}"
