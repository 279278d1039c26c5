"""The ports a scheduling cycle works through, and their two implementations.

:class:`ClusterState` is the cluster one cycle sees and assumes Pods in: :class:`CacheState` (live: the
scheduler cache, upstream's ``internalcache.Cache`` with ``AssumePod`` / ``ForgetPod`` /
``UpdateSnapshot``) or :class:`SnapshotState` (offline: a :class:`Snapshot` alone, assumed in place).
:class:`Nominations` is the queue's nominator (``DeleteNominatedPodIfExists`` on assume, the nomination
given back on revert); offline there is none. :class:`PodGroupSource` is what the core needs of the
profile's GangScheduling plugin (the PodGroup objects).
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

from py_scheduler.cache.cache import Cache, CacheError
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import PodInfo

log = logging.getLogger("py_scheduler.core")


class ClusterState(Protocol):
    """The cluster one cycle sees (``snapshot``) and assumes Pods in."""

    @property
    def snapshot(self) -> Snapshot: ...

    def refresh(self) -> None:
        """Bring ``snapshot`` up to date with what was assumed / forgotten. Raises CacheError."""

    def assume(self, pod: PodInfo) -> None:
        """Account ``pod`` (``spec.nodeName`` set) on its node. Raises CacheError (or KeyError offline)."""

    def forget(self, pod: PodInfo) -> bool:
        """Undo :meth:`assume`; False when the state refused (the Pod was no longer assumed)."""


class Nominations(Protocol):
    """The queue's nominator as the core uses it (``PriorityQueue``)."""

    def nominated_node_of(self, uid: str) -> str | None: ...

    def add_nominated_pod(self, pod_info: PodInfo, nominated_node: str | None = None) -> None: ...

    def delete_nominated_pod_if_exists(self, pod: Obj) -> None: ...


@runtime_checkable
class PodGroupSource(Protocol):
    """GangScheduling as the core sees it: its name (a rejector of a group that does not fit), the
    PodGroup objects by namespace / name, and the group's condition the live loop writes."""

    name: str

    def pod_group(self, namespace: str, name: str) -> Obj | None: ...

    def scheduled_pods(self, namespace: str, name: str) -> list[Obj]:
        """The group's members assumed or bound now (``PodGroupState.ScheduledPods``)."""

    def write_condition(self, namespace: str, name: str, status: str, reason: str, message: str) -> None:
        """Write the group's ``PodGroupInitiallyScheduled`` condition (``updatePodGroupCondition``)."""


class CacheState:
    """:class:`ClusterState` on the live scheduler cache and the loop's Snapshot."""

    def __init__(self, cache: Cache, snapshot: Snapshot) -> None:
        self.cache = cache
        self._snapshot = snapshot

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def refresh(self) -> None:
        self.cache.update_snapshot(self._snapshot)

    def assume(self, pod: PodInfo) -> None:
        self.cache.assume_pod(pod)

    def forget(self, pod: PodInfo) -> bool:
        try:
            self.cache.forget_pod(pod)
        except CacheError as exc:
            log.error("ForgetPod failed: %s", exc)
            return False
        return True


class SnapshotState:
    """:class:`ClusterState` on a Snapshot alone (offline): assumed in place, always up to date."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def refresh(self) -> None:
        return None

    def assume(self, pod: PodInfo) -> None:
        self._snapshot.assume(pod, pod.node_name or "")

    def forget(self, pod: PodInfo) -> bool:
        return self._snapshot.forget(pod)
