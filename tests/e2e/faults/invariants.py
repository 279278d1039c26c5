"""Invariants checked from the API (and the schedulers' logs) after every fault scenario.

Nothing here trusts py-scheduler's own accounting: requests, allocatable and GPU metadata are
recomputed from the Pods and Nodes the API server holds, with a quantity parser of its own.

* **no overcommit**: on every Node, the summed effective requests of the non-terminal Pods bound to
  it (``max(sum(containers), max(initContainers)) + overhead``, as ``resource.PodRequests``) stay
  within ``status.allocatable`` for every resource it lists (cpu in milli-CPU, memory and
  ephemeral-storage in bytes, ``pods`` as a count, ``nvidia.com/gpu`` and any other extended
  resource as integers);
* **GPUs**: no ``gpu-scheduler/gpu-indices`` index held by two Pods of one Node, every index below
  the Node's GPU count, as many indices as GPUs the Pod holds, and a Pod's
  ``gpu-scheduler/gpu-memory-gb`` within the Node's per-GPU memory (label ``nvidia.com/gpu.memory``
  in MiB, else ``gpu-scheduler/gpu-memory-gb`` in decimal GB; docs/gpu.md);
* **bound once**: per Pod UID, at most one ``Scheduled`` event from reportingController
  ``py-scheduler`` (an event ``series`` counts as several), naming the Node the Pod is on; at most
  one ``Successfully bound pod to node`` line for it across every replica's log;
* **a reason for every pending Pod**: each Pod of the scenario is bound, gone, or has
  ``PodScheduled=False`` with a reason (or a ``FailedScheduling`` event);
* **no crash**: every replica is alive or exited 0, except those the scenario SIGKILLed on purpose,
  and no log holds a ``Traceback``;
* **deleted Nodes**: a Pod bound to a Node that no longer exists is tolerated only when its
  scheduling attempt started before the replica saw the Node's deletion (an in-flight race, which
  upstream has as well: the API accepts a Binding to a missing Node and PodGC removes the Pod);
  choosing a Node the cache already knew to be gone is a violation.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from kubernetes_asyncio import client

from tests.e2e.scheduler_proc import SchedulerProcess

IDX_ANNOTATION = "gpu-scheduler/gpu-indices"
MEM_ANNOTATION = "gpu-scheduler/gpu-memory-gb"
GPU = "nvidia.com/gpu"
CONTROLLER = "py-scheduler"
TERMINAL = ("Succeeded", "Failed")

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "m": Decimal("0.001"), "u": Decimal("0.000001"), "n": Decimal("0.000000001"),
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QTY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def quantity(raw: object) -> Decimal:
    """A Kubernetes quantity string (``"100m"``, ``"1.5Gi"``, ``"1e3"``) or number as a Decimal.

    Raises:
        ValueError: not a quantity.
    """
    if isinstance(raw, bool):
        raise ValueError(f"not a quantity: {raw!r}")
    if isinstance(raw, int | float):
        return Decimal(str(raw))
    m = _QTY.match(str(raw).strip())
    if not m:
        raise ValueError(f"not a quantity: {raw!r}")
    try:
        num = Decimal(m.group(1))
        if m.group(2):
            return num * (Decimal(10) ** int(m.group(2)[1:]))
        return num * Decimal(_SUFFIX[m.group(3) or ""])
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {raw!r}") from exc


def amount(resource: str, raw: object) -> int:
    """``raw`` in the unit the checks compare: milli-CPU for cpu, else the value rounded up."""
    q = quantity(raw)
    if resource == "cpu":
        q = q * 1000
    return int(q.to_integral_value(rounding=ROUND_CEILING))


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests of a Pod (API JSON): ``pods: 1`` plus, per resource, the larger of the
    containers' sum and the largest init container, plus ``overhead``. Limits count where a
    container sets no request (the API defaults requests to limits). Unparseable values are skipped."""
    spec = pod.get("spec") or {}

    def reqs(c: Mapping[str, Any]) -> dict[str, int]:
        res = c.get("resources") or {}
        out: dict[str, int] = {}
        for source in (res.get("limits") or {}, res.get("requests") or {}):
            for k, v in source.items():
                try:
                    out[k] = amount(k, v)
                except ValueError:
                    continue
        return out

    # component-helpers resource.PodRequests: sidecars (restartable init containers) run with the
    # containers and with every init container started after them
    total: dict[str, int] = defaultdict(int)
    for c in spec.get("containers") or []:
        for k, v in reqs(c).items():
            total[k] += v
    sidecars: dict[str, int] = defaultdict(int)
    init_max: dict[str, int] = defaultdict(int)
    for c in spec.get("initContainers") or []:
        r = reqs(c)
        if c.get("restartPolicy") == "Always":
            for k, v in r.items():
                total[k] += v
                sidecars[k] += v
            step = dict(sidecars)
        else:
            step = {k: r.get(k, 0) + sidecars.get(k, 0) for k in set(r) | set(sidecars)}
        for k, v in step.items():
            init_max[k] = max(init_max[k], v)
    for k, v in init_max.items():
        total[k] = max(total[k], v)
    for k, v in (spec.get("overhead") or {}).items():
        try:
            total[k] += amount(k, v)
        except ValueError:
            continue
    total["pods"] = 1
    return dict(total)


