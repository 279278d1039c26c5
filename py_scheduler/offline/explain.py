"""``py-scheduler explain``: why a Pod would land (or landed) where it does.

Recorded decisions: with ``--kubeconfig`` and ``--pod`` naming a Pod already bound by one of our
profiles, the decision the live scheduler *recorded* at the time is shown (fetched from the leader's
``/debug/decisions`` through the API server's Pod proxy, :mod:`py_scheduler.offline.recorded`):
the scores it computed then, not a recomputation on today's cluster. When there is no record (the
ring dropped it, the leader restarted or changed, the Pod was bound by another scheduler, or the
leader cannot be reached) a ``note:`` on stderr says so and why, and explain recomputes as below.
``--recompute`` skips the lookup. ``-o json`` then prints the record (keys of
``py_scheduler.app.scheduling.decisions.Decision.to_json``, ``"recorded": true``).

Reads a snapshot file (``--snapshot``) or a live cluster (``--kubeconfig``), builds the profiles of
``--config`` (default configuration otherwise) and runs the real scheduling cycle on every pending
Pod in queue order, each seeing the earlier ones as assumed (Reserve plugins run, their Pod
annotations are kept on the assumed copy) -- the run ``simulate`` makes, so with ``GenericWorkload`` a
gang is placed whole or not at all (the pod group cycle of :mod:`py_scheduler.core.group_cycle`).
With ``--pod NAMESPACE/NAME`` only that Pod is explained against the cluster as it is; a bound Pod is
first taken off its node, so the answer is where it would go if it arrived now.

Output: ``-o table`` (rich; see :mod:`py_scheduler.offline.render`) or ``-o json``: JSON Lines, one
:meth:`ScheduleResult.to_json` object per Pod (keys pod, profile, nodes_evaluated, filtered,
feasible, scores, weights, skipped, totals, selected, message; plus ``allocations`` when the Pod got
DRA devices, each claim's allocation in the API's ``status.allocation`` shape, also printed as a
table under the Pod's in ``-o table``). A Pod that cannot be parsed is
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
from typing import Any

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.interfaces import ExplainNoter, PreEnqueuePlugin
from py_scheduler.framework.types import PodInfo
from py_scheduler.offline.engine import OfflineScheduler, Outcome, ProfileError, held_message, queue_order
from py_scheduler.offline.loader import (
    ClusterData,
    SnapshotError,
    load_snapshot_file,
    note_gated,
    note_pod_groups_ignored,
    note_skipped,
    pending_pods,
    pod_key,
)
from py_scheduler.offline.recorded import (
    DEFAULT_LEASE,
    DEFAULT_PORT,
    DEFAULT_SERVICE_ACCOUNT,
    Lookup,
    fetch_recorded,
)
from py_scheduler.offline.render import allocation_table, make_console, print_explain, print_recorded, printable

__all__ = ["OUTPUT_FORMATS", "explain_main", "fail", "outcome_json"]

OUTPUT_FORMATS = ("table", "json")


def fail(message: str) -> int:
    """Print ``error: <message>`` as one line on stderr and return exit status 2."""
    print(f"error: {' '.join(printable(message).split())}", file=sys.stderr)
    return 2


def outcome_json(o: Outcome) -> str:
    """One JSON Lines record: ``ScheduleResult.to_json()``, plus ``"allocations"`` (the Pod's DRA
    claim allocations, ``[{"claim": "ns/name", "allocation": <status.allocation>}]``) when it got devices."""
    doc = o.result.to_json()
    if o.allocations:
        doc["allocations"] = o.allocations
    return json.dumps(doc, sort_keys=False, default=str)


def _load(snapshot: Path | None, kubeconfig: Path | None) -> ClusterData:
    if snapshot is not None:
        return load_snapshot_file(snapshot)
    assert kubeconfig is not None
    from py_scheduler.offline.live import load_live

    return load_live(kubeconfig)


def _note(message: str) -> None:
    print(f"note: {' '.join(printable(message).split())}", file=sys.stderr)


def _pre_enqueue_hold(sched: OfflineScheduler, pod: dict[str, Any]) -> str | None:
    """:func:`~py_scheduler.offline.engine.held_message` of the first PreEnqueue plugin of the Pod's
    profile that would keep it out of the scheduling queue (upstream
    ``SchedulingQueue.runPreEnqueuePlugins``), or None: the words ``simulate`` gives the Pod.

    SchedulingGates is left out (the gates have a note of their own). A live scheduler never tries a
    held Pod (no FailedScheduling event, no condition), so a table showing it "selected" somewhere
    needs saying so: e.g. GangScheduling holds a member whose PodGroup does not exist."""
    try:
        pi = PodInfo(pod)
    except (PodParseError, AttributeError, TypeError, ValueError):
        return None  # the explanation itself reports the malformed field
    for pl in sched.framework_for(pod).plugins.values():
        if pl.name == "SchedulingGates" or not isinstance(pl, PreEnqueuePlugin):
            continue
        try:
            status = pl.pre_enqueue(pi)
        except Exception:  # a note must not fail the command (the live queue logs such a bug)
            continue
        if not status.is_success():
            return held_message(pl.name, status.message())
    return None


def _show_recorded(target: dict[str, Any], lookup: Lookup, output: str) -> None:
    rec = lookup.record
    assert rec is not None
    node = (target.get("spec") or {}).get("nodeName")
    if rec.get("result") == "scheduled" and rec.get("selected") != node:
        _note(f"the last recorded attempt chose {rec.get('selected')}, but the Pod is bound to {node} "
              "(its binding failed and a later attempt is not recorded, or another writer bound it)")
    elif rec.get("result") != "scheduled":
        _note(f"the last recorded attempt of {pod_key(target)} was {rec.get('result')}; the Pod is bound to {node}")
    if output == "json":
        sys.stdout.write(json.dumps(rec, sort_keys=False, default=str) + "\n")
        sys.stdout.flush()
    else:
        print_recorded(make_console(), rec, lookup.source)


def explain_main(snapshot: Path | None, kubeconfig: Path | None, pod: str | None, config: Path | None,
                 output: str, *, recompute: bool = False, lease: str = DEFAULT_LEASE,
                 scheduler_port: int = DEFAULT_PORT,
                 scheduler_scheme: str = "https", decisions_url: str | None = None, feature_gates: str = "",
                 token: str | None = None, kubeconfig_token: bool = False,
                 scheduler_service_account: str = DEFAULT_SERVICE_ACCOUNT,
                 scheduler_ca_file: Path | None = None) -> int:
    """Run ``explain``; returns the exit status (0 ok, 2 error). See the module docstring.
    ``feature_gates``: kube-scheduler's ``--feature-gates`` (as ``run``).

    ``lease`` (``namespace/name``), ``scheduler_port`` and ``scheduler_scheme`` locate the leader's
    ``/debug/decisions`` for a bound Pod; ``decisions_url`` asks that URL instead; ``recompute``
    never asks. ``token``: the bearer token the scheduler reviews; the kubeconfig's own only with
    ``kubeconfig_token``; nothing is sent to a Lease holder that is not a replica running as
    ``scheduler_service_account`` (``namespace/name``; :func:`py_scheduler.offline.recorded.fetch_recorded`);
    ``scheduler_ca_file`` checks ``decisions_url``'s certificate."""
    if output not in OUTPUT_FORMATS:
        return fail(f"-o/--output must be one of {', '.join(OUTPUT_FORMATS)}, not {output!r}")
    if (snapshot is None) == (kubeconfig is None):
        return fail("give exactly one of --snapshot FILE or --kubeconfig PATH")
    if kubeconfig is not None and not kubeconfig.is_file():
        return fail(f"kubeconfig {kubeconfig}: no such file")
    sa_ns, _, sa_name = scheduler_service_account.partition("/")
    if not sa_ns or not sa_name or "/" in sa_name:
        return fail(f"--scheduler-service-account must be NAMESPACE/NAME, not {scheduler_service_account!r}")
    if pod is not None and (not pod or pod.count("/") > 1 or pod.startswith("/") or pod.endswith("/")):
        return fail(f"--pod must be NAMESPACE/NAME (or NAME in namespace default), not {pod!r}")
    try:
        data = _load(snapshot, kubeconfig)
        note_skipped(data)
        sched = OfflineScheduler.from_data(data, config, feature_gates)
        note_pod_groups_ignored(data, any(fw.handle.feature_gates.generic_workload
                                            for fw in sched.frameworks.values()))
    except (SnapshotError, ProfileError) as exc:
        return fail(str(exc))

    if pod is not None:
        target = data.find_pod(pod)
        if target is None:
            return fail(f"{data.source}: Pod {pod if '/' in pod else 'default/' + pod} not found")
        bound_to = (target.get("spec") or {}).get("nodeName")
        if bound_to and kubeconfig is not None and not recompute:
            scheduler_name = (target.get("spec") or {}).get("schedulerName") or "default-scheduler"
            if scheduler_name not in sched.frameworks:
                _note(f"Pod {pod_key(target)} was scheduled by {scheduler_name!r}, not by py-scheduler: no recorded "
                      "decision; recomputing from the cluster as it is now (where it would go if it arrived now)")
            else:
                uid = str((target.get("metadata") or {}).get("uid") or "")
                lookup = fetch_recorded(kubeconfig, pod_key(target), uid, lease=lease, port=scheduler_port,
                                        scheme=scheduler_scheme, decisions_url=decisions_url, token=token,
                                        kubeconfig_token=kubeconfig_token,
                                        service_account=scheduler_service_account, ca_file=scheduler_ca_file)
                if lookup.record is not None:
                    _show_recorded(target, lookup, output)
                    return 0
                _note(f"no recorded decision for {pod_key(target)}: {lookup.reason}; recomputing from the cluster as "
                      "it is now (where it would go if it arrived now, not necessarily what the scheduler saw)")
        gates = (target.get("spec") or {}).get("schedulingGates")
        if gates and not (target.get("spec") or {}).get("nodeName"):
            names = " ".join(str(g.get("name", "")) if isinstance(g, dict) else str(g) for g in gates)
            _note(f"Pod {pod_key(target)} is waiting for scheduling gates: [{names}]; explaining it as if "
                  "the gates were removed")
        if not (target.get("spec") or {}).get("nodeName"):
            held = _pre_enqueue_hold(sched, target)
            if held is not None:
                _note(f"Pod {pod_key(target)} is not tried by the scheduler: {held}; no event, no condition until "
                      "that changes; explaining it as if it were let through")
        pods = [sched.unbind(target) if (target.get("spec") or {}).get("nodeName") else target]
    else:
        pods = queue_order(pending_pods(data), data.order)
        note_gated(data)
        if not pods:
            print(f"no pending Pods in {data.source}: nothing to explain", file=sys.stderr)
            return 0
    if not data.nodes:
        print(f"note: {data.source} has no Nodes; every Pod is unschedulable", file=sys.stderr)

    console = make_console() if output == "table" else None
    # One Pod: its own cycle. Every pending Pod: simulate's run, gangs through the pod group cycle.
    for o in [sched.schedule(pods[0], explain=True)] if pod is not None else sched.run(pods, explain=True):
        state = o.result.state
        for pl in sched.framework_for(o.pod).plugins.values():
            note = pl.explain_note(state) if state is not None and isinstance(pl, ExplainNoter) else None
            if note:  # e.g. TopologyPlacementGenerator's domain
                _note(note)
        if console is None:
            sys.stdout.write(outcome_json(o) + "\n")
            sys.stdout.flush()
        else:
            print_explain(console, o.result)
            dra = allocation_table([(o.key, o.allocations)])
            if dra is not None:
                console.print(dra)
    return 0
