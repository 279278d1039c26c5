"""Plugin extension points, as Protocols (``staging/src/k8s.io/kube-scheduler/framework/interface.go``).

A plugin is a class with a ``name`` (upstream's plugin name) and one method per extension point it
implements. The runtime finds the extension points by ``isinstance`` against these
runtime-checkable Protocols, as upstream does with Go interfaces. Plugins never touch the API:
they read the cycle's snapshot through the framework's
:class:`~py_scheduler.framework.lister.SnapshotLister` (``state.snapshot``) and the PodInfo / NodeInfo
they are handed; the binding cycle writes through the Handle's client.

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
    pre_enqueue(pod) -> Status                   (PreEnqueue: non-Success keeps the Pod out of activeQ)
    events_to_register() -> [ClusterEventWithHint]  (EnqueueExtensions / QueueingHint)
    sign_pod(pod, snapshot) -> (fragments, Status)  (Sign, OpportunisticBatching)
    filter_nodes(state, pod, nodes) -> [Status] | None   (batch Filter, see BatchFilterPlugin)
    score_nodes(state, pod, nodes) -> ([int], Status)    (batch Score, see BatchScorePlugin)

Every plugin is built by its factory ``create(args, handle)`` with the profile's typed
:class:`~py_scheduler.framework.handle.Handle`; nothing is injected afterwards and the runtime discovers
no method by name: a plugin takes part in an extension point iff it is an instance of that point's
Protocol here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from py_scheduler.framework.batch import SignFragment
from py_scheduler.framework.events import ClusterEventWithHint, EnqueueExtensions
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status

__all__ = [
    "DRA_STATE_KEY", "AllocationReporter", "AsyncPreemptionPlugin", "BatchFilterPlugin", "BatchScorePlugin",
    "BindPlugin", "ClaimAllocationState", "ClusterEventWithHint", "EnqueueExtensions", "ExplainNoter",
    "FilterPlugin", "GPUInventoryReporter", "NormalizeScorePlugin", "PermitPlugin", "Plugin",
    "PostBindPlugin", "PostFilterPlugin", "PostFilterResult", "PreBindPlugin", "PreEnqueuePlugin",
    "PreFilterExtensions", "PreFilterPlugin", "PreFilterResult", "PreScorePlugin", "QueueSortPlugin",
    "QueuedPodInfo", "ReservePlugin", "ScorePlugin", "SignFragment", "SignPlugin", "SignResult",
]

SignResult = tuple[list[SignFragment], Status]

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
    (PodInfos) to delete through the API, and how many PodDisruptionBudget violations that costs
    (``Victims.NumPDBViolations``, for ``scheduler_preemption_pdb_violations_total``)."""

    nominated_node_name: str
    victims: list[PodInfo]
    num_pdb_violations: int = 0


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
# PlacementScorePlugin + PlacementScoreExtensions, PodGroupPostFilterPlugin with PodGroupSchedulingFunc),
# types.go (Placement, PodGroupAssignments, ProposedAssignment, PodGroupPostFilterResult) and
# pkg/scheduler/framework/interface.go (PlacementFeasiblePlugin). They run in
# upstream's pod group scheduling cycle (pkg/scheduler/schedule_one_podgroup.go), reproduced in
# framework/podgroup.py (PlacementGenerate / PlacementScore with TopologyAwareWorkloadScheduling on).

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


@dataclass(slots=True)
class ProposedAssignment:
    """``fwk.ProposedAssignment``: a member the pod group algorithm placed in a dry run, with the
    CycleState it was filtered with (built with the members before it assumed)."""

    pod: PodInfo
    node_name: str
    state: CycleState


@dataclass(slots=True)
class PodGroupPostFilterResult:
    """``fwk.PodGroupPostFilterResult`` plus what the executor evicts: ``nominations`` maps a member's
    ``namespace/name`` to its nominated node (``NominatingInfos``, ``ModeOverride``; "" clears);
    ``victims`` are the Pods to evict, most important first (``Victims.Pods``); for the metrics,
    ``num_pdb_violations`` the budgets evicting them violates (``Victims.NumPDBViolations``) and
    ``num_pod_group_disruptions`` the victims that are PodGroup members or whole groups."""

    nominations: dict[str, str]
    victims: list[PodInfo]
    num_pdb_violations: int = 0
    num_pod_group_disruptions: int = 0


