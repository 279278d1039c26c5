"""Plugin extension points, as Protocols (``staging/src/k8s.io/kube-scheduler/framework/interface.go``).

A plugin is a class with a ``name`` (upstream's plugin name) and one method per extension point it
implements. The runtime finds the extension points by ``isinstance`` against these
runtime-checkable Protocols, as upstream does with Go interfaces. Plugins never touch the API:
they read the cycle's :class:`~py_scheduler.cache.snapshot.Snapshot` (``state.snapshot``) and the
PodInfo / NodeInfo they are handed.

Shapes:
    pre_filter(state, pod, nodes) -> (PreFilterResult | None, Status)
        ``PreFilterResult`` is a set of node names the Pod may go to (``None``: all nodes).
        Status Skip means "my Filter is not needed for this Pod".
    filter(state, pod, node_info) -> Status
    pre_score(state, pod, nodes) -> Status       (Skip: my Score is not needed)
    score(state, pod, node_info) -> (int, Status)
    normalize_score(state, pod, scores) -> Status  (edits ``scores`` in place; node name -> int)
    reserve(state, pod, node_name) -> Status / unreserve(state, pod, node_name) -> None
    permit(state, pod, node_name) -> (Status, timeout seconds)
    pre_bind_pre_flight(state, pod, node_name) -> Status; async pre_bind(state, pod, node_name) -> Status
    async bind(state, pod, node_name) -> Status   (Skip: the next Bind plugin decides)
    post_bind(state, pod, node_name) -> None
    post_filter(state, pod, node_statuses) -> (PostFilterResult | None, Status)
    less(a, b) -> bool                           (QueueSort)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status

PreFilterResult = set[str] | None


@dataclass(slots=True)
class QueuedPodInfo:
    """A Pod in the scheduling queue (``framework.QueuedPodInfo``).

    ``timestamp`` is the time (seconds, monotonic) it entered activeQ; ``initial_attempt_timestamp``
    the first time it was queued; ``attempts`` the scheduling attempts so far;
    ``unschedulable_plugins`` the plugins that rejected it last time.
    """

    pod_info: PodInfo
    timestamp: float = 0.0
    initial_attempt_timestamp: float = 0.0
    attempts: int = 0
    unschedulable_plugins: frozenset[str] = frozenset()


@dataclass(slots=True)
class PostFilterResult:
    """``fwk.PostFilterResult``: the node nominated for the Pod by preemption, and the victims
    (PodInfos) to delete through the API."""

    nominated_node_name: str
    victims: list[PodInfo]


class Plugin(Protocol):
    name: str


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]: ...


@runtime_checkable
class PreFilterExtensions(Protocol):
    """``PreFilterExtensions``: keep PreFilter state right when the cycle adds or removes a Pod on a
    node (preemption dry runs, nominated pods)."""

    name: str

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node_info: NodeInfo) -> Status: ...

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo,
                   node_info: NodeInfo) -> Status: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(self, state: CycleState, pod: PodInfo,
                    node_statuses: dict[str, Status]) -> tuple[PostFilterResult | None, Status]: ...


@runtime_checkable
class PreScorePlugin(Protocol):
    name: str

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]: ...


@runtime_checkable
class NormalizeScorePlugin(Protocol):
    """Score plugins that also normalize (``ScoreExtensions().NormalizeScore``)."""

    name: str

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    """``PermitPlugin``: the last say before the binding cycle. Returns a Status and, for Wait, how
    long (seconds) the Pod may wait for an Allow / Reject from elsewhere (the framework's waiting-Pods
    map); Success lets it through, anything else rejects it (Unreserve follows)."""

    name: str

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]: ...


@runtime_checkable
class PreBindPlugin(Protocol):
    """``PreBindPlugin`` (+ ``PreBindPreFlight``), run in the binding cycle before Bind.

    ``pre_bind_pre_flight`` is cheap and synchronous: Skip when this Pod needs no PreBind of this
    plugin, Success when it does. ``pre_bind`` does the API work (bind volumes, write claim
    allocations) through the Handle's client; a non-Success Status fails the binding cycle and the
    framework runs Unreserve in reverse order."""

    name: str

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...


@runtime_checkable
class BindPlugin(Protocol):
    """``BindPlugin``: binds the Pod to ``node_name``. Skip passes to the next Bind plugin; the first
    non-Skip Status is the result (upstream ``RunBindPlugins``)."""

    name: str

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...


@runtime_checkable
class PostBindPlugin(Protocol):
    """``PostBindPlugin``: informational, after a successful Bind (clean-up of cycle state)."""

    name: str

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None: ...


# --- workload-aware scheduling (GenericWorkload, TopologyAwareWorkloadScheduling) ----------------------
# Upstream: staging/src/k8s.io/kube-scheduler/framework/interface.go (PlacementGeneratePlugin,
# PlacementScorePlugin + PlacementScoreExtensions, PodGroupPostFilterPlugin), types.go (Placement,
# PodGroupAssignments) and pkg/scheduler/framework/interface.go (PlacementFeasiblePlugin). They run in
# upstream's pod group scheduling cycle (pkg/scheduler/schedule_one_podgroup.go), which py-scheduler does
# not run yet: plugins implement them so that cycle, explain and tests can call them.

@dataclass(slots=True)
class PodGroupInfo:
    """A PodGroup being scheduled (``fwk.PodGroupInfo``): its API object (``scheduling.k8s.io/v1beta1``
    PodGroup dict) and the member Pods considered in this cycle."""

    pod_group: dict[str, Any]
    pods: list[PodInfo]

    @property
    def namespace(self) -> str:
        return str((self.pod_group.get("metadata") or {}).get("namespace") or "default")

    @property
    def name(self) -> str:
        return str((self.pod_group.get("metadata") or {}).get("name") or "")


@dataclass(slots=True)
class Placement:
    """``fwk.Placement``: a named set of nodes the whole group is tried on (``name`` is the topology
    domain for TopologyPlacementGenerator; ``""`` for the unconstrained placement)."""

    name: str
    nodes: list[NodeInfo]


@dataclass(slots=True)
class PodGroupAssignments:
    """``fwk.PodGroupAssignments``: a placement and the (Pod, node name) pairs the group cycle proposed
    in it."""

    placement: Placement
    proposed: list[tuple[PodInfo, str]]


@dataclass(slots=True)
class PlacementScore:
    """``fwk.PlacementScore``: a placement and its score (normalized in place by extensions)."""

    placement: Placement
    score: int


@dataclass(slots=True)
class PlacementProgress:
    """``framework.PlacementProgress``: members placed so far in this placement, and still to try."""

    scheduled: int
    remaining: int


@runtime_checkable
class PlacementGeneratePlugin(Protocol):
    """``PlacementGeneratePlugin``: split ``parent`` into the placements the group is tried on."""

    name: str

    def generate_placements(self, state: CycleState, pod_group: PodGroupInfo,
                            parent: Placement) -> tuple[list[Placement], Status]: ...


@runtime_checkable
class PlacementScorePlugin(Protocol):
    """``PlacementScorePlugin``: score one feasible placement's proposed assignments."""

    name: str

    def score_placement(self, state: CycleState, pod_group: PodGroupInfo,
                        assignments: PodGroupAssignments) -> tuple[int, Status]: ...


