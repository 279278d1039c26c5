"""NodeDeclaredFeatures: a Pod that needs a node-level feature goes only to nodes that declare it in
``status.declaredFeatures``.

Upstream: ``pkg/scheduler/framework/plugins/nodedeclaredfeatures/nodedeclaredfeatures.go`` (v1.37.2)
with ``staging/src/k8s.io/component-helpers/nodedeclaredfeatures/`` (``framework.go``:
``InferForPodScheduling``; ``featureset.go``: ``TryMap``; ``features/*``: the registry). The
``NodeDeclaredFeatures`` gate is GA and locked on in 1.37, so the plugin is always active.

Of the nine registered features, three can be required by a Pod at scheduling time (the others only
matter for in-place updates, which the scheduler does not handle):

* ``RestartAllContainersOnContainerExits``: a container or init container has a
  ``restartPolicyRules`` entry with ``action: RestartAllContainers``;
* ``UserNamespacesHostNetworkSupport``: ``hostNetwork: true`` with ``hostUsers: false``;
* ``VolumeBindMountOptions``: a container, init container or ephemeral container mount sets
  ``bindMountOptions``.

None of them has a MaxVersion, so the scheduler version does not matter.

PreFilter Skips when the Pod requires nothing; otherwise Filter rejects, UnschedulableAndUnresolvable
``node(s) didn't match Pod's required features``, every node whose declared features (mapped like
``TryMap``: unknown names ignored, the list read as sorted) lack a required one. A Pod spec too
malformed to evaluate gets UnschedulableAndUnresolvable from PreFilter, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.interfaces import PreFilterResult
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import NoArgs

NAME = "NodeDeclaredFeatures"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON_UNSATISFIED = "node(s) didn't match Pod's required features"

RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK = "UserNamespacesHostNetworkSupport"
VOLUME_BIND_MOUNT_OPTIONS = "VolumeBindMountOptions"

REGISTERED_FEATURES: tuple[str, ...] = tuple(sorted((
    RESTART_ALL_CONTAINERS,
    "InPlacePodLevelResourcesVerticalScaling",
    "ExtendWebSocketsToKubelet",
    "InPlacePodVerticalScalingInitContainers",
    "InPlacePodVerticalScalingMemoryBackedVolumes",
    USER_NAMESPACES_HOST_NETWORK,
    "DRANodeAllocatableResources",
    VOLUME_BIND_MOUNT_OPTIONS,
    "DRAOptionalNodeOperations",
)))
"""``features.AllFeatures`` names, sorted as ``ndf.New`` sorts them."""


@dataclass(slots=True)
class _PreFilterState:
    reqs: frozenset[str]


def _list(value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodParseError(field, value, "expected a list")
    return value


def _obj(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PodParseError(field, value, "expected an object")
    return value


def infer_for_pod_scheduling(spec: Mapping[str, Any]) -> frozenset[str]:
    """``Framework.InferForPodScheduling``: the registered features the Pod spec requires.

    Raises:
        PodParseError: a list / object the evaluation walks through is malformed (field named).
    """
    reqs: set[str] = set()
    # RestartAllContainersOnContainerExits
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(_list(spec.get(kind), f"spec.{kind}")):
            c = _obj(c, f"spec.{kind}[{i}]")
            for j, rule in enumerate(_list(c.get("restartPolicyRules"), f"spec.{kind}[{i}].restartPolicyRules")):
                rule = _obj(rule, f"spec.{kind}[{i}].restartPolicyRules[{j}]")
                if rule.get("action") == "RestartAllContainers":
                    reqs.add(RESTART_ALL_CONTAINERS)
    # UserNamespacesHostNetworkSupport: hostUsers must be explicitly false.
    if spec.get("hostNetwork") is True and spec.get("hostUsers") is False:
        reqs.add(USER_NAMESPACES_HOST_NETWORK)
    # VolumeBindMountOptions
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for i, c in enumerate(_list(spec.get(kind), f"spec.{kind}")):
            c = _obj(c, f"spec.{kind}[{i}]")
            for j, m in enumerate(_list(c.get("volumeMounts"), f"spec.{kind}[{i}].volumeMounts")):
                m = _obj(m, f"spec.{kind}[{i}].volumeMounts[{j}]")
                if _list(m.get("bindMountOptions"), f"spec.{kind}[{i}].volumeMounts[{j}].bindMountOptions"):
                    reqs.add(VOLUME_BIND_MOUNT_OPTIONS)
    return frozenset(reqs)


def node_declared_features(node: Mapping[str, Any] | None) -> frozenset[str]:
    """``FeatureMapper.TryMap(node.status.declaredFeatures)``: a merge walk of the node's list
    (expected sorted, as the kubelet publishes it) against the sorted registry, unknown names
    skipped. Non-string entries and a non-list value count as nothing declared."""
    if not node:
        return frozenset()
    declared = (node.get("status") or {}).get("declaredFeatures")
    if not isinstance(declared, list) or not declared:
        return frozenset()
    out: set[str] = set()
    i = j = 0
    reg = REGISTERED_FEATURES
    while i < len(declared) and j < len(reg):
        d = declared[i]
        if not isinstance(d, str):
            i += 1
            continue
        if d == reg[j]:
            out.add(d)
            i += 1
            j += 1
        elif d < reg[j]:
            i += 1
        else:
            j += 1
    return frozenset(out)


class NodeDeclaredFeatures(NoArgs):
    """PreFilter (infer the Pod's required features; Skip when none) and Filter (subset check)."""

    name = NAME


    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/nodedeclaredfeatures/nodedeclaredfeatures.go``):
        the features the Pod requires (``InferForPodScheduling``); a malformed spec gives an Error (no
        signature). ``snapshot`` is unused by most plugins."""
        try:
            fs = infer_for_pod_scheduling(pod.spec)
        except PodParseError as exc:
            return [], Status.error(str(exc))
        return [(signers.FEATURES_SIGNER_NAME, sorted(fs))], Status.success()

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """Skip when the Pod requires no declared feature; else store the requirements."""
        try:
            reqs = infer_for_pod_scheduling(pod.spec)
        except PodParseError as exc:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        if not reqs:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(reqs))
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """UnschedulableAndUnresolvable ``node(s) didn't match Pod's required features`` when the
        node does not declare every required feature; Error when PreFilter did not run."""
        try:
            s: _PreFilterState = state.read(PRE_FILTER_STATE_KEY)
        except KeyError:
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycle-state: not found', NAME)
        if s.reqs <= node_declared_features(node_info.node):
            return Status.success()
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_UNSATISFIED], NAME)

    # -- EnqueueExtensions (upstream ``EventsToRegister``, ``isSchedulableAfterNodeChange``,
    #    ``isSchedulableAfterTargetPodUpdate`` of nodedeclaredfeatures.go) ----------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: a Node added or its ``status.declaredFeatures`` updated, and the
        rejected Pod's own update (the gate is locked on, so always registered)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE,
                                              ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE),
                                 self._schedulable_after_node_change),
            ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD, ActionType.UPDATE),
                                 self._schedulable_after_target_pod_update),
        ]

    @staticmethod
    def _schedulable_after_node_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterNodeChange``: Skip an update whose ``status.declaredFeatures`` list is
        unchanged (compared as written, like ``slices.Equal``); Queue an add, a change, or a
        malformed Node."""
        if not isinstance(new, Mapping) or (old is not None and not isinstance(old, Mapping)):
            return QueueingHint.QUEUE
        if old is None:
            return QueueingHint.QUEUE
        o, n = old.get("status"), new.get("status")
        if not isinstance(o, Mapping | None) or not isinstance(n, Mapping | None):
            return QueueingHint.QUEUE
        same = ((o or {}).get("declaredFeatures") or []) == ((n or {}).get("declaredFeatures") or [])
        return QueueingHint.QUEUE_SKIP if same else QueueingHint.QUEUE

    @staticmethod
    def _schedulable_after_target_pod_update(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterTargetPodUpdate``: Skip when the features the Pod requires
        (:func:`infer_for_pod_scheduling`) are unchanged; Queue when they changed or either spec
        cannot be evaluated (upstream's error path)."""
        if not isinstance(old, Mapping) or not isinstance(new, Mapping):
            return QueueingHint.QUEUE
        try:
            before = infer_for_pod_scheduling(_obj(old.get("spec") or {}, "spec"))
            after = infer_for_pod_scheduling(_obj(new.get("spec") or {}, "spec"))
        except PodParseError:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP if before == after else QueueingHint.QUEUE