def node_gpu_memory_gb(node: Mapping[str, Any]) -> Decimal | None:
    """Memory per GPU in decimal GB from the Node's labels (docs/gpu.md), None when unknown."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    try:
        if "nvidia.com/gpu.memory" in labels:
            return Decimal(int(labels["nvidia.com/gpu.memory"]) * 2**20) / Decimal(10**9)
        if "gpu-scheduler/gpu-memory-gb" in labels:
            return Decimal(labels["gpu-scheduler/gpu-memory-gb"])
    except (ValueError, InvalidOperation):
        return None
    return None


@dataclass
class Report:
    """What :func:`check` found: ``violations`` (must be empty) and some counts."""

    violations: list[str] = field(default_factory=list)
    bound: int = 0
    bound_by_us: int = 0
    pending: int = 0
    on_deleted_nodes_in_flight: int = 0

    def add(self, msg: str) -> None:
        self.violations.append(msg)


async def _raw_items(call: Any) -> list[dict[str, Any]]:
    resp = await call(_preload_content=False)
    try:
        doc = json.loads(await resp.read())
    finally:
        resp.release()
    return list(doc.get("items") or [])


async def cluster_state(api: client.ApiClient) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                         list[dict[str, Any]]]:
    """(Nodes, Pods, events.k8s.io/v1 Events) as the API has them now, as JSON dicts (the generated
    models refuse core/v1 Events that lack ``eventTime``)."""
    core = client.CoreV1Api(api)
    return (await _raw_items(core.list_node), await _raw_items(core.list_pod_for_all_namespaces),
            await _raw_items(client.EventsV1Api(api).list_event_for_all_namespaces))


def _ev(e: Mapping[str, Any]) -> tuple[str, str, str, str, int, str]:
    """(reason, reportingController, reportingInstance, regarding uid, count, note) of an Event."""
    series = e.get("series") or {}
    return (str(e.get("reason") or ""), str(e.get("reportingController") or ""),
            str(e.get("reportingInstance") or ""), str((e.get("regarding") or {}).get("uid") or ""),
            int(series.get("count") or 1), str(e.get("note") or ""))


def _bound_lines(log: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"Successfully bound pod to node pod=(\S+) node=(\S+)", log)]


def check_capacity(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], report: Report) -> None:
    """No overcommit, GPU indices disjoint and in range, per-GPU memory respected."""
    by_node: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and (p.get("status") or {}).get("phase") not in TERMINAL:
            by_node[node].append(p)
    for n in nodes:
        name = n["metadata"]["name"]
        alloc = (n.get("status") or {}).get("allocatable") or {}
        used: dict[str, int] = defaultdict(int)
        for p in by_node.get(name, []):
            for k, v in pod_requests(p).items():
                used[k] += v
        for res, raw in alloc.items():
            try:
                cap = amount(res, raw)
            except ValueError:
                continue
            if used.get(res, 0) > cap:
                report.add(f"node {name} overcommitted on {res}: {used[res]} requested > {cap} allocatable")
        for res, v in used.items():
            if res not in alloc and v > 0 and res not in ("cpu", "memory", "ephemeral-storage", "pods") \
                    and "/" in res:
                report.add(f"node {name} runs Pods asking for {v} {res} it does not offer")
        # GPUs
        try:
            gpus = amount(GPU, alloc[GPU]) if GPU in alloc else int(
                ((n.get("metadata") or {}).get("labels") or {}).get("nvidia.com/gpu.count", "0"))
        except ValueError:
            gpus = 0
        per_gpu = node_gpu_memory_gb(n)
        held: dict[int, str] = {}
        for p in by_node.get(name, []):
            meta = p.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            ann = meta.get("annotations") or {}
            want = pod_requests(p).get(GPU, 0)
            raw = ann.get(IDX_ANNOTATION)
            if raw is None:
                continue
            try:
                idx = [int(i) for i in raw.split(",")] if raw else []
            except ValueError:
                report.add(f"{key} on {name} has a malformed {IDX_ANNOTATION}={raw!r}")
                continue
            if len(set(idx)) != len(idx) or len(idx) != want:
                report.add(f"{key} on {name} holds {want} GPU(s) but {IDX_ANNOTATION}={raw!r}")
            for i in idx:
                if not 0 <= i < gpus:
                    report.add(f"{key} on {name}: GPU index {i} out of range (node has {gpus})")
                if i in held:
                    report.add(f"GPU {name}#{i} held by both {held[i]} and {key}")
                held[i] = key
            mem = ann.get(MEM_ANNOTATION)
            if mem is not None and want > 0:
                try:
                    need = Decimal(mem)
                except InvalidOperation:
                    continue  # a malformed request cannot have been scheduled by us (checked elsewhere)
                if per_gpu is None or need > per_gpu:
                    report.add(f"{key} wants {need} GB per GPU but node {name} offers {per_gpu}")


def check_bound_once(pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]],
                     logs: Mapping[str, str], report: Report) -> None:
    """At most one Scheduled event (ours) per Pod UID, naming its Node; one bind line per Pod."""
    by_uid = {(p.get("metadata") or {}).get("uid"): p for p in pods}
    count: dict[str, int] = defaultdict(int)
    for e in events:
        reason, controller, instance, uid, n, note = _ev(e)
        if reason != "Scheduled" or controller != CONTROLLER or not uid:
            continue
        count[uid] += n
        p = by_uid.get(uid)
        if p is not None:
            node = (p.get("spec") or {}).get("nodeName")
            if node and not note.endswith(f" to {node}"):
                report.add(f"Scheduled event {note!r} (by {instance}) but the Pod is on {node}")
    for uid, c in count.items():
        if c > 1:
            p = by_uid.get(uid)
            name = (p or {}).get("metadata", {}).get("name", uid)
            report.add(f"pod {name} has {c} Scheduled events from {CONTROLLER}: bound more than once")
    lines: dict[str, list[str]] = defaultdict(list)
    for who, log in logs.items():
        for pod, node in _bound_lines(log):
            lines[pod].append(f"{who}->{node}")
    for pod, where in lines.items():
        if len(where) > 1:
            report.add(f"pod {pod} bound {len(where)} times per the logs: {where}")


def _has_reason(p: Mapping[str, Any], failed_events: set[str]) -> bool:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason"):
            return True
    return (p.get("metadata") or {}).get("uid") in failed_events


def pending_without_reason(pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]],
                           names: set[str]) -> list[str]:
    """Names in ``names`` (namespace default) neither bound nor with a PodScheduled=False reason."""
    failed = {_ev(e)[3] for e in events if _ev(e)[0] == "FailedScheduling"}
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        if meta.get("namespace") != "default" or meta.get("name") not in names:
            continue
        if (p.get("spec") or {}).get("nodeName") or (p.get("status") or {}).get("phase") in TERMINAL:
            continue
        if not _has_reason(p, failed):
            out.append(str(meta.get("name")))
    return out


def check_processes(procs: Iterable[SchedulerProcess], killed: set[int], report: Report) -> None:
    """Alive or exited 0 unless SIGKILLed on purpose; no Traceback in any log."""
    for p in procs:
        name = p.log_path.stem
        if p.proc is not None and p.pid not in killed:
            rc = p.proc.poll()
            if rc not in (None, 0):
                report.add(f"replica {name} exited with {rc} without being killed")
        log = p.log()
        if "Traceback" in log:
            i = log.index("Traceback")
            report.add(f"replica {name} logged a Traceback: {log[max(0, i - 300):i + 1500]}")


_DELETE_NODE = re.compile(r"Delete event for node node=(\S+)")
_ATTEMPT = re.compile(r"Attempting to schedule pod pod=(\S+)")


def check_deleted_nodes(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]],
                        logs: Mapping[str, str], group_nodes: set[str], report: Report) -> None:
    """A Pod bound to one of ``group_nodes`` that no longer exists must have had its last scheduling
    attempt start before the binding replica logged the Node's deletion."""
    existing = {n["metadata"]["name"] for n in nodes}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or node in existing or node not in group_nodes:
            continue
        meta = p.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        binder = None
        for who, log in logs.items():
            for m in re.finditer(rf"Successfully bound pod to node pod={re.escape(key)} node={re.escape(node)}\b",
                                 log):
                binder = (who, log, m.start())
        if binder is None:
            continue  # bound by somebody else (e.g. a test's own Binding)
        who, log, at = binder
        attempt = max((m.start() for m in _ATTEMPT.finditer(log, 0, at) if m.group(1) == key), default=-1)
        deleted = next((m.start() for m in _DELETE_NODE.finditer(log) if m.group(1) == node), None)
        if deleted is not None and attempt > deleted:
            report.add(f"{who} scheduled {key} onto node {node} after it had seen the Node deleted")
        else:
            report.on_deleted_nodes_in_flight += 1


