"""NodeName: a Pod that names a node (``spec.nodeName``) fits only that node.

Upstream: ``pkg/scheduler/framework/plugins/nodename/node_name.go``. Pods reaching the scheduler
normally have no nodeName; the Filter matters for preemption dry runs and ``explain`` snapshots.

EventsToRegister: a Node added, without a hint (always Queue), as upstream.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.events import EVENT_NODE_ADD, ClusterEventWithHint
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status

NAME = "NodeName"
ERR_REASON = "node(s) didn't match the requested node name"


class NodeName:
    """Filter: UnschedulableAndUnresolvable unless ``spec.nodeName`` is empty or this node."""

    name = NAME


    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/nodename/node_name.go``): the Pod's
        ``spec.nodeName``. ``snapshot`` is unused by most plugins."""
        return [(signers.NODE_NAME_SIGNER_NAME, pod.spec.get("nodeName") or "")], Status.success()

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> NodeName:
        return cls()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: Node/Add only (no hint: always Queue, as upstream)."""
        return [ClusterEventWithHint(EVENT_NODE_ADD)]

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (batch form; None: all pass)."""
        if not pod.node_name:
            return None
        return [self.filter(state, pod, ni) for ni in nodes]

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        want = pod.node_name
        if not want or want == node_info.name:
            return Status.success()
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON], NAME)