class PodGroupDryRun(Protocol):
    """What a PodGroupPostFilter plugin works on: upstream's mutable snapshot (``StartMutations`` ..
    ``EndMutations``: a copy of the cycle's Snapshot, dropped afterwards) and its
    ``PodGroupSchedulingFunc`` (the pod group algorithm rerun on that copy)."""

    @property
    def snapshot(self) -> SnapshotLister:
        """The copy (``MutableSnapshotSharedLister``); its NodeInfos change in place."""
        ...

    def remove_pod(self, pod: PodInfo) -> None:
        """``RemovePod``: take ``pod`` off its node (``spec.nodeName``) in the copy."""
        ...

    def add_pod(self, pod: PodInfo) -> None:
        """``AddPod``: put ``pod`` back on its node in the copy."""
        ...

    def schedule(self) -> tuple[list[ProposedAssignment], Status]:
        """``PodGroupSchedulingFunc``: the group's members scheduled on the copy as the group cycle
        does (each member Reserved and assumed, all reverted at the end): the members placed and the
        group's Status."""
        ...

    def assume(self, assignment: ProposedAssignment) -> Callable[[], None]:
        """``AddPod`` + ``RunReservePluginsReserve`` of a placed member on its node (the Reserve status
        is not read, as upstream); returns its undo (Unreserve, then ``RemovePod``)."""
        ...


@runtime_checkable
class PodGroupPostFilterPlugin(Protocol):
    """``PodGroupPostFilterPlugin``: runs when a pod group cycle is Unschedulable, with the group's
    :class:`PodGroupDryRun`. Returns (result, Status) -- a Success with a result nominates the members
    and evicts its victims (DefaultPreemption's group preemption) -- or None where py-scheduler
    cannot decide it (DynamicResources' claim deallocation for members with claims): the cycle then
    reports no PodGroupPostFilter outcome at all."""

    name: str

    def pod_group_post_filter(self, state: CycleState, pod_group: PodGroupInfo, dry_run: PodGroupDryRun
                              ) -> tuple[PodGroupPostFilterResult | None, Status] | None: ...


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    """``PreEnqueuePlugin``: runs before a Pod enters activeQ; any non-Success Status keeps it in the
    unschedulable pool until an event (or the plugin's own state change) lets it through
    (SchedulingGates, DefaultPreemption's async preemption)."""

    name: str

    def pre_enqueue(self, pod: PodInfo) -> Status: ...


@runtime_checkable
class SignPlugin(Protocol):
    """``SignPlugin`` (OpportunisticBatching, ``framework/interface.go``): the part of a Pod's
    signature this plugin's PreFilter / Filter / PreScore / Score results depend on.

    Two Pods whose fragments from every plugin of the profile are equal must get the same Filter and
    Score results on the same nodes. A non-Success Status (or an exception, logged) means "cannot
    sign": the Pod gets no signature. ``snapshot`` is the snapshot the Pod is signed against (None
    outside a cycle)."""

    name: str

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> SignResult: ...


@runtime_checkable
class BatchFilterPlugin(Protocol):
    """A Filter plugin's batch form (no upstream counterpart: speed only, bench/RESULTS.md).

    Equivalence rule: for every CycleState ``state`` after this plugin's PreFilter, Pod ``pod`` and
    list ``nodes``, ``filter_nodes(state, pod, nodes)`` returns ``None`` only if
    ``filter(state, pod, n)`` is Success for every ``n``, and otherwise a list ``r`` with
    ``len(r) == len(nodes)`` and ``r[i]`` equal in code and reasons to ``filter(state, pod,
    nodes[i])`` (the runtime tags the plugin name). ``nodes`` may be any NodeInfos of the cycle's
    snapshot (or clones of them) in any order, so the runtime may call either form on any chunk
    (checked for every registered plugin by tests/unit/plugins/test_batch_contract.py)."""

    name: str

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status: ...

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None: ...


@runtime_checkable
class BatchScorePlugin(Protocol):
    """A Score plugin's batch form (speed only).

    Equivalence rule: ``score_nodes(state, pod, nodes)`` returns ``(scores, Success)`` with
    ``scores[i] == score(state, pod, nodes[i])[0]`` for every i when every per-node call succeeds,
    and a non-Success Status equal to the first failing per-node call's otherwise (checked for every
    plugin by tests/unit/plugins/test_batch_contract.py)."""

    name: str

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]: ...

    def score_nodes(self, state: CycleState, pod: PodInfo,
                    nodes: list[NodeInfo]) -> tuple[Sequence[int], Status]: ...


@runtime_checkable
class BatchNormalizeScorePlugin(Protocol):
    """A NormalizeScore plugin's column form (speed only: no dict by node name per cycle).

    Equivalence rule: for ``scores = dict(zip(names, values))`` over distinct ``names``,
    ``normalize_column(state, pod, values)`` returns ``(out, status)`` where ``status`` equals in
    code and reasons what ``normalize_score(state, pod, scores)`` returns and, when it is Success,
    ``out == list(scores.values())`` after that call (checked for every plugin by
    tests/unit/plugins/test_batch_contract.py)."""

    name: str

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status: ...

    def normalize_column(self, state: CycleState, pod: PodInfo, values: Sequence[int]) -> tuple[list[int], Status]: ...


