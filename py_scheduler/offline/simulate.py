"""``py-scheduler simulate``: place every pending Pod of a snapshot, in queue order, in memory.

Each Pod runs the real scheduling cycle of its profile (:mod:`py_scheduler.offline.engine`) and, when
it fits, is assumed on its node so the next Pods see it. Without a SNAPSHOT argument the example
GPU cluster shipped in the package (``py_scheduler/offline/examples/cluster.yaml``) is used.

Output ``-o table`` (rich): a placement table (Pod, node, total score, or the FailedScheduling
message) and a per-node summary of CPU, memory and GPUs (``nvidia.com/gpu``) requested before and
after, against allocatable; ``--explain`` first prints explain's per-node table for each Pod. A
progress bar goes to stderr when more than :data:`PROGRESS_THRESHOLD` Pods are pending.

Output ``-o json``: one JSON object ``{"source", "profiles", "placements": [...], "nodes": [...],
"scheduled", "unschedulable"}``; a placement is ``{"pod", "profile", "node", "score", "message",
"annotations"}`` (plus ``"explain"``, explain's JSON object, with ``--explain``, and ``"allocations"``
for a Pod given DRA devices: ``[{"claim": "ns/name", "allocation": <the claim's status.allocation>}]``); a node is
``{"name", "before": {...}, "after": {...}}`` with milli-CPU, bytes and GPU counts.

Exit status: 0 after a simulation (Pods that do not fit are a result, not an error), 2 on an
unreadable snapshot or bad configuration (one line on stderr).

Upstream: ``pkg/scheduler/schedule_one.go`` (cycle, Reserve, assume) and
``framework/plugins/queuesort/priority_sort.go`` (order).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from py_scheduler.offline.engine import OfflineScheduler, Outcome, ProfileError, queue_order
from py_scheduler.offline.explain import OUTPUT_FORMATS, fail
from py_scheduler.offline.loader import (
    SnapshotError,
    bundled_example_path,
    load_snapshot_file,
    note_gated,
    note_pod_groups_ignored,
    note_skipped,
    pending_pods,
)
from py_scheduler.offline.render import (
    NodeUsage,
    allocation_table,
    make_console,
    node_summary_table,
    node_usage,
    placement_table,
    print_explain,
)

__all__ = ["PROGRESS_THRESHOLD", "simulate_main"]

PROGRESS_THRESHOLD = 50
"""Show a progress bar on stderr when more Pods than this are pending."""


def _usage(sched: OfflineScheduler) -> list[NodeUsage]:
    return sorted((node_usage(ni) for ni in sched.snapshot.node_info_list), key=lambda u: u.name)


def _run(sched: OfflineScheduler, pods: list[dict[str, Any]]) -> list[Outcome]:
    if len(pods) <= PROGRESS_THRESHOLD:
        return sched.run(pods, explain=True)
    console = make_console(stderr=True)
    with Progress(TextColumn("scheduling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        task = bar.add_task("pods", total=len(pods))
        return sched.run(pods, explain=True, progress=lambda _o: bar.advance(task))


def simulate_main(snapshot: Path | None, config: Path | None, explain: bool, output: str,
                  feature_gates: str = "") -> int:
    """Run ``simulate``; returns the exit status (0 ok, 2 error). See the module docstring.
    ``feature_gates``: kube-scheduler's ``--feature-gates`` (as ``run``)."""
    if output not in OUTPUT_FORMATS:
        return fail(f"-o/--output must be one of {', '.join(OUTPUT_FORMATS)}, not {output!r}")
    path = snapshot if snapshot is not None else bundled_example_path()
    try:
        data = load_snapshot_file(path)
        note_skipped(data)
        sched = OfflineScheduler.from_data(data, config, feature_gates)
        note_pod_groups_ignored(data, any(fw.handle.feature_gates.generic_workload
                                            for fw in sched.frameworks.values()))
    except (SnapshotError, ProfileError) as exc:
        return fail(str(exc))
    pods = queue_order(pending_pods(data), data.order)
    note_gated(data)
    if not data.nodes:
        print(f"note: {data.source} has no Nodes; every Pod is unschedulable", file=sys.stderr)
    if not pods:
        print(f"no pending Pods in {data.source}: nothing to simulate", file=sys.stderr)

    before = _usage(sched)
    outcomes = _run(sched, pods)
    after = _usage(sched)
    scheduled = sum(1 for o in outcomes if o.result.selected is not None)

    if output == "json":
        doc = {
            "source": data.source,
            "profiles": sorted(sched.frameworks),
            "placements": [_placement_json(o, explain) for o in outcomes],
            "nodes": [{"name": a.name, "before": b.to_json(), "after": a.to_json()} for b, a in zip(before, after,
                                                                                                    strict=True)],
            "scheduled": scheduled,
            "unschedulable": len(outcomes) - scheduled,
        }
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return 0

    console = make_console()
    if explain:
        for o in outcomes:
            print_explain(console, o.result)
    if outcomes:
        console.print(placement_table([(o.key, o.result.selected, o.score, o.result.message) for o in outcomes]))
        dra = allocation_table([(o.key, o.allocations) for o in outcomes])
        if dra is not None:
            console.print(dra)
    console.print(node_summary_table(before, after))
    console.print(f"{scheduled} of {len(outcomes)} pending Pods scheduled, {len(outcomes) - scheduled} "
                  f"unschedulable ({data.source})", soft_wrap=True, markup=False)
    return 0


def _placement_json(o: Outcome, explain: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"pod": o.key, "profile": o.result.profile, "node": o.result.selected,
                           "score": o.score, "message": o.result.message, "annotations": o.annotations}
    if o.allocations:
        out["allocations"] = o.allocations
    pf = o.result.post_filter
    if pf is not None and pf.nominated_node_name:
        out["nominated_node"] = pf.nominated_node_name
    if explain:
        out["explain"] = o.result.to_json()
    return out
