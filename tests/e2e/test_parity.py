"""Differential parity in CI: 100 fixed-seed random clusters through upstream's own v1.37.2
framework (the Go oracle built from the test bed module) and through py-scheduler's explain path.

Every plugin's normalized score per node, feasible sets, filter reasons, totals, the selected node
and the FailedScheduling message must agree (``bench/parity`` runs the same at any size/seed and
writes each differing scenario as a snapshot with its diff).
"""

from __future__ import annotations

from pathlib import Path

from bench.parity_lib.runner import run

CI_SEED = 20261129
CI_SCENARIOS = 100


def test_fixed_seed_scenarios_agree_with_upstream(tmp_path: Path) -> None:
    agree, differ = run(CI_SCENARIOS, CI_SEED, tmp_path, quiet=True)
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert differ == 0, f"{differ} of {CI_SCENARIOS} scenarios differ from upstream: {written[:10]} in {tmp_path}"
    assert agree == CI_SCENARIOS
