"""NodePorts: a Pod's host ports must be free on the node.

Upstream: ``pkg/scheduler/framework/plugins/nodeports/node_ports.go`` (PreFilter collects the host
ports of containers and restartable init containers, ``util.GetHostPorts``, and returns Skip when
there are none; Filter checks each against the node's used ports, ``HostPortInfo.CheckConflict``:
``0.0.0.0`` conflicts with every address, an empty protocol is TCP). The Filter reason is
``node(s) didn't have free ports for the requested pod ports`` (Unschedulable: preemption can free
a port).

EventsToRegister (upstream ``EventsToRegister``): an assigned Pod deleted (hint
``isSchedulableAfterAssignedPodDeleted``: Skip when the deleted Pod had neither a node nor a
nomination, or uses no host port the rejected Pod wants; Queue otherwise) and a Node added (no
hint: always Queue). Pod updates are not registered (container ports are immutable). A malformed
Pod: Queue (upstream's error path).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    ClusterEventWithHint,
    QueueingHint,
)
from py_scheduler.framework.interfaces import PreFilterResult
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import Code, CycleState, HostPortInfo, NodeInfo, PodInfo, Status, host_ports
from py_scheduler.plugins.helpers import NoArgs

__all__ = ["ERR_REASON", "NAME", "PRE_FILTER_STATE_KEY", "NodePorts", "fits_ports"]

NAME = "NodePorts"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"


def fits_ports(want: Iterable[tuple[str, str, int]], in_use: HostPortInfo) -> bool:
    """``fitsPorts``: True when none of ``want`` (hostIP, protocol, hostPort) conflicts with
    ``in_use``."""
    return not any(in_use.check_conflict(ip, proto, port) for ip, proto, port in want)


class _PreFilterState(tuple[tuple[str, str, int], ...]):
    """``preFilterState``: the Pod's (hostIP, protocol, hostPort) list; immutable."""

    __slots__ = ()

    def clone(self) -> _PreFilterState:
        return self


class NodePorts(NoArgs):
    """PreFilter / Filter plugin (``nodeports.NodePorts``); state key ``PreFilterNodePorts``."""

    name = NAME


    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/nodeports/node_ports.go``): the Pod's host
        ports. ``snapshot`` is unused by most plugins."""
        return [(signers.HOST_PORTS_SIGNER_NAME, signers.host_ports_signer(pod))], Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` (see the module docstring)."""
        return [ClusterEventWithHint(EVENT_ASSIGNED_POD_DELETE, schedulable_after_assigned_pod_deleted),
                ClusterEventWithHint(EVENT_NODE_ADD)]

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """Skip when the Pod uses no host port; otherwise store its host ports."""
        if not pod.ports:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(pod.ports))
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """Unschedulable with :data:`ERR_REASON` when a wanted host port is taken; Error when
        PreFilter did not run."""
        try:
            want: _PreFilterState = state.read(PRE_FILTER_STATE_KEY)
        except KeyError:
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        if fits_ports(want, node_info.used_ports):
            return Status.success()
        return Status(Code.UNSCHEDULABLE, [ERR_REASON], NAME)


def schedulable_after_assigned_pod_deleted(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterAssignedPodDeleted``: Skip when the deleted Pod ``old`` had neither
    ``spec.nodeName`` nor ``status.nominatedNodeName``, uses no host port, or none of its host ports
    conflicts with one ``pod`` wants; Queue otherwise, and when either Pod is malformed."""
    if not isinstance(old, dict):
        return QueueingHint.QUEUE
    try:
        spec, status = old.get("spec") or {}, old.get("status") or {}
        if not spec.get("nodeName") and not status.get("nominatedNodeName"):
            return QueueingHint.QUEUE_SKIP
        ports = host_ports(old)
        if not ports:
            return QueueingHint.QUEUE_SKIP
        in_use = HostPortInfo()
        for ip, proto, port in ports:
            in_use.add(ip, proto, port)
        wanted = host_ports(pod)
    except Exception:  # malformed Pod: upstream's error path requeues
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP if fits_ports(wanted, in_use) else QueueingHint.QUEUE
