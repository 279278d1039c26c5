"""The nominator: node name -> the pending Pods nominated to it (upstream:
``pkg/scheduler/backend/queue/nominator.go``).

A Pod's nomination is its ``status.nominatedNodeName``, or one the scheduling loop made after
preemption (``ModeOverride``); kept on the queue's Add / Update / Delete and by the loop.
:class:`Nominator` is the part of the queue that holds it (embedded in ``PriorityQueue`` as upstream
embeds ``*nominator``); :class:`NominatedPods` is that index as the runtime's ``Nominator`` mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import PodInfo

log = logging.getLogger("py_scheduler.queue")


PodLister = Callable[[str, str], Obj | None]
"""``(namespace, name) -> Pod | None``: the informer's view of a Pod (upstream's ``podLister``)."""


def nominated_node_name(pod: Obj) -> str:
    """``status.nominatedNodeName`` of ``pod`` ("" when unset or not a string)."""
    status = pod.get("status")
    nnn = status.get("nominatedNodeName") if isinstance(status, dict) else None
    return nnn if isinstance(nnn, str) else ""


def pod_ident(pod: Obj) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or ""), str(meta.get("uid") or "")


class NominatedPods(Mapping[str, Sequence[PodInfo]]):
    """The queue's nominator seen as the runtime's ``Nominator`` (node name -> PodInfos nominated
    there, in nomination order). Read-only and live: each lookup resolves the nominated Pods to their
    current queued PodInfos (``PriorityQueue.NominatedPodsForNode``). ``len`` is the number of nodes
    with nominations, so an empty nominator is falsy and Filter takes its no-nominated-Pods path."""

    __slots__ = ("_queue",)

    def __init__(self, queue: Nominator) -> None:
        self._queue = queue

    def __getitem__(self, node_name: str) -> Sequence[PodInfo]:
        pods = self._queue.nominated_pods_for_node(node_name)
        if not pods:
            raise KeyError(node_name)
        return pods

    def get(self, node_name: str, default: Any = None) -> Any:  # Mapping.get without the KeyError round trip
        pods = self._queue.nominated_pods_for_node(node_name)
        return pods if pods else default

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._queue._nominated_pods))

    def __len__(self) -> int:
        return len(self._queue._nominated_pods)

    def __contains__(self, node_name: object) -> bool:
        return node_name in self._queue._nominated_pods


class Nominator:
    """``nominator``: ``nominatedPods`` (node -> ``(namespace, name, uid)`` in nomination order) and
    ``nominatedPodToNode`` (uid -> node). ``pod_lister``: the informer's Pods, asked before
    nominating a Pod (a Pod gone or already bound is not nominated); None: no check (tests, offline)."""

    def __init__(self, pod_lister: PodLister | None) -> None:
        self.pod_lister: PodLister | None = pod_lister
        self._nominated_pods: dict[str, list[tuple[str, str, str]]] = {}
        self._nominated_pod_to_node: dict[str, str] = {}
        self._nominator_view = NominatedPods(self)

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        """``NominatedPodsForNode``: the queue resolves the nominated Pods to their PodInfos."""
        raise NotImplementedError

    @property
    def nominator(self) -> NominatedPods:
        """The nominated Pods per node as the runtime's ``Nominator`` mapping (a live view)."""
        return self._nominator_view

    def add_nominated_pod(self, pod_info: PodInfo, nominated_node: str | None = None) -> None:
        """``AddNominatedPod``: (re)nominate a Pod, replacing any earlier nomination of its UID.

        ``nominated_node`` None is ``ModeNoop`` (the Pod's own ``status.nominatedNodeName``); a
        string is ``ModeOverride`` ("" clears the nomination). A Pod the lister does not know or
        sees bound is not nominated.
        """
        pod = pod_info.pod
        ns, name, uid = pod_ident(pod)
        self._delete_nominated(uid)
        node = nominated_node if nominated_node is not None else nominated_node_name(pod)
        if not node:
            return
        if self.pod_lister is not None:
            current = self.pod_lister(ns, name)
            if current is None:
                log.debug("Pod doesn't exist in podLister, aborted adding it to the nominator pod=%s/%s", ns, name)
                return
            if (current.get("spec") or {}).get("nodeName"):
                log.debug("Pod is already scheduled to a node, aborted adding it to the nominator pod=%s/%s node=%s",
                          ns, name, (current.get("spec") or {}).get("nodeName"))
                return
        self._nominated_pod_to_node[uid] = node
        refs = self._nominated_pods.setdefault(node, [])
        if any(r[2] == uid for r in refs):
            return
        refs.append((ns, name, uid))

    def update_nominated_pod(self, old_pod: Obj, new_pod_info: PodInfo) -> None:
        """``UpdateNominatedPod``: follow a Pod update. When neither version carries a
        ``nominatedNodeName`` but the nominator holds one for the Pod (set by the loop, the status
        write not seen yet), that nomination is kept; otherwise the new version's applies."""
        override: str | None = None
        old_uid = pod_ident(old_pod)[2]
        if not nominated_node_name(old_pod) and not nominated_node_name(new_pod_info.pod):
            override = self._nominated_pod_to_node.get(old_uid)
        self._delete_nominated(old_uid)
        self.add_nominated_pod(new_pod_info, override)

    def delete_nominated_pod_if_exists(self, pod: Obj) -> None:
        """``DeleteNominatedPodIfExists``: forget the Pod's nomination (assumed, bound or deleted)."""
        self._delete_nominated(pod_ident(pod)[2])

    def _delete_nominated(self, uid: str) -> None:
        node = self._nominated_pod_to_node.pop(uid, None)
        if node is None:
            return
        refs = self._nominated_pods.get(node)
        if refs is None:
            return
        for i, r in enumerate(refs):
            if r[2] == uid:
                del refs[i]
                break
        if not refs:
            del self._nominated_pods[node]

    def nominated_node_of(self, uid: str) -> str | None:
        """The node the Pod with ``uid`` is nominated to, or None."""
        return self._nominated_pod_to_node.get(uid)

