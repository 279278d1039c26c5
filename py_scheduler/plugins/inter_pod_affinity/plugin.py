"""The InterPodAffinity plugin (upstream ``pkg/scheduler/framework/plugins/interpodaffinity/plugin.go``:
args, ``EventsToRegister``, ``SignPod``; ``apis/config/validation/validation_pluginargs.go``
``ValidateInterPodAffinityArgs``); Filter in :mod:`.filtering`, Score in :mod:`.scoring`."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import PodInfo, Status
from py_scheduler.plugins.helpers.queueing_hints import (
    inter_pod_affinity_after_assigned_pod_change,
    inter_pod_affinity_after_node_change,
)
from py_scheduler.plugins.inter_pod_affinity.common import (
    _MAX_HARD_WEIGHT,
    _MIN_HARD_WEIGHT,
    NAME,
    AffinityTerm,
    pod_affinity_terms,
)
from py_scheduler.plugins.inter_pod_affinity.filtering import Filtering
from py_scheduler.plugins.inter_pod_affinity.index import AffinityIndex
from py_scheduler.plugins.inter_pod_affinity.scoring import Scoring

# -- the plugin -----------------------------------------------------------------------------------


class InterPodAffinity(Filtering, Scoring):
    """PreFilter / Filter, PreFilterExtensions and PreScore / Score / NormalizeScore.

    Args (``pluginConfig.args``): ``hardPodAffinityWeight`` (0-100, default 1): the score weight
    of an existing Pod's *required* affinity term the incoming Pod matches;
    ``ignorePreferredTermsOfExistingPods`` (default false): skip scoring when the incoming Pod has
    no preferred terms.
    """

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/interpodaffinity/plugin.go``): refuses Pods with
        podAffinity / podAntiAffinity; otherwise the Pod's labels (none with
        ``ignorePreferredTermsOfExistingPods``). ``snapshot`` is unused by most plugins."""
        aff = pod.spec.get("affinity")
        if isinstance(aff, dict) and (aff.get("podAffinity") is not None or aff.get("podAntiAffinity") is not None):
            return signers.cannot_sign("pods with InterPodAffinity are not signable")
        if self.ignore_preferred_terms_of_existing_pods:
            return [], Status.success()
        return [(signers.LABELS_SIGNER_NAME, (pod.pod.get("metadata") or {}).get("labels"))], Status.success()


    def __init__(self, hard_pod_affinity_weight: int = 1, ignore_preferred_terms_of_existing_pods: bool = False,
                 ) -> None:
        self.hard_pod_affinity_weight = hard_pod_affinity_weight
        self.ignore_preferred_terms_of_existing_pods = ignore_preferred_terms_of_existing_pods
        self._indexes: list[AffinityIndex] = []  # most recently used first, at most _MAX_INDEXES

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> InterPodAffinity:
        """Build from ``pluginConfig.args`` (v1 defaults applied, then ``ValidateInterPodAffinityArgs``).

        Raises:
            ConfigError: unknown field, ``hardPodAffinityWeight`` not an integer in [0, 100],
            ``ignorePreferredTermsOfExistingPods`` not a boolean.
        """
        args = args or {}
        if not isinstance(args, Mapping):
            raise ConfigError(f"args: Invalid value: {args!r}: expected an object")
        for k in args:
            if k not in ("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods", "apiVersion", "kind"):
                raise ConfigError(f"{k}: unknown field")
        w = args.get("hardPodAffinityWeight")
        if w is None:
            w = 1
        if not isinstance(w, int) or isinstance(w, bool):
            raise ConfigError(f"hardPodAffinityWeight: Invalid value: {w!r}: expected an integer")
        if w < _MIN_HARD_WEIGHT or w > _MAX_HARD_WEIGHT:
            raise ConfigError(f"hardPodAffinityWeight: Invalid value: {w}: not in valid range "
                              f"[{_MIN_HARD_WEIGHT}, {_MAX_HARD_WEIGHT}]")
        ignore = args.get("ignorePreferredTermsOfExistingPods")
        if ignore is None:
            ignore = False
        if not isinstance(ignore, bool):
            raise ConfigError(f"ignorePreferredTermsOfExistingPods: Invalid value: {ignore!r}: expected a boolean")
        return cls(w, ignore)

    # -- EnqueueExtensions (self-contained; hints in helpers/queueing_hints.py) ---------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` (``interpodaffinity/plugin.go``, QueueingHints on): an assigned Pod
        added, relabelled or deleted, and a Node added or relabelled, with upstream's hints
        (:mod:`py_scheduler.plugins.helpers.queueing_hints`); the rejected Pod relabelled (always
        Queue)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD,
                                              ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
                                 partial(inter_pod_affinity_after_assigned_pod_change, _hint_terms)),
            ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD, ActionType.UPDATE_POD_LABEL)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                                 partial(inter_pod_affinity_after_node_change, _hint_terms)),
        ]


def _hint_terms(pod: PodInfo) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]] | None:
    """The Pod's required (affinity, anti-affinity) terms for the queueing hints; None (the hints
    Queue) when any of its affinity terms has a parse error (upstream errors only for the required
    ones: a superset)."""
    t = pod_affinity_terms(pod)
    if t.errors:
        return None
    return t.required_affinity, t.required_anti_affinity
