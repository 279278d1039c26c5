"""``py-scheduler explain``: why a Pod would land (or landed) where it does.

Reads a snapshot file (``--snapshot``) or a live cluster (``--kubeconfig``), builds the profiles of
``--config`` (default configuration otherwise) and runs the real scheduling cycle on every pending
Pod in queue order, each seeing the earlier ones as assumed (Reserve plugins run, their Pod
annotations are kept on the assumed copy). With ``--pod NAMESPACE/NAME`` only that Pod is explained
against the cluster as it is; a bound Pod is first taken off its node, so the answer is where it
would go if it arrived now.

Output: ``-o table`` (rich; see :mod:`py_scheduler.offline.render`) or ``-o json``: JSON Lines, one
:meth:`ScheduleResult.to_json` object per Pod (keys pod, profile, nodes_evaluated, filtered,
feasible, scores, weights, skipped, totals, selected, message). A Pod that cannot be parsed is
reported with ``selected`` null and ``message`` the parse error.

Exit status: 0 when every requested Pod was explained (fitting or not), 2 on a usage error,
unreadable snapshot / cluster, bad configuration or unknown ``--pod``; errors are one line on
stderr, never a traceback.

Upstream: ``pkg/scheduler/schedule_one.go`` (the cycle), ``framework/types.go`` (``FitError``
message); the command itself has no upstream counterpart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from py_scheduler.offline.engine import OfflineScheduler, Outcome, ProfileError, queue_order
from py_scheduler.offline.loader import ClusterData, SnapshotError, load_snapshot_file, pending_pods, pod_key
from py_scheduler.offline.render import make_console, print_explain
from py_scheduler.plugins.topology_placement import placement_note

__all__ = ["OUTPUT_FORMATS", "explain_main", "fail", "outcome_json"]

OUTPUT_FORMATS = ("table", "json")


def fail(message: str) -> int:
    """Print ``error: <message>`` as one line on stderr and return exit status 2."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return 2


def outcome_json(o: Outcome) -> str:
    """One JSON Lines record: exactly ``ScheduleResult.to_json()``."""
    return json.dumps(o.result.to_json(), sort_keys=False, default=str)


def _load(snapshot: Path | None, kubeconfig: Path | None) -> ClusterData:
    if snapshot is not None:
        return load_snapshot_file(snapshot)
    assert kubeconfig is not None
    from py_scheduler.offline.live import load_live

    return load_live(kubeconfig)


def explain_main(snapshot: Path | None, kubeconfig: Path | None, pod: str | None, config: Path | None,
                 output: str) -> int:
    """Run ``explain``; returns the exit status (0 ok, 2 error). See the module docstring."""
    if output not in OUTPUT_FORMATS:
        return fail(f"-o/--output must be one of {', '.join(OUTPUT_FORMATS)}, not {output!r}")
    if (snapshot is None) == (kubeconfig is None):
        return fail("give exactly one of --snapshot FILE or --kubeconfig PATH")
    if pod is not None and (not pod or pod.count("/") > 1 or pod.startswith("/") or pod.endswith("/")):
        return fail(f"--pod must be NAMESPACE/NAME (or NAME in namespace default), not {pod!r}")
    try:
        data = _load(snapshot, kubeconfig)
        sched = OfflineScheduler.from_data(data, config)
    except (SnapshotError, ProfileError) as exc:
        return fail(str(exc))

    if pod is not None:
        target = data.find_pod(pod)
        if target is None:
            return fail(f"{data.source}: Pod {pod if '/' in pod else 'default/' + pod} not found")
        gates = (target.get("spec") or {}).get("schedulingGates")
        if gates and not (target.get("spec") or {}).get("nodeName"):
            names = " ".join(str(g.get("name", "")) if isinstance(g, dict) else str(g) for g in gates)
            print(f"note: Pod {pod_key(target)} is waiting for scheduling gates: [{names}]; explaining it as if "
                  "the gates were removed", file=sys.stderr)
        pods = [sched.unbind(target) if (target.get("spec") or {}).get("nodeName") else target]
    else:
        pods = queue_order(pending_pods(data), data.order)
        if not pods:
            print(f"no pending Pods in {data.source}: nothing to explain", file=sys.stderr)
            return 0
    if not data.nodes:
        print(f"note: {data.source} has no Nodes; every Pod is unschedulable", file=sys.stderr)

    console = make_console() if output == "table" else None
    for p in pods:
        o = sched.schedule(p, explain=True)
        note = placement_note(o.result.state)
        if note:
            print(f"note: {note}", file=sys.stderr)
        if console is None:
            sys.stdout.write(outcome_json(o) + "\n")
            sys.stdout.flush()
        else:
            print_explain(console, o.result)
    return 0
