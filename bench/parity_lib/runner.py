"""Differential parity: upstream's own framework (the Go oracle) vs py-scheduler on generated clusters.

For each scenario both sides run one scheduling cycle per pending Pod, in queue order, as
``schedule_one.go`` does (nominated node first, Filter with nominated Pods, Reserve + assume,
preemption evicting its victims and nominating the Pod); score ties are broken towards the
smallest node name on both sides so the assumed placements stay comparable. Compared per Pod: the
feasible set, Filter reasons per node, every plugin's normalized score per node, totals, the
selected node (any of the tied maxima counts), the FailedScheduling message, scheduling errors,
Reserve failures, the preemption nomination and its victims. Where upstream itself is not
deterministic the comparison accepts any of its answers, never more (see :func:`run_py`,
:func:`compare` and docs/parity.md).

The py side runs the same code path as ``py-scheduler explain`` (``Algorithm.schedule`` with
``explain=True`` over a ``Snapshot.from_objects``, Reserve plugins, ``snapshot.assume``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from py_scheduler.framework.features import FeatureGates

REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "tests" / "e2e" / "testbed"
sys.path.insert(0, str(TESTBED))

Obj = dict[str, Any]


def oracle_binary() -> Path:
    """Build (once per pinned version set and oracle source) and return the Go oracle binary.

    Cached beside the test bed's binaries as ``oracle-<hash of main.go + go.sum>``, so a second
    run (or CI on the same machine) builds nothing. ``PARITY_ORACLE=<path>`` uses that binary instead.
    """
    override = os.environ.get("PARITY_ORACLE")
    if override:
        return Path(override)
    import bed  # the test bed's build helpers: same cache directory and Go environment

    src = TESTBED / "oracle" / "main.go"
    digest = hashlib.sha256(src.read_bytes() + (TESTBED / "go.sum").read_bytes()).hexdigest()[:12]
    out = bed.bin_dir_for(bed.module_versions()) / f"oracle-{digest}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        print(f"building parity oracle -> {out}", file=sys.stderr)
        subprocess.run(["go", "build", "-o", str(out), "./oracle"], cwd=TESTBED, env=bed._go_env(), check=True)
    return out


def run_oracle(binary: Path, objects: list[Obj], gates: str = "") -> list[Obj]:
    """Upstream's verdicts for the scenario's pending Pods (JSON Lines from the oracle).

    ``gates`` (``--feature-gates`` syntax) reach the oracle as ``ORACLE_FEATURE_GATES``."""
    env = {**os.environ, "ORACLE_FEATURE_GATES": gates} if gates else None
    proc = subprocess.run([str(binary)], input=json.dumps({"objects": objects}), capture_output=True,
                          text=True, timeout=300, env=env)
    if proc.returncode != 0:
        tail = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith(("I1", "W1")))[-2000:]
        raise RuntimeError(f"oracle failed: {tail}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


class MinChoice(random.Random):
    """Tie-break towards the smallest node name (the oracle does the same)."""

    def choice(self, seq: Sequence[Any]) -> Any:
        return min(seq)


def _requests_gpu(pod: Obj) -> bool:
    """True when a container of ``pod`` requests or limits ``nvidia.com/gpu``."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        if GPU_RESOURCE in (res.get("requests") or {}) or GPU_RESOURCE in (res.get("limits") or {}):
            return True
    return False


GPU_RESOURCE = "nvidia.com/gpu"


def profile_for(objects: list[Obj]) -> Any:
    """The py profile compared with upstream's default profile.

    py-scheduler's default profile adds GPUFilter / GPUScore. They Skip for a Pod that asks for no
    ``nvidia.com/gpu``, so those scenarios run the full py profile (checking that the GPU plugins
    really change nothing). A pending Pod that does ask for ``nvidia.com/gpu`` makes them active, and
    they may then legitimately reject nodes or change totals (whole-GPU accounting, NVLink scoring);
    such scenarios run with ``multiPoint.disabled: [GPUFilter, GPUScore]`` so the plain
    extended-resource path (NodeResourcesFit) is compared with upstream's.
    """
    from py_scheduler.framework.config import PluginSet, ProfileConfig

    if any(o["kind"] == "Pod" and not (o.get("spec") or {}).get("nodeName") and _requests_gpu(o) for o in objects):
        return ProfileConfig(scheduler_name="default-scheduler",
                             plugins={"multiPoint": PluginSet(disabled=["GPUFilter", "GPUScore"])})
    return ProfileConfig(scheduler_name="default-scheduler")


def _priority(p: Obj) -> int:
    prio = (p.get("spec") or {}).get("priority")
    return prio if isinstance(prio, int) else 0


def run_py(objects: list[Obj], oracle: list[Obj] | None = None, gates: FeatureGates | None = None) -> list[Obj]:
    """py-scheduler's verdicts, via the explain code path, in queue order, under ``gates`` (default:
    upstream's defaults).

    Each cycle follows the same sequence as the oracle (``tests/e2e/testbed/oracle/main.go``):
    nominated Pods (every pending Pod's ``status.nominatedNodeName``) are seen by Filter and tried
    first on their node; a placed Pod runs Reserve (Unreserve on failure) and is assumed; a Pod
    that fits nowhere and preempts has its deleted victims removed from the snapshot, is nominated
    to the chosen node, and lower-priority Pods nominated there lose their nomination.

    Upstream filters nodes in parallel and reports the Error of whichever node its search hit
    first (the oracle run 10 times on seed 2 #285 named node-18 8 times and node-25 twice).
    When the oracle reports another Filter error than py's first one, and py gives exactly that
    error on some node (:func:`_filter_errors`), the oracle's message is taken.

    Upstream picks at random among preemption candidates that rank equal on every criterion. When
    ``oracle`` (its results for the same objects) names another node than py's for a Pod, and py's
    own ranking puts that node level with py's choice, py continues with the oracle's node and its
    victims on that node (the result's ``tie`` key lists both nodes), so later Pods stay
    comparable; ``compare`` then checks the victims on the oracle's node instead of the node name.
    """
    from py_scheduler.cache.snapshot import Snapshot
    from py_scheduler.core.cycle import reserve_and_assume
    from py_scheduler.core.ports import SnapshotState
    from py_scheduler.framework.algorithm import Algorithm
    from py_scheduler.framework.config import build_framework
    from py_scheduler.framework.handle import Handle
    from py_scheduler.framework.runtime import SchedulingError
    from py_scheduler.framework.types import PodInfo
    from py_scheduler.offline.memapi import MemoryAPI
    from py_scheduler.plugins import registry

    pods = [o for o in objects if o["kind"] == "Pod"]
    snap = Snapshot.from_object_list(objects)
    # The plugins read the scenario's other objects (PodGroups, DeviceClasses...) through the Handle, as
    # explain's do (MemoryAPI over the snapshot).
    fw = build_framework(profile_for(objects), handle=Handle.detached(gates, MemoryAPI(snap)), registry=registry)
    algo = Algorithm(rng=MinChoice())
    pending = [p for p in pods if not p["spec"].get("nodeName")]
    pending.sort(key=lambda p: (-_priority(p), p["metadata"].get("creationTimestamp", "")))
    current: dict[str, Obj] = {p["metadata"]["uid"]: p for p in pending}
    nominated: dict[str, str] = {}  # pod uid -> node
    for p in pending:
        nnn = (p.get("status") or {}).get("nominatedNodeName")
        if nnn:
            nominated[p["metadata"]["uid"]] = nnn

    def nominator() -> dict[str, list[Any]]:
        by_node: dict[str, list[Any]] = {}
        for uid, node in nominated.items():
            by_node.setdefault(node, []).append(PodInfo(current[uid]))
        return by_node

    view: dict[str, list[Any]] = {}
    fw.connect_nominator(view)  # refreshed before every cycle below, as the queue's is kept current
    out: list[Obj] = []
    for idx, p0 in enumerate(pending):
        uid = p0["metadata"]["uid"]
        p = current[uid]
        pi = PodInfo(p)
        try:
            view.clear()
            view.update(nominator())
            res = algo.schedule(fw, snap, pi, explain=True)
        except SchedulingError as exc:
            err = str(exc)
            want = oracle[idx] if oracle is not None and idx < len(oracle) else None
            # Upstream reports whichever node's Filter error its parallel search hit first.
            if (want is not None and want.get("error") not in (None, err) and _FILTER_ERROR.match(err)
                    and want["error"] in _filter_errors(fw, snap, pi, nominator())):
                err = want["error"]
            out.append({"pod": pi.key, "feasible": [], "filtered": {}, "scores": {}, "totals": {},
                        "selected": None, "message": None, "error": err})
            nominated.pop(uid, None)
            continue
        r = res.to_json()
        out.append(r)
        if res.selected is not None:
            state = res.state
            assert state is not None
            st = reserve_and_assume(fw, state, pi, res.selected, SnapshotState(snap)).status  # the core's step
            if not st.is_success():
                r["reserve"] = st.message()
            nominated.pop(uid, None)
            continue
        pf = res.post_filter
        if pf is None:
            continue
        nominated.pop(uid, None)
        if not pf.nominated_node_name:
            continue
        node, victims = pf.nominated_node_name, list(pf.victims)
        want = oracle[idx] if oracle is not None and idx < len(oracle) else None
        if want is not None and want.get("nominated") and want["nominated"] != node:
            tied = _preemption_tie(fw, res, pi, node, want["nominated"])
            if tied is not None:
                r["tie"] = sorted([node, want["nominated"]])
                node, victims = want["nominated"], tied
        deleted = [v for v in victims if not (v.pod.get("metadata") or {}).get("deletionTimestamp")]
        r["nominated"] = node
        if deleted:
            r["victims"] = sorted(f"{v.namespace}/{v.name}" for v in deleted)
        # In the oracle's order (namespace/name): with upstream's swap-remove the order of the
        # node's remaining Pods depends on it, and so may a later preemption there.
        for v in sorted(deleted, key=lambda v: f"{v.namespace}/{v.name}"):
            ni = snap.node_info_map[(v.pod.get("spec") or {}).get("nodeName") or node]
            ni.remove_pod(v.uid)
        snap.rebuild_lists()
        for other, onode in list(nominated.items()):
            if onode == node and _priority(current[other]) < pi.priority:
                del nominated[other]
                cleared = dict(current[other])
                cleared["status"] = {k: v for k, v in (cleared.get("status") or {}).items()
                                     if k != "nominatedNodeName"}
                current[other] = cleared
        nominated[uid] = node
    return out


