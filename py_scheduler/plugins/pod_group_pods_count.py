"""PodGroupPodsCount: favour the placement that holds more of the PodGroup's Pods.

Upstream (kube-scheduler v1.37.2, feature gate ``TopologyAwareWorkloadScheduling``):
``pkg/scheduler/framework/plugins/podgrouppodscount/podgroup_pods_count.go``, weight 1 in the default
profile (``applyTopologyAwareWorkloadScheduling``). PlacementScore: the group's scheduled members
(assumed or bound) plus the members the cycle proposed in the placement; NormalizePlacementScore scales
by the best placement to [0, 100] (integer division, as Go), an error when no placement holds a member.

It runs in the pod group cycle's placement algorithm
(:func:`py_scheduler.framework.podgroup.score_placements`) when more than one placement is feasible.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.interfaces import PlacementScore, PodGroupAssignments, PodGroupInfo
from py_scheduler.framework.podgroup import scheduled_members
from py_scheduler.framework.types import MAX_NODE_SCORE, Code, CycleState, Status

NAME = "PodGroupPodsCount"
MIN_SCORE = 0


class PodGroupPodsCount:
    """PlacementScore plugin (with PlacementScoreExtensions)."""

    name = NAME

    @classmethod
    def create(cls, args: dict[str, Any], handle: Any) -> PodGroupPodsCount:
        return cls()

    def score_placement(self, state: CycleState, pod_group: PodGroupInfo,
                        assignments: PodGroupAssignments) -> tuple[int, Status]:
        """``ScorePlacement``: scheduled members (the cycle's snapshot, assumed + bound) + proposed."""
        snapshot = getattr(state, "snapshot", None)
        nodes = snapshot.node_info_list if snapshot is not None else assignments.placement.nodes
        scheduled = len(scheduled_members(nodes, pod_group.namespace, pod_group.name))
        return scheduled + len(assignments.proposed), Status.success()

    def normalize_placement_score(self, state: CycleState, pod_group: PodGroupInfo,
                                  scores: list[PlacementScore]) -> Status:
        """``NormalizePlacementScore``: ``MinScore + score * (MaxScore - MinScore) / max``."""
        best = max((s.score for s in scores), default=0)
        if best == 0:
            return Status(Code.ERROR, ["no pods from pod group are assigned to any of the candidate placements"],
                          NAME)
        for s in scores:
            s.score = MIN_SCORE + s.score * (MAX_NODE_SCORE - MIN_SCORE) // best
        return Status.success()
