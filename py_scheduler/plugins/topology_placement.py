"""TopologyPlacementGenerator: one placement per topology domain for a PodGroup with a topology constraint.

Upstream (kube-scheduler v1.37.2, feature gate ``TopologyAwareWorkloadScheduling``, alpha):
``pkg/scheduler/framework/plugins/topologyaware/topology_placement.go``. A PodGroup whose
``spec.schedulingConstraints.topology[0].key`` names a Node label (``topology.kubernetes.io/zone``, a
rack label, an NVLink clique label such as ``nvidia.com/gpu.clique``) is tried on each domain of that
label in turn; once some members are scheduled (assumed or bound) only their domain remains.
Nodes without the label are in no placement. A group without the constraint gets the parent
placement unchanged.

:meth:`TopologyPlacement.generate_placements` is upstream's PlacementGenerate, run by the pod group
cycle's placement algorithm (:mod:`py_scheduler.framework.podgroup`): the group is tried whole on each
domain and PodGroupPodsCount picks among the feasible ones. The plugin also has a PreFilter, a
py-scheduler addition for a member scheduled on its own (``explain`` of one Pod; documented in
docs/gpu.md), that estimates the same choice per Pod; it skips inside a pod group cycle's placement:

- members already scheduled: the Pod may go only to nodes of their domain (upstream's
  ``requiredDomain``); scheduled members in two domains: UnschedulableAndUnresolvable;
- none yet: the domain where the group's members fit best, judged as upstream's PodGroupPodsCount
  would after simulating the group: the domain that can hold the most members (counting copies of this
  Pod's requests that fit the nodes' free CPU, memory and extended resources such as GPUs). Among
  domains that hold them all, the one with the least room left (best fit, so larger domains stay free
  for larger groups; upstream breaks this tie by its map order). The chosen domain is explained in the
  PreFilter's reason when no domain holds the whole group.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework import objects as ob
from py_scheduler.framework.algorithm import PLACEMENT_STATE_KEY
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.handle import Handle, ObjectLister
from py_scheduler.framework.interfaces import Placement, PodGroupInfo, PreFilterResult
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.podgroup import pod_group_name, scheduled_members
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Resource, Status

NAME = "TopologyPlacementGenerator"
STATE_KEY = f"PreFilter{NAME}"


def topology_key(pod_group: Obj) -> str | None:
    """``getTopologyKey``: ``spec.schedulingConstraints.topology[0].key``, or None."""
    spec = pod_group.get("spec")
    sc = spec.get("schedulingConstraints") if isinstance(spec, dict) else None
    topo = sc.get("topology") if isinstance(sc, dict) else None
    if isinstance(topo, list) and topo and isinstance(topo[0], dict):
        key = topo[0].get("key")
        if isinstance(key, str) and key:
            return key
    return None


def required_domain(members: list[tuple[PodInfo, NodeInfo]], key: str) -> tuple[str | None, str]:
    """``getScheduledPodsTopologyDomain``: (the scheduled members' domain, "") or (None, error)."""
    domain = ""
    for p, ni in members:
        d = ob.labels_of(ni.node).get(key)
        if d is None:
            return None, f"no topology domain found for pod {p.key}"
        if domain and domain != d:
            return None, f"more than 1 domain found for pod group: {domain}, {d}"
        domain = d
    return domain, ""


def copies_that_fit(ni: NodeInfo, req: Resource) -> int:
    """How many Pods with requests ``req`` fit the node's free allocatable (CPU, memory, extended
    resources, pod count); a Pod requesting nothing counts once per free pod slot. Whole units only:
    ``req`` from :func:`effective_requests`."""
    free_pods = ni.allocatable.allowed_pod_number - len(ni.pods)
    n = max(free_pods, 0)
    pairs = [(ni.allocatable.milli_cpu - ni.requested.milli_cpu, req.milli_cpu),
             (ni.allocatable.memory - ni.requested.memory, req.memory)]
    pairs += [(ni.allocatable.scalar.get(r, 0) - ni.requested.scalar.get(r, 0), q) for r, q in req.scalar.items()]
    for free, want in pairs:
        if want > 0:
            n = min(n, max(free, 0) // want)
    return n


def effective_requests(pod: PodInfo) -> Resource:
    """The Pod's requests, with extended resources given only as limits counted as requested (the
    API server defaults such requests to the limits; a snapshot file may not have them)."""
    req = Resource(pod.requests.milli_cpu, pod.requests.memory, pod.requests.ephemeral_storage,
                   pod.requests.allowed_pod_number, dict(pod.requests.scalar))
    limits: dict[str, int] = {}
    for c in pod.spec.get("containers") or []:
        lim = ((c.get("resources") or {}).get("limits") or {}) if isinstance(c, dict) else {}
        for name, q in lim.items() if isinstance(lim, dict) else ():
            if "/" in name and not name.startswith(("kubernetes.io/", "requests.")) and name not in req.scalar:
                try:
                    limits[name] = limits.get(name, 0) + int(str(q))
                except ValueError:
                    continue
    for name, n in limits.items():
        req.scalar[name] = n
    return req


class TopologyPlacement:
    """PlacementGenerate (upstream) + PreFilter (per-Pod path) plugin."""

    name = NAME

    def __init__(self, objects: ObjectLister | None = None, handle: Handle | None = None) -> None:
        self._objects = objects
        self._handle = handle

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> TopologyPlacement:
        return cls(None, handle)

    @property
    def objects(self) -> ObjectLister | None:
        if self._objects is not None:
            return self._objects
        return self._handle.objects if self._handle is not None else None

    def explain_note(self, state: CycleState) -> str | None:
        """``ExplainNoter``: this cycle's group placement decision (the domain, each domain's room in
        copies of the Pod that fit, the group's size); None when PreFilter chose no domain."""
        try:
            d = state.read(STATE_KEY)
        except KeyError:
            return None
        if not isinstance(d, dict):
            return None
        room = ", ".join(f"{dom}={n}" for dom, n in sorted(d["capacity"].items()))
        fits = d["capacity"].get(d["domain"], 0) >= d["needed"]
        verdict = "holds the whole group" if fits else "holds the most members, but not all: the group cannot fit whole"
        return (f"pod group {d['group']}: topology {d['key']}={d['domain']} ({verdict}; {d['needed']} members, "
                f"room per domain: {room})")

    def generate_placements(self, state: CycleState, pod_group: PodGroupInfo,
                            parent: Placement) -> tuple[list[Placement], Status]:
        """``GeneratePlacements``: the parent placement split by the group's topology domain (only the
        scheduled members' domain once there are some), domains in first-seen node order."""
        key = topology_key(pod_group.pod_group)
        if key is None:
            return [parent], Status.success()
        snapshot = state.snapshot
        all_nodes = list(snapshot.node_info_list) if snapshot is not None else parent.nodes
        members = scheduled_members(all_nodes, pod_group.namespace, pod_group.name)
        required: str | None = None
        if members:
            required, err = required_domain(members, key)
            if required is None:
                return [], Status(Code.ERROR, [f"cannot determine domain for already scheduled pods: {err}"], NAME)
        per_domain: dict[str, list[NodeInfo]] = {}
        for ni in parent.nodes:
            d = ob.labels_of(ni.node).get(key)
            if d is not None and (required is None or d == required):
                per_domain.setdefault(d, []).append(ni)
        return [Placement(d, nodes) for d, nodes in per_domain.items()], Status.success()

    # -- the per-Pod path ----------------------------------------------------------------------------
    def _pod_group(self, pod: PodInfo) -> Obj | None:
        name = pod_group_name(pod.pod)
        objs = self.objects
        if name is None or objs is None:
            return None
        pg: Obj | None = objs.get("PodGroup", pod.namespace, name)
        return pg

    def _group_size(self, pod: PodInfo, name: str) -> int:
        objs = self.objects
        n = 0
        for p in (objs.list("Pod") if objs is not None else ()):
            meta = p.get("metadata") or {}
            if (meta.get("namespace") or "default") == pod.namespace and pod_group_name(p) == name:
                n += 1
        return max(n, 1)

    def choose_domain(self, pod: PodInfo, key: str, nodes: list[NodeInfo],
                      members_needed: int) -> tuple[str | None, dict[str, int]]:
        """The domain for a group with no member scheduled yet (module docstring), and every
        domain's capacity in copies of ``pod``."""
        capacity: dict[str, int] = {}
        req = effective_requests(pod)
        for ni in nodes:
            d = ob.labels_of(ni.node).get(key)
            if d is not None:
                capacity[d] = capacity.get(d, 0) + copies_that_fit(ni, req)
        if not capacity:
            return None, capacity
        whole = [d for d, c in capacity.items() if c >= members_needed]
        if whole:
            return min(whole, key=lambda d: capacity[d]), capacity
        return max(capacity, key=lambda d: capacity[d]), capacity

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """Keep the Pod inside its group's topology domain (module docstring); Skip for Pods without a
        group or whose group has no topology constraint, and in a pod group cycle's placement (the
        placement algorithm already confines the member: upstream has no such PreFilter)."""
        if PLACEMENT_STATE_KEY in state.data:
            return None, Status.skip()
        pg = self._pod_group(pod)
        key = topology_key(pg) if pg is not None else None
        if pg is None or key is None:
            return None, Status.skip()
        name = str((pg.get("metadata") or {}).get("name") or "")
        members = scheduled_members(nodes, pod.namespace, name)
        if members:
            domain, err = required_domain(members, key)
            if domain is None:
                return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [err], NAME)
        else:
            domain, capacity = self.choose_domain(pod, key, nodes, self._group_size(pod, name))
            if domain is None:
                return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                    [f"no node has the pod group's topology key {key}"], NAME)
            state.write(STATE_KEY, {"group": f"{pod.namespace}/{name}", "key": key, "domain": domain,
                                    "capacity": capacity, "needed": self._group_size(pod, name)})
        allowed = {ni.name for ni in nodes if ob.labels_of(ni.node).get(key) == domain}
        return allowed, Status.success()

    # -- EnqueueExtensions (appended) ------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` for the per-Pod PreFilter (a py-scheduler addition: upstream's plugin
        is a PlacementGenerate plugin only, rejects nothing and registers nothing). What the PreFilter
        reads, and so what can make a rejected Pod schedulable:

        * ``Node/Add | UpdateNodeLabel | UpdateNodeAllocatable``: domains (the topology label) and
          their capacity in copies of the Pod;
        * ``AssignedPod/Add | Delete | UpdatePodScaleDown | UpdatePodScaleUp``: scheduled members
          (the required domain) and the domains' free room, which moves the best-fit choice either
          way (upstream NodeResourcesFit's precedent: no event for other Pod updates);
        * ``UnscheduledPod/Add | Delete`` of a Pod of the same group (its size); other Pods Skip;
        * ``PodGroup/All`` of the Pod's own group (its topology constraint); other groups Skip.

        Hints Skip only a Pod or PodGroup that is certainly not of the rejected Pod's group; Queue
        for anything malformed (a superset never strands a Pod)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL
                                              | ActionType.UPDATE_NODE_ALLOCATABLE)),
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD | ActionType.DELETE
                                              | ActionType.UPDATE_POD_SCALE_DOWN | ActionType.UPDATE_POD_SCALE_UP)),
            ClusterEventWithHint(ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD | ActionType.DELETE),
                                 _hint_same_group_pod),
            ClusterEventWithHint(ClusterEvent(EventResource.POD_GROUP, ActionType.ALL), _hint_own_pod_group),
        ]


def _namespace_of(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return ns if isinstance(ns, str) and ns else "default"


def _hint_same_group_pod(pod: Obj, old: Any, new: Any) -> QueueingHint:
    """An unscheduled Pod added or deleted: Queue when it is of the rejected Pod's group (same
    namespace and ``spec.schedulingGroup.podGroupName``; the group's size changed), or malformed."""
    changed = new if new is not None else old
    if not isinstance(changed, dict):
        return QueueingHint.QUEUE
    group = pod_group_name(pod)
    if group is None or pod_group_name(changed) != group or _namespace_of(changed) != _namespace_of(pod):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


def _hint_own_pod_group(pod: Obj, old: Any, new: Any) -> QueueingHint:
    """A PodGroup added, updated or deleted: Queue when it is the rejected Pod's group (or
    malformed), Skip another group."""
    changed = new if new is not None else old
    if not isinstance(changed, dict):
        return QueueingHint.QUEUE
    meta = changed.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str):
        return QueueingHint.QUEUE
    if name != pod_group_name(pod) or _namespace_of(changed) != _namespace_of(pod):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE
