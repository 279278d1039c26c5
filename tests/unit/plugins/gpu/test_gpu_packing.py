"""GPUScore packing against fragmentation (issue 17, Why #7), through the full default profile.

480 GPU Pods on 100 8-GPU nodes (of 1000) left 3 Pods Pending while 80+ GPUs were free: GPU Pods
spread by CPU/memory scoring and the free GPUs ended up one per node. Here a small fleet is filled to
90% with a 1 / 2 / 4 / 8-GPU mix queued at once (bench/fragmentation_lib.py, the benchmark's own
scenario); a packing always exists (every size divides 8), so no Pod may stay Pending.
"""

from __future__ import annotations

import pytest

from bench.fragmentation_lib import run_py, scenario
from py_scheduler.plugins.gpu.accounting import clear_memo


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    clear_memo()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_binpack_strands_no_pod_at_90_percent(seed: int) -> None:
    objs = scenario(nodes=40, gpu_nodes=12, fill=0.9, seed=seed)
    r = run_py(objs, "binpack")
    assert (r.pending, r.stranded) == (0, 0), r
    assert r.free_gpus == 12 * 8 - int(0.9 * 12 * 8)
    assert r.nodes_with_free_gpus <= 2  # the free GPUs stay together


def test_without_packing_pods_are_stranded() -> None:
    """The behaviour before issue 17 (``packing: none``): the same scenarios strand Pods."""
    stranded = [run_py(scenario(nodes=40, gpu_nodes=12, fill=0.9, seed=s), "none").stranded for s in (1, 2, 3)]
    assert sum(stranded) > 0, stranded
