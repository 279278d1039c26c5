"""Differential parity in CI: 200 fixed-seed random clusters through upstream's own v1.37.2
framework (the Go oracle built from the test bed module) and through py-scheduler's explain path.

Every plugin's normalized score per node, feasible sets, filter reasons, totals, the selected node,
the FailedScheduling message, scheduling errors, Reserve failures, the preemption nomination and
its victims must agree (``bench/parity`` runs the same at any size/seed and writes each differing
scenario as a snapshot with its diff; see docs/parity.md).

The second test guards the generator: the fixed-seed set must keep exercising every family of
inputs (a generator change that silently stopped producing volumes or preemptions would otherwise
turn this into a weaker test that still passes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.parity_lib.runner import run

CI_SEED = 20261129
CI_SCENARIOS = 200

# Filter reasons (one per plugin family) the fixed-seed set must produce at least once.
REQUIRED_REASONS = [
    "Insufficient cpu",  # NodeResourcesFit
    "Insufficient example.com/foo",  # extended resources
    "node(s) had untolerated taint(s)",  # TaintToleration
    "node(s) didn't match Pod's node affinity/selector",  # NodeAffinity
    "node(s) were unschedulable",  # NodeUnschedulable
    "node(s) didn't match pod affinity rules",  # InterPodAffinity
    "node(s) didn't match pod topology spread constraints",  # PodTopologySpread
    "node(s) didn't match Pod's required features",  # NodeDeclaredFeatures
    "pod has unbound immediate PersistentVolumeClaims",  # VolumeBinding
    "node(s) didn't find available persistent volumes to bind",
    "cannot allocate all claims",  # DynamicResources
]


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, int, dict[str, int], Path]:
    out = tmp_path_factory.mktemp("parity")
    counts: dict[str, int] = {}
    agree, differ = run(CI_SCENARIOS, CI_SEED, out, quiet=True, counts=counts)
    return agree, differ, counts, out


def test_fixed_seed_scenarios_agree_with_upstream(ci_run: tuple[int, int, dict[str, int], Path]) -> None:
    agree, differ, _, out = ci_run
    written = sorted(p.name for p in out.glob("*.json"))
    assert differ == 0, f"{differ} of {CI_SCENARIOS} scenarios differ from upstream: {written[:10]} in {out}"
    assert agree == CI_SCENARIOS


def test_fixed_seed_scenarios_cover_every_plugin_family(ci_run: tuple[int, int, dict[str, int], Path]) -> None:
    _, _, counts, _ = ci_run
    missing = [r for r in REQUIRED_REASONS if not counts.get("reason: " + r)]
    assert not missing, f"the generator no longer produces: {missing}"
    assert counts.get("placed", 0) > 0 and counts.get("unschedulable", 0) > 0
    assert counts.get("preempting", 0) > 0 and counts.get("victims", 0) > 0
