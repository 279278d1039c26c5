"""Differential parity with the workload gate on (issue 22): fixed-seed generated clusters with gangs
(``bench.parity_lib.generator.gang_scenario``: 1-3 PodGroups of 2-6 pending members, gang minCounts
1..size or a basic policy, CPU / memory / GPU asks, some that fit nowhere) through upstream's own
v1.37.2 framework (the Go oracle, ``ORACLE_FEATURE_GATES=GenericWorkload=true``: GangScheduling in the
default profile, the scheduler cache as PodGroupManager) and through py-scheduler's explain path with
the same gate.

What is compared is the oracle's unit, one scheduling cycle per Pod: every member's feasible nodes,
filter reasons, scores, selected node and FailedScheduling message (with the ``preemption:`` tail)
must agree with GangScheduling in both profiles. The all-or-nothing outcome itself (the pod group
cycle, in both schedulers) is checked live side by side with kube-scheduler in tests/e2e/test_gang.py
and in memory by tests/unit/app/test_gang_cycle.py.
"""

from __future__ import annotations

from pathlib import Path

from bench.parity_lib.generator import gang_scenario
from bench.parity_lib.runner import run

SEED = 20261201
SCENARIOS = 150


def test_gang_scenarios_agree_with_upstream_with_generic_workload(tmp_path: Path) -> None:
    counts: dict[str, int] = {}
    agree, differ = run(SCENARIOS, SEED, tmp_path, quiet=True, counts=counts, scenario_fn=gang_scenario,
                        gates="GenericWorkload=true")
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert differ == 0, f"{differ} of {SCENARIOS} gang scenarios differ from upstream: {written[:10]} in {tmp_path}"
    assert agree == SCENARIOS
    assert counts.get("placed", 0) > 0 and counts.get("unschedulable", 0) > 0


def test_gang_scenarios_have_gangs() -> None:
    kinds = [o["kind"] for i in range(20) for o in gang_scenario(SEED, i)]
    members = [o for i in range(20) for o in gang_scenario(SEED, i)
               if o["kind"] == "Pod" and "schedulingGroup" in o["spec"]]
    assert kinds.count("PodGroup") >= 20
    gpu = [m for m in members if "nvidia.com/gpu" in (m["spec"]["containers"][0]["resources"].get("limits") or {})]
    assert len(gpu) >= 10, len(gpu)