@runtime_checkable
class PlacementScoreExtensions(Protocol):
    """``PlacementScoreExtensions.NormalizePlacementScore`` (edits ``scores`` in place)."""

    name: str

    def normalize_placement_score(self, state: CycleState, pod_group: PodGroupInfo,
                                  scores: list[PlacementScore]) -> Status: ...


@runtime_checkable
class PlacementFeasiblePlugin(Protocol):
    """``PlacementFeasiblePlugin``: after each member is evaluated in a placement, Success (the group
    is feasible), Wait (maybe, once more members are evaluated) or Unschedulable (cannot be)."""

    name: str

    def placement_feasible(self, state: CycleState, pod_group: PodGroupInfo,
                           progress: PlacementProgress) -> Status: ...


@runtime_checkable
class PodGroupPostFilterPlugin(Protocol):
    """``PodGroupPostFilterPlugin``: called when no placement fits the group (group preemption);
    ``schedule`` re-runs the group's scheduling algorithm on a mutated snapshot. Returns nominated
    nodes per Pod key (or None) and a Status."""

    name: str

    def pod_group_post_filter(self, state: CycleState, pod_group: PodGroupInfo,
                              schedule: Any) -> tuple[dict[str, str] | None, Status]: ...


class PluginFactory(Protocol):
    """``func(args, handle) (Plugin, error)``: builds a plugin from its pluginConfig args (a dict,
    possibly empty). Raises ``py_scheduler.framework.config.ConfigError`` on bad args."""

    def __call__(self, args: dict[str, Any], handle: Any) -> Any: ...