async def check(api: client.ApiClient, *, pod_names: set[str], procs: Iterable[SchedulerProcess],
                killed: set[int], group_nodes: set[str]) -> Report:
    """Run every invariant once on the current state; returns the :class:`Report`."""
    report = Report()
    procs = list(procs)
    nodes, pods, events = await cluster_state(api)
    logs = {p.log_path.stem: p.log() for p in procs}
    check_capacity(nodes, pods, report)
    check_bound_once(pods, events, logs, report)
    check_processes(procs, killed, report)
    check_deleted_nodes(pods, nodes, logs, group_nodes, report)
    for name in pending_without_reason(pods, events, pod_names):
        report.add(f"pod {name} is pending without a PodScheduled=False reason or FailedScheduling event")
    ours = [p for p in pods if (p.get("metadata") or {}).get("name") in pod_names
            and (p.get("metadata") or {}).get("namespace") == "default"]
    report.bound = sum(1 for p in ours if (p.get("spec") or {}).get("nodeName"))
    report.pending = len(ours) - report.bound
    uids = {(p.get("metadata") or {}).get("uid") for p in ours}
    report.bound_by_us = len({_ev(e)[3] for e in events if _ev(e)[0] == "Scheduled"
                              and _ev(e)[1] == CONTROLLER and _ev(e)[3] in uids})
    return report
