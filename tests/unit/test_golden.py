"""Golden score vectors: every line of ``/work/shared/golden/score_vectors.jsonl`` (see its README).

Each case is run the way the framework runs a Score plugin: a Snapshot of ``nodes`` with the bound
``existing_pods`` (plus ``namespaces`` / ``services`` as cluster objects), the plugin built through
the registry with the case's ``args``, PreFilter if the plugin has one (its node narrowing is not
applied: these are score cases), PreScore on the scored nodes (``feasible_nodes`` when given, else
all nodes), Score on each, NormalizeScore if any. A PreScore Skip means the plugin takes no part, so
every scored node gets 0 (what upstream's tests write for such cases). The result must equal
``expected`` exactly.

Every plugin of the file is implemented; a missing golden file fails (it lives in shared/ beside the
checkout, as in CI).

Namespaces: upstream's test objects without ``metadata.namespace`` live in the empty namespace ``""``;
py-scheduler's PodInfo (like the API server) puts such objects in ``default``. The runner translates
the golden data accordingly: an empty string in a pod affinity term's ``namespaces`` list becomes
``"default"`` (Services without a namespace are already keyed ``default/<name>``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.interfaces import NormalizeScorePlugin, PreFilterPlugin, PreScorePlugin, ScorePlugin
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins import registry
from tests.unit.plugins.plain_handle import plain_handle

GOLDEN = Path(__file__).resolve().parents[2].parent / "shared" / "golden" / "score_vectors.jsonl"


def _load() -> list[Any]:
    if not GOLDEN.exists():  # fails in test_golden_file_covers_resource_plugins, with the path
        return []
    params = []
    for i, line in enumerate(GOLDEN.read_text().splitlines()):
        if not line.strip():
            continue
        case = json.loads(line)
        m = re.search(r"'([^']*)'|\"([^\"]*)\"", case.get("source", ""))
        label = (m.group(1) or m.group(2)) if m else case.get("source", "")[:40]
        label = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")[:60]
        params.append(pytest.param(case, id=f"{i:02d}-{case['plugin']}-{label}"))
    return params


def _empty_namespace_is_default(obj: Any) -> Any:
    """A deep copy of ``obj`` in which every ``namespaces`` list maps ``""`` to ``"default"``."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "namespaces" and isinstance(v, list):
                out[k] = ["default" if x == "" else x for x in v]
            else:
                out[k] = _empty_namespace_is_default(v)
        return out
    if isinstance(obj, list):
        return [_empty_namespace_is_default(x) for x in obj]
    return obj


def run_case(case: dict[str, Any]) -> dict[str, int]:
    """Run one golden case and return node -> final score (before weight)."""
    objects = ClusterObjects()
    for ns in case.get("namespaces") or []:
        objects.upsert("Namespace", ns)
    for svc in case.get("services") or []:
        objects.upsert("Service", svc)
    existing = [_empty_namespace_is_default(p) for p in case.get("existing_pods") or []]
    snapshot = Snapshot.from_objects(case["nodes"], existing, objects)
    plugin = registry.get(case["plugin"])(case.get("args") or {}, plain_handle())
    assert isinstance(plugin, ScorePlugin)

    state = CycleState(snapshot)
    pod = PodInfo(_empty_namespace_is_default(case["pod"]))
    all_nodes = snapshot.node_info_list
    if isinstance(plugin, PreFilterPlugin):
        _, s = plugin.pre_filter(state, pod, all_nodes)
        assert s.code != Code.ERROR, s.message()
        if s.is_skip():
            state.skip_filter.add(plugin.name)

    feasible = case.get("feasible_nodes")
    scored = [snapshot.get(n) for n in feasible] if feasible is not None else list(all_nodes)
    if isinstance(plugin, PreScorePlugin):
        s = plugin.pre_score(state, pod, scored)
        if s.is_skip():
            return {ni.name: 0 for ni in scored}
        assert s.is_success(), s.message()

    scores: dict[str, int] = {}
    for ni in scored:
        sc, s = plugin.score(state, pod, ni)
        assert s.is_success(), s.message()
        scores[ni.name] = sc
    if isinstance(plugin, NormalizeScorePlugin):
        s = plugin.normalize_score(state, pod, scores)
        assert s.is_success(), s.message()
    return scores


@pytest.mark.parametrize("case", _load())
def test_golden_score_vector(case: dict[str, Any]) -> None:
    got = run_case(case)
    assert got == case["expected"], f"{case['source']}\nnotes: {case.get('notes', '')}"


def test_golden_file_covers_resource_plugins() -> None:
    """The file is present and holds cases for the resource plugins (guards against an empty run)."""
    assert GOLDEN.exists(), f"{GOLDEN} not found: the golden vectors live in shared/ beside the checkout"
    plugins = {json.loads(line)["plugin"] for line in GOLDEN.read_text().splitlines() if line.strip()}
    assert {"NodeResourcesFit", "NodeResourcesBalancedAllocation", "ImageLocality"} <= plugins