def _filter_errors(fw: Any, snap: Any, pod: Any, nominator: Any) -> set[str]:
    """Every Filter error message py-scheduler gives ``pod``, node by node (PreFilter run once)."""
    from py_scheduler.framework.runtime import SchedulingError
    from py_scheduler.framework.types import CycleState

    state = CycleState(snap)
    _, status, _ = fw.run_pre_filter(state, pod, snap.node_info_list)
    if not status.is_success():
        return set()
    saved, fw.nominator = fw.nominator, nominator
    errors: set[str] = set()
    try:
        for ni in snap.node_info_list:
            try:
                fw.run_filter_with_nominated_pods(state, pod, ni)
            except SchedulingError as exc:
                errors.add(str(exc))
    finally:
        fw.nominator = saved
    return errors


def _preemption_tie(fw: Any, res: Any, pod: Any, mine: str, theirs: str) -> list[Any] | None:
    """py's victims on ``theirs`` when py's preemption ranks it level with ``mine`` on every
    criterion of ``pickOneNodeForPreemption`` (so upstream may pick either), else None."""
    from py_scheduler.framework.preemption import pick_one_node_for_preemption
    from py_scheduler.framework.types import Code, Status

    pl = fw.plugins.get("DefaultPreemption")
    state, d = res.state, res.diagnosis
    if pl is None or state is None or d is None or state.snapshot is None:
        return None
    statuses = dict(d.node_to_status)
    if d.absent_nodes_status is not None:
        for ni in state.snapshot.node_info_list:
            statuses.setdefault(ni.name, d.absent_nodes_status)
    absent = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
    candidates, _, _ = pl.evaluator.find_candidates(state, pod, list(state.snapshot.node_info_list),
                                                    {k: statuses.get(k, absent) for k in statuses})
    victims = {c.name: c.victims for c in candidates}
    if mine not in victims or theirs not in victims:
        return None
    now = pl.now_ns()
    a = pick_one_node_for_preemption({mine: victims[mine], theirs: victims[theirs]}, None, now)
    b = pick_one_node_for_preemption({theirs: victims[theirs], mine: victims[mine]}, None, now)
    if a == mine and b == theirs:
        return list(victims[theirs].pods)
    return None