@runtime_checkable
class AsyncPreemptionPlugin(Protocol):
    """A PostFilter whose evictions run asynchronously (``SchedulerAsyncPreemption``): the live loop
    tells it when a Pod's evictions start and end, and its PreEnqueue holds the Pod meanwhile
    (upstream's ``Executor`` bookkeeping, here reached through this Protocol)."""

    name: str

    def mark_preempting(self, pod_uid: str) -> None: ...

    def last_victim(self, pod_uid: str, gone: Callable[[], bool]) -> None:
        """The last victim is about to be evicted; ``gone()`` says whether it is deleted or being deleted."""

    def preemption_finished(self, pod_uid: str) -> None: ...




@runtime_checkable
class AllocationReporter(Protocol):
    """A plugin that says which devices it allocated to a Pod in this cycle, for ``explain`` and
    ``simulate`` (no upstream counterpart: upstream writes the same data to the API). The plugin owns
    the output; callers read it only through this method.

    ``claim_allocations(state, pod)`` -> ``[{"claim": "namespace/name", "allocation": {...}}]``, one
    entry per claim of the Pod that is allocated (by Reserve in this cycle, or before), in the Pod's
    claim order; ``allocation`` is exactly what the API holds in the claim's ``status.allocation``
    (resource.k8s.io/v1 ``AllocationResult``: ``devices.results[]`` with ``request`` (``req`` or
    ``req/subrequest``), ``driver``, ``pool``, ``device`` and, when set, ``adminAccess``, ``shareID``,
    ``consumedCapacity``; ``devices.config``; ``nodeSelector``). Empty when nothing is allocated."""

    name: str

    def claim_allocations(self, state: CycleState, pod: PodInfo) -> list[dict[str, Any]]: ...


@runtime_checkable
class GPUInventoryReporter(Protocol):
    """GPUFilter's per-node GPU accounting, read only through this by the live process's
    ``py_scheduler_gpu_*`` gauges (no upstream counterpart): ``gpu_inventory(snapshot)`` ->
    ``[(node, model, allocated, free)]`` per node offering GPUs (devices; ``model``: GFD product name)."""

    name: str

    def gpu_inventory(self, snapshot: SnapshotLister) -> list[tuple[str, str, int, int]]: ...


@runtime_checkable
class ExplainNoter(Protocol):
    """A plugin with a decision of its own to tell ``explain`` (TopologyPlacementGenerator's domain;
    no upstream counterpart): ``explain_note(state)`` -> one line, or None when the cycle's ``state``
    holds no such decision."""

    name: str

    def explain_note(self, state: CycleState) -> str | None: ...


DRA_STATE_KEY = "DynamicResources"
"""The CycleState key of DynamicResources' cycle state (upstream ``stateKey``: the plugin's name)."""


@runtime_checkable
class ClaimAllocationState(Protocol):
    """DynamicResources' cycle state (``state.data[DRA_STATE_KEY]``) as GPUScore reads it: ``claims``,
    the Pod's ResourceClaims in order; ``node_allocations``, per node that passed Filter, the
    AllocationResults (``status.allocation``'s shape) of the claims without one, in claim order."""

    claims: list[dict[str, Any]]
    node_allocations: dict[str, list[dict[str, Any]]]


class NodeShards(Protocol):
    """Filter and Score over more cores than the cycle's own (issue 32 item 3; upstream's
    ``parallelism``: the 16 goroutines of ``Parallelizer.Until`` in ``findNodesThatPassFilters`` and
    ``RunScorePlugins``, ``pkg/scheduler/schedule_one.go`` and
    ``pkg/scheduler/framework/runtime/framework.go``). Connected to a profile once
    (:meth:`~py_scheduler.framework.runtime.Framework.connect_shards`).

    Equivalence rules: ``filter_chunk(fw, active, state, pod, nodes)`` returns exactly what
    ``fw.filter_chunk(active, state, pod, nodes)`` returns (per node None or the rejecting plugin's
    Status, equal in code, reasons and plugin; None when all pass) and raises the same
    ``SchedulingError``, whoever evaluated which node; ``state`` is the cycle's after PreFilter.
    ``score_raw(fw, active, state, pod, nodes, names)`` (``names``: the nodes' names) returns
    ``fw.raw_score_columns(active, state, pod, nodes)`` (one column of raw scores per plugin of
    ``active``, aligned with ``nodes``, the feasible nodes PreScore saw) or None, never raising for
    a plugin: on None the caller computes the columns itself, so an error is the one-core path's.
    ``state`` is the cycle's after PreScore. Checked against the one-core path by
    tests/unit/core/test_shards.py.
    """

    def filter_chunk(self, fw: Any, active: Sequence[Any], state: CycleState, pod: PodInfo,
                     nodes: list[NodeInfo]) -> list[Status | None] | None: ...

    def score_raw(self, fw: Any, active: Sequence[Any], state: CycleState, pod: PodInfo,
                  nodes: list[NodeInfo], names: list[str]) -> list[Sequence[int]] | None: ...

    def close(self) -> None:
        """Stop whatever runs beside the cycle (idempotent; Filter and Score then run on the cycle's
        thread)."""
        ...
