"""A Pod in the scheduling queue (upstream: ``QueuedPodInfo`` / ``QueueingParams`` in
``pkg/scheduler/framework/types.go``), and the parse that makes one from an API Pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import ClusterEvent
from py_scheduler.framework.interfaces import QueuedPodInfo as _BaseQueuedPodInfo
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import PodInfo


@dataclass(slots=True)
class QueuedPodInfo(_BaseQueuedPodInfo):
    """A Pod in the queue with upstream's ``QueueingParams``.

    Times are seconds of the queue's clock. ``attempts`` counts pops; ``unschedulable_count`` the
    rejections by plugins and ``consecutive_errors_count`` the internal errors in a row (either one
    drives the backoff). ``parse_error`` is set when the Pod's fields could not be parsed: the loop
    fails it with that message without running a cycle.
    """

    unschedulable_count: int = 0
    consecutive_errors_count: int = 0
    pending_plugins: frozenset[str] = frozenset()
    gating_plugin: str = ""
    gating_plugin_events: list[ClusterEvent] = field(default_factory=list)
    backoff_expiration: float | None = None
    initial_attempt_set: bool = False
    flush_timestamp: float | None = None
    was_flushed_from_unschedulable: bool = False
    parse_error: PodParseError | None = None

    @property
    def key(self) -> str:
        return self.pod_info.key

    @property
    def uid(self) -> str:
        return self.pod_info.uid

    @property
    def pod(self) -> Obj:
        return self.pod_info.pod

    @property
    def gated(self) -> bool:
        return bool(self.gating_plugin)

    def rejector_plugins(self) -> frozenset[str]:
        return self.unschedulable_plugins | self.pending_plugins


def parse_pod(pod: Obj) -> tuple[PodInfo, PodParseError | None]:
    """A PodInfo for ``pod``; when a field is malformed, a PodInfo of the Pod without its resource
    fields (so it can still be queued and ordered) plus the :class:`PodParseError`."""
    try:
        return PodInfo(pod), None
    except PodParseError as err:
        spec = dict(pod.get("spec") or {})
        for k in ("containers", "initContainers", "overhead", "resources"):
            spec.pop(k, None)
        pi = PodInfo({**pod, "spec": spec, "status": {}})
        pi.pod = pod
        return pi, err