@dataclass
class Diff:
    pod: str
    what: str
    oracle: Any
    py: Any


_NOMINATED = re.compile(r"found a potential placement for pod on node \S+, preempting")


def _message(msg: str | None) -> str | None:
    """The FailedScheduling text with preemption's nominated node masked.

    Upstream picks among equally good preemption candidates in an order that depends on a random
    candidate offset and on map iteration (the same scenario run 8 times through the oracle
    nominated node-02 seven times and node-04 once), so only the victim count is compared there;
    the victims themselves are compared on the node the oracle chose (see :func:`run_py`).
    """
    return _NOMINATED.sub("found a potential placement for pod on node <node>, preempting", msg) if msg else None


_NATIVE = {"Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage", "Too many pods"}


def _reasons(reasons: list[str] | None) -> list[str] | None:
    """Filter reasons with NodeResourcesFit's extended-resource reasons in a canonical order.

    Upstream's ``fitsRequest`` walks the Pod's scalar resources with ``range`` over a Go map, so
    ``Insufficient example.com/foo`` and ``Insufficient nvidia.com/gpu`` come out in either order
    (the oracle run 8 times on scenario seed 1 #245 gave foo first 3 times, gpu first 5 times).
    Those reasons are sorted among their own positions; everything else keeps its order.
    """
    if not reasons:
        return reasons
    scalar = [i for i, r in enumerate(reasons) if r.startswith("Insufficient ") and r not in _NATIVE]
    if len(scalar) < 2:
        return reasons
    out = list(reasons)
    for i, r in zip(scalar, sorted(reasons[i] for i in scalar), strict=True):
        out[i] = r
    return out


_FILTER_ERROR = re.compile(r'^running "[^"]+" filter plugin: ')
_NODE = re.compile(r"\bnode-\d+\b")


def compare(oracle: list[Obj], py: list[Obj]) -> list[Diff]:
    """Differences between the two sides, per Pod (empty: agree)."""
    diffs: list[Diff] = []
    if [o["pod"] for o in oracle] != [p["pod"] for p in py]:
        return [Diff("*", "pod order", [o["pod"] for o in oracle], [p["pod"] for p in py])]
    for o, p in zip(oracle, py, strict=True):
        name = o["pod"]
        if o.get("error") != p.get("error"):
            diffs.append(Diff(name, "error", o.get("error"), p.get("error")))
        if o.get("reserve") != p.get("reserve"):
            diffs.append(Diff(name, "reserve", o.get("reserve"), p.get("reserve")))
        if sorted(o["feasible"]) != sorted(p["feasible"]):
            diffs.append(Diff(name, "feasible", sorted(o["feasible"]), sorted(p["feasible"])))
        for node, reasons in o["filtered"].items():
            if reasons == ["(excluded by PreFilterResult)"]:
                continue
            if _reasons(p["filtered"].get(node)) != _reasons(reasons):
                diffs.append(Diff(name, f"filtered[{node}]", reasons, p["filtered"].get(node)))
        for plugin in sorted(set(o["scores"]) | set(p["scores"])):
            if o["scores"].get(plugin) != p["scores"].get(plugin):
                diffs.append(Diff(name, f"scores[{plugin}]", o["scores"].get(plugin), p["scores"].get(plugin)))
        if o["totals"] != p["totals"]:
            diffs.append(Diff(name, "totals", o["totals"], p["totals"]))
        if p["totals"]:
            best = max(p["totals"].values())
            tied = {n for n, t in p["totals"].items() if t == best}
            if o["selected"] not in tied:
                diffs.append(Diff(name, "selected", o["selected"], p["selected"]))
        elif o["selected"] != p["selected"]:
            diffs.append(Diff(name, "selected", o["selected"], p["selected"]))
        if _message(o["message"]) != _message(p["message"]):
            diffs.append(Diff(name, "message", o["message"], p["message"]))
        if o.get("nominated") != p.get("nominated"):
            diffs.append(Diff(name, "nominated", o.get("nominated"), p.get("nominated")))
        if (o.get("victims") or []) != (p.get("victims") or []):
            diffs.append(Diff(name, "victims", o.get("victims"), p.get("victims")))
    return diffs


