"""Run one golden score-vector case (``/work/shared/golden/score_vectors.jsonl``) through a plugin's
PreScore / Score / NormalizeScore on a Snapshot built from the case, as upstream's plugin tests do.

Used by the PodTopologySpread and InterPodAffinity tests until the generic runner exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.types import CycleState, PodInfo

GOLDEN = Path(__file__).resolve().parents[3].parent / "shared" / "golden" / "score_vectors.jsonl"


def golden_cases(plugin: str) -> list[dict[str, Any]]:
    """Cases of one plugin, in file order (empty when the shared file is absent)."""
    if not GOLDEN.exists():
        return []
    out = []
    for line in GOLDEN.read_text().splitlines():
        if line.strip():
            case = json.loads(line)
            if case["plugin"] == plugin:
                out.append(case)
    return out


def case_id(case: dict[str, Any]) -> str:
    src = str(case.get("source", ""))
    _, _, tail = src.partition(", ")
    return (tail or src)[:100] or "case"


def _default_namespace(obj: Any) -> Any:
    """The golden file puts Pods without ``metadata.namespace`` in namespace ``""``; PodInfo puts
    them in ``"default"``. Rewrite ``""`` in affinity terms' ``namespaces`` lists to match."""
    if isinstance(obj, dict):
        return {k: ([("default" if n == "" else n) for n in v] if k == "namespaces" and isinstance(v, list)
                    else _default_namespace(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_default_namespace(v) for v in obj]
    return obj


def run_scores(plugin: Any, case: dict[str, Any]) -> dict[str, int]:
    """node -> normalized score; every node 0 when PreScore returned Skip (no Score is run)."""
    case = _default_namespace(case)
    objects = ClusterObjects()
    for ns in case.get("namespaces") or []:
        objects.upsert("Namespace", ns)
    for svc in case.get("services") or []:
        objects.upsert("Service", svc)
    pods = []
    for i, p in enumerate(case.get("existing_pods") or []):
        p = json.loads(json.dumps(p))
        p.setdefault("metadata", {}).setdefault("uid", f"uid-{i}")
        p["metadata"].setdefault("name", f"existing-{i}")
        pods.append(p)
    snap = Snapshot.from_objects(case["nodes"], pods, objects)
    pod = PodInfo(case["pod"])
    feasible = case.get("feasible_nodes") or [(n.get("metadata") or {}).get("name") for n in case["nodes"]]
    nodes = [snap.node_info_map[n] for n in feasible]
    state = CycleState(snap)
    st = plugin.pre_score(state, pod, nodes)
    if st.is_skip():
        return {ni.name: 0 for ni in nodes}
    assert st.is_success(), st
    scores: dict[str, int] = {}
    for ni in nodes:
        sc, s = plugin.score(state, pod, ni)
        assert s.is_success(), s
        scores[ni.name] = sc
    assert plugin.normalize_score(state, pod, scores).is_success()
    return scores
