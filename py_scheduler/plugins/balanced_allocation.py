"""NodeResourcesBalancedAllocation: favour nodes whose resource usage the Pod leaves balanced.

Upstream: ``pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go`` (PreScore with the
best-effort Skip, Score, ``balancedResourceScorer``), ``resource_allocation.go`` (the per-resource
lists, ``useRequested = true``), args defaulting in ``apis/config/v1/defaults.go``
(``SetDefaults_NodeResourcesBalancedAllocationArgs``: resources cpu + memory, weight 0 -> 1) and
validation in ``apis/config/validation/validation_pluginargs.go``
(``ValidateNodeResourcesBalancedAllocationArgs``: no duplicate names, every weight 1).

Score (v1.36+, kubernetes PR #135573): with ``f_i = min(1, requested_i / allocatable_i)`` over the
resources the node has (a scalar resource the Pod does not request is left out),
``b(x) = int((1 - std(f)) * 100)``, the score is ``50 + (50 + b(with Pod) - b(without Pod)) / 2``
(Go integer division): 75 for no change, up to 100 when the Pod improves the balance, down to 50
when it worsens it. Requests are actual requests (no 100m / 200Mi defaults), pod-level resources
and in-place-resize status included. PreScore returns Skip for a Pod that requests none of the
configured resources (best-effort), so such Pods are not piled onto one node (kubernetes #129138).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers.extended_resources import DRAPreScoreState
from py_scheduler.plugins.helpers.resource_scoring import (
    DEFAULT_RESOURCES,
    FieldErrors,
    ResourceAllocationScorer,
    ResourceSpec,
    balanced_resource_scorer,
    decode_resources,
    dra_pre_score_state,
    node_columns_of,
    resources_sign_pod,
)

__all__ = ["NAME", "PRE_SCORE_STATE_KEY", "BalancedAllocationArgs", "NodeResourcesBalancedAllocation"]

NAME = "NodeResourcesBalancedAllocation"
PRE_SCORE_STATE_KEY = "PreScore" + NAME


@dataclass(frozen=True, slots=True)
class BalancedAllocationArgs:
    """``NodeResourcesBalancedAllocationArgs`` after defaulting: the balanced resources (weight 1)."""

    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES

    @classmethod
    def from_dict(cls, args: dict[str, Any] | None) -> BalancedAllocationArgs:
        """Decode, default and validate ``pluginConfig[NodeResourcesBalancedAllocation].args``.

        Raises:
            ConfigError: ``resources[i].name: Duplicate value`` or ``resources[i].weight: Invalid
                value: N: must be 1`` (all problems together), or a malformed field.
        """
        args = args or {}
        errs = FieldErrors()
        if not isinstance(args, dict):
            errs.invalid("args", args, "must be an object")
            errs.raise_if_any()
        errs.unknown_fields("", args, ("kind", "apiVersion", "resources"))
        resources = decode_resources(args.get("resources"), "resources", errs)
        seen: set[str] = set()
        for i, r in enumerate(resources):
            if r.name in seen:
                errs.duplicate(f"resources[{i}].name", r.name)
            else:
                seen.add(r.name)
            if r.weight != 1:
                errs.invalid(f"resources[{i}].weight", r.weight, "must be 1")
        errs.raise_if_any()
        return cls(tuple(resources))


@dataclass(slots=True)
class _PreScoreState:
    """``balancedAllocationPreScoreState``: the Pod's request per configured resource."""

    pod_requests: list[int]
    dra: DRAPreScoreState | None = None

    def clone(self) -> _PreScoreState:
        return self


class NodeResourcesBalancedAllocation:
    """PreScore / Score plugin (``noderesources.BalancedAllocation``); state key
    ``PreScoreNodeResourcesBalancedAllocation``. No NormalizeScore."""

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go``): as
        NodeResourcesFit's. ``snapshot`` is unused by most plugins."""
        return resources_sign_pod(pod, snapshot)


    def __init__(self, args: BalancedAllocationArgs | None = None, handle: Handle | None = None) -> None:
        self.args = args or BalancedAllocationArgs()
        self.handle = handle
        self.scorer = ResourceAllocationScorer(NAME, balanced_resource_scorer, self.args.resources,
                                               use_requested=True, pod_level_and_status=True)

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> NodeResourcesBalancedAllocation:
        """Build from ``pluginConfig`` args.

        Raises:
            ConfigError: invalid args, naming the field.
        """
        return cls(BalancedAllocationArgs.from_dict(args), handle)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """Skip for a best-effort Pod; otherwise store its per-resource requests."""
        try:
            reqs = self.scorer.pod_request_list(pod)
        except PodParseError as exc:
            return Status.error(str(exc), NAME)
        if self.scorer.is_best_effort(reqs):
            return Status.skip()
        dra = dra_pre_score_state(state.snapshot, self.args.resources) if state.snapshot is not None else None
        state.write(PRE_SCORE_STATE_KEY, _PreScoreState(reqs, dra))
        return Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (the runtime's batch form)."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, _PreScoreState):
            out: list[int] = []
            for ni in nodes:
                sc, st = self.score(state, pod, ni)
                if st.code:
                    return out, st
                out.append(sc)
            return out, Status.success()
        return self.scorer.score_nodes(nodes, s.pod_requests, s.dra, node_columns_of(state.snapshot, len(nodes)))

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """The balance score (50..100) of ``node_info``; 0 for a best-effort Pod when PreScore did
        not run."""
        try:
            s: _PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        except KeyError:
            try:
                reqs = self.scorer.pod_request_list(pod)
            except PodParseError as exc:
                return 0, Status.error(str(exc), NAME)
            if self.scorer.is_best_effort(reqs):
                return 0, Status.success()
            dra = dra_pre_score_state(state.snapshot, self.args.resources) if state.snapshot is not None else None
            s = _PreScoreState(reqs, dra)
        return self.scorer.score(node_info, s.pod_requests, s.dra)