def coverage(oracle: list[Obj], py: list[Obj], counts: dict[str, int]) -> None:
    """Add what one scenario exercised (upstream's side) to ``counts``: Pods placed / unschedulable /
    failing with an Error, preemptions (with victims), followed preemption ties, Reserve failures,
    the PostFilter outcomes (message tails, numbers masked) and per Filter reason the node
    rejections."""
    for o in oracle:
        counts["pods"] = counts.get("pods", 0) + 1
        kind = ("error" if o.get("error") else "reserve failed" if o.get("reserve")
                else "placed" if o.get("selected") else "unschedulable")
        counts[kind] = counts.get(kind, 0) + 1
        if o.get("nominated"):
            counts["preempting"] = counts.get("preempting", 0) + 1
            counts["victims"] = counts.get("victims", 0) + len(o.get("victims") or [])
        msg = o.get("message") or ""
        if ". " in msg:
            tail = re.sub(r"\d+", "N", _NODE.sub("<node>", msg.split(". ", 1)[1]))
            key = "PostFilter: " + (tail if not tail.startswith("preemption: N/N") else "preemption: N/N nodes ...")
            counts[key] = counts.get(key, 0) + 1
        for reasons in o.get("filtered", {}).values():
            for r in reasons:
                key = "reason: " + _NODE.sub("<node>", re.sub(r'"[^"]*"', '"…"', r))
                counts[key] = counts.get(key, 0) + 1
    counts["preemption ties followed"] = counts.get("preemption ties followed", 0) + sum(1 for p in py if p.get("tie"))


def run(n: int, seed: int, out_dir: Path, quiet: bool = False, counts: dict[str, int] | None = None,
        scenario_fn: Any = None, gates: str = "") -> tuple[int, int]:
    """Run ``n`` scenarios; write each differing one to ``out_dir``. Returns (agree, differ).

    ``counts`` (when given) receives :func:`coverage` over all scenarios. ``scenario_fn(seed, i)``
    replaces the generator's :func:`scenario` (e.g. ``gang_scenario``); ``gates`` (``Name=true,...``)
    are turned on in both the oracle and py-scheduler's profile (default: upstream's defaults)."""
    from bench.parity_lib.generator import scenario
    from py_scheduler.framework.features import FeatureGates

    make = scenario_fn if scenario_fn is not None else scenario
    binary = oracle_binary()
    agree = differ = 0
    t0 = time.monotonic()
    fg = FeatureGates.parse(gates)
    for i in range(n):
        objs = make(seed, i)
        try:
            o = run_oracle(binary, objs, gates)
            p = run_py(objs, o, fg)
            diffs = compare(o, p)
        except Exception as exc:  # a crash on either side is a difference too
            o, p, diffs = [], [], [Diff("*", "crash", None, f"{type(exc).__name__}: {exc}")]
        differ, agree = _record(seed, i, objs, o, p, diffs, out_dir, quiet, counts, differ, agree)
    if not quiet:
        print(f"{n} scenarios in {time.monotonic() - t0:.1f}s (seed {seed})", file=sys.stderr)
    return agree, differ


def _record(seed: int, i: int, objs: list[Obj], o: list[Obj], p: list[Obj], diffs: list[Diff], out_dir: Path,
            quiet: bool, counts: dict[str, int] | None, differ: int, agree: int) -> tuple[int, int]:
    """Count one scenario's outcome and write it to ``out_dir`` when it differs."""
    if counts is not None:
        coverage(o, p, counts)
    if diffs:
        differ += 1
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"scenario-{seed}-{i:05d}.json"
        path.write_text(json.dumps({"seed": seed, "index": i, "objects": objs,
                                    "diff": [d.__dict__ for d in diffs], "oracle": o, "py": p},
                                   indent=1, default=str))
        if not quiet:
            first = diffs[0]
            print(f"scenario {i}: {len(diffs)} difference(s), first: {first.pod} {first.what}: "
                  f"oracle={json.dumps(first.oracle, default=str)[:200]} "
                  f"py={json.dumps(first.py, default=str)[:200]} -> {path}")
    else:
        agree += 1
    return differ, agree


if __name__ == "__main__":  # pragma: no cover
    os.execv(sys.executable, [sys.executable, str(REPO / "bench" / "parity"), *sys.argv[1:]])
