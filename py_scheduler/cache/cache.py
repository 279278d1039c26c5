"""The scheduler cache: NodeInfos kept current from the informers, assumed Pods, snapshots.

Upstream: ``pkg/scheduler/backend/cache/cache.go`` (``cacheImpl``: ``AddNode`` / ``UpdateNode`` /
``RemoveNode`` with a node-less NodeInfo kept while Pods remain, ``AddPod`` confirming an assumed
Pod, ``UpdatePod``, ``RemovePod``, ``AssumePod``, ``ForgetPod``, ``RemoveAssumedPod``,
``UpdateSnapshot``: only NodeInfos whose generation is newer than the snapshot's are cloned, most
recently changed first, the NodeInfo objects of the snapshot keep their identity, lists are rebuilt
only when nodes come or go or a node's affinity-Pod status flips; the snapshot's numpy node columns
are refreshed for each cloned NodeInfo and rebuilt lazily when the node list changes) and ``node_tree.go`` (zone
round-robin order).

Assumed-Pod expiry: v1.37 has none (``durationToExpireAssumedPod`` and ``cleanupAssumedPods`` were
removed; an assumed Pod leaves the cache when its binding is confirmed by the watch, forgotten on a
bind failure, or removed when the Pod is deleted). py-scheduler keeps a safety TTL,
:data:`DEFAULT_ASSUMED_POD_TTL` (15 minutes) counted from :meth:`Cache.finish_binding`, so a
binding whose watch event is lost cannot hold resources forever; ``assumed_pod_ttl=0`` disables it.

The cache is not thread-safe: the live process calls it from its single asyncio event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from py_scheduler.cache.snapshot import (
    ClusterObjects,
    Snapshot,
    add_image_states,
    node_tree_order,
    remove_image_states,
    zone_key,
)
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import ImageStateSummary, NodeInfo, PodInfo, next_generation

log = logging.getLogger("py_scheduler.cache")


DEFAULT_ASSUMED_POD_TTL = 15 * 60.0
"""Seconds an assumed Pod whose binding finished may wait for its watch confirmation (safety net;
upstream v1.37 has no expiry)."""

__all__ = ["DEFAULT_ASSUMED_POD_TTL", "Cache", "CacheError", "NodeTree", "pod_key"]


class CacheError(RuntimeError):
    """An operation that contradicts the cache state (assume twice, forget a Pod not assumed...)."""


def pod_key(pod: Obj | PodInfo) -> str:
    """``framework.GetPodKey``: the Pod's UID (``namespace/name`` for a Pod without UID)."""
    if isinstance(pod, PodInfo):
        return pod.uid or pod.key
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    return str(uid) if uid else f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _node_name(pod: Obj | PodInfo) -> str:
    if isinstance(pod, PodInfo):
        return pod.node_name
    return str((pod.get("spec") or {}).get("nodeName") or "")


class NodeTree:
    """``nodeTree``: node names per zone; :meth:`list` interleaves zones round-robin."""

    def __init__(self) -> None:
        # zone -> its node names in insertion order (a dict: membership and removal in O(1), where
        # upstream scans a slice; 15000 names in one zone made the initial sync quadratic)
        self.tree: dict[str, dict[str, None]] = {}
        self.zones: list[str] = []
        self.num_nodes = 0

    def add(self, node: Obj) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        zone = zone_key(node)
        names = self.tree.get(zone)
        if names is not None:
            if name in names:
                return
            names[name] = None
        else:
            self.zones.append(zone)
            self.tree[zone] = {name: None}
        self.num_nodes += 1

    def remove(self, node: Obj) -> bool:
        name = str((node.get("metadata") or {}).get("name") or "")
        zone = zone_key(node)
        names = self.tree.get(zone)
        if names is None or name not in names:
            log.error("Did not remove Node in NodeTree because it was not found node=%s zone=%r", name, zone)
            return False
        del names[name]
        if not names:
            del self.tree[zone]
            self.zones.remove(zone)
        self.num_nodes -= 1
        return True

    def update(self, old: Obj | None, new: Obj) -> None:
        old_zone = zone_key(old) if old is not None else ""
        if old is not None and old_zone == zone_key(new):
            return
        if old is not None:
            self.remove(old)
        self.add(new)

    def list(self) -> list[str]:
        return node_tree_order((name, zone) for zone in self.zones for name in self.tree[zone])


@dataclass(slots=True)
class _PodState:
    pod_info: PodInfo
    deadline: float | None = None
    binding_finished: bool = False


class Cache:
    """Live cluster state for scheduling cycles.

    Args:
        now: monotonic clock in seconds (injectable for tests).
        assumed_pod_ttl: seconds after :meth:`finish_binding` before an unconfirmed assumed Pod is
            dropped by :meth:`cleanup_assumed_pods` (0 disables).
        objects: the ClusterObjects (Services, ReplicaSets, ...) the informers keep; snapshots share it.

    Pods are keyed by UID. Node, Pod and other objects are Kubernetes JSON dicts.
    """

    def __init__(self, *, now: Callable[[], float] = time.monotonic,
                 assumed_pod_ttl: float = DEFAULT_ASSUMED_POD_TTL, objects: ClusterObjects | None = None) -> None:
        self._now = now
        self.assumed_pod_ttl = assumed_pod_ttl
        self.objects = objects if objects is not None else ClusterObjects()
        # Insertion order = recency: a changed NodeInfo is moved to the end ("head" upstream).
        self._nodes: dict[str, NodeInfo] = {}
        self._tree = NodeTree()
        self._pod_states: dict[str, _PodState] = {}
        self._assumed: set[str] = set()
        self._images: dict[str, ImageStateSummary] = {}
        self.malformed_pods = 0
        """Bound Pods skipped because a field could not be parsed (logged)."""

    # -- helpers -----------------------------------------------------------------------------------
    def _touch(self, name: str) -> None:
        ni = self._nodes.pop(name, None)
        if ni is not None:
            self._nodes[name] = ni

    def _set_node(self, ni: NodeInfo, node: Obj) -> None:
        try:
            ni.set_node(node)
        except PodParseError as err:
            log.error("Node %s has a malformed allocatable (%s); treating it as having no allocatable resources",
                      ni.name, err)
        add_image_states(ni, self._images)

    # -- nodes ---------------------------------------------------------------------------------------
    def add_node(self, node: Obj) -> None:
        """``AddNode`` (also used for a Node seen again after a re-list)."""
        name = str((node.get("metadata") or {}).get("name") or "")
        ni = self._nodes.get(name)
        if ni is None:
            ni = self._nodes[name] = NodeInfo()
        else:
            remove_image_states(ni, self._images)
        self._touch(name)
        if ni.node is not None:
            self._tree.update(ni.node, node)
        else:
            self._tree.add(node)
        self._set_node(ni, node)

    def update_node(self, old: Obj | None, new: Obj) -> None:
        """``UpdateNode``: a changed Node (zone changes move it in the node tree)."""
        name = str((new.get("metadata") or {}).get("name") or "")
        ni = self._nodes.get(name)
        if ni is None:
            ni = self._nodes[name] = NodeInfo()
            self._tree.add(new)
        else:
            remove_image_states(ni, self._images)
            self._tree.update(ni.node if ni.node is not None else old, new)
        self._touch(name)
        self._set_node(ni, new)

    def remove_node(self, node: Obj) -> None:
        """``RemoveNode``: the Node leaves the tree; its NodeInfo stays node-less while Pods remain
        (their delete events may come later on the Pod watch)."""
        name = str((node.get("metadata") or {}).get("name") or "")
        ni = self._nodes.get(name)
        if ni is None:
            log.error("node %s is not found", name)
            return
        cached = ni.node if ni.node is not None else node
        remove_image_states(ni, self._images)
        ni.image_states = {}
        ni.node = None
        ni.generation = next_generation()
        if not ni.pods:
            del self._nodes[name]
        else:
            self._touch(name)
        self._tree.remove(cached)

    # -- pods ----------------------------------------------------------------------------------------
    def _add(self, pi: PodInfo, assumed: bool) -> None:
        node = pi.node_name
        ni = self._nodes.get(node)
        if ni is None:
            ni = self._nodes[node] = NodeInfo()
            ni.name = node
        ni.add_pod(pi)
        self._touch(node)
        key = pod_key(pi)
        self._pod_states[key] = _PodState(pi)
        if assumed:
            self._assumed.add(key)

    def _remove(self, state: _PodState) -> None:
        pi = state.pod_info
        node = pi.node_name
        ni = self._nodes.get(node)
        if ni is None:
            log.error("Node not found when trying to remove pod node=%s pod=%s", node, pi.key)
        else:
            ni.remove_pod(pi.uid)
            if not ni.pods and ni.node is None:
                del self._nodes[node]
            else:
                self._touch(node)
        key = pod_key(pi)
        self._pod_states.pop(key, None)
        self._assumed.discard(key)

    def _parse(self, pod: Obj, prev: PodInfo | None = None) -> PodInfo | None:
        """``pod`` parsed (None, logged and counted, when malformed). With ``prev``, the cached
        PodInfo of an earlier version of the same Pod, its parse is reused when nothing it was parsed
        from changed (``PodInfo.reparse``: e.g. the watch's bound version of an assumed Pod, whose
        spec differs only in ``nodeName`` already set when it was assumed)."""
        try:
            return PodInfo(pod) if prev is None else prev.reparse(pod)
        except PodParseError as err:
            self.malformed_pods += 1
            meta = pod.get("metadata") or {}
            log.error("Skipping bound pod %s/%s in the cache: %s", meta.get("namespace"), meta.get("name"), err)
            return None

    def add_pod(self, pod: Obj) -> None:
        """``AddPod``: a bound Pod seen by the watch; confirms it if it was assumed (the watch's
        version replaces the assumed one, also when it landed on another node)."""
        key = pod_key(pod)
        state = self._pod_states.get(key)
        if state is not None and key in self._assumed:
            pi = self._parse(pod, state.pod_info)
            self._remove(state)
            if pi is not None:
                self._add(pi, assumed=False)
            if state.pod_info.node_name != _node_name(pod):
                log.info("Pod was added to a different node than it was assumed pod=%s assumedNode=%s currentNode=%s",
                         state.pod_info.key, state.pod_info.node_name, _node_name(pod))
            return
        if state is not None:
            log.debug("pod %s was already in added state; updating it", state.pod_info.key)
            self.update_pod(state.pod_info.pod, pod)
            return
        pi = self._parse(pod)
        if pi is not None:
            self._add(pi, assumed=False)

    def update_pod(self, old: Obj | None, new: Obj) -> None:
        """``UpdatePod``: a bound Pod changed (resources, labels, node...)."""
        key = pod_key(new)
        state = self._pod_states.get(key)
        if state is None:
            self.add_pod(new)
            return
        if key in self._assumed:
            log.error("assumed pod %s should not be updated", state.pod_info.key)
            return
        if state.pod_info.node_name != _node_name(new):
            log.error("Pod %s updated on a different node (%s -> %s) than previously added to",
                      state.pod_info.key, state.pod_info.node_name, _node_name(new))
        pi = self._parse(new, state.pod_info)
        self._remove(state)
        if pi is not None:
            self._add(pi, assumed=False)

    def remove_pod(self, pod: Obj) -> None:
        """``RemovePod``: a bound Pod deleted (or terminal); the cached version is removed."""
        state = self._pod_states.get(pod_key(pod))
        if state is None:
            meta = pod.get("metadata") or {}
            log.debug("pod %s/%s is not found in scheduler cache, so cannot be removed from it",
                      meta.get("namespace"), meta.get("name"))
            return
        self._remove(state)

    def assume_pod(self, pod: PodInfo) -> None:
        """``AssumePod``: account ``pod`` (whose ``spec.nodeName`` is set) before it is bound.

        Raises:
            CacheError: the Pod is already in the cache.
        """
        key = pod_key(pod)
        if key in self._pod_states:
            raise CacheError(f"pod {pod.key}({key}) is in the cache, so can't be assumed")
        if not pod.node_name:
            raise CacheError(f"pod {pod.key} has no spec.nodeName, so can't be assumed")
        self._add(pod, assumed=True)

    def finish_binding(self, pod: PodInfo) -> None:
        """The Binding was accepted: start the safety expiry of the assumed Pod."""
        state = self._pod_states.get(pod_key(pod))
        if state is not None and pod_key(pod) in self._assumed:
            state.binding_finished = True
            if self.assumed_pod_ttl > 0:
                state.deadline = self._now() + self.assumed_pod_ttl

    def _validate_assumed(self, pod: PodInfo, state: _PodState) -> None:
        if state.pod_info.node_name != pod.node_name:
            raise CacheError(f"pod {pod.key} was assumed on {pod.node_name} but assigned to "
                             f"{state.pod_info.node_name}")
        if pod_key(pod) not in self._assumed:
            raise CacheError(f"pod {pod.key} is not assumed, so it cannot be removed or forgotten")

    def forget_pod(self, pod: PodInfo) -> None:
        """``ForgetPod``: undo :meth:`assume_pod` (bind failed). A Pod no longer cached is fine.

        Raises:
            CacheError: the Pod is cached but not assumed, or assumed on another node.
        """
        state = self._pod_states.get(pod_key(pod))
        if state is None:
            return
        self._validate_assumed(pod, state)
        self._remove(state)

    remove_assumed_pod = forget_pod
    """``RemoveAssumedPod``: the assumed Pod was deleted from the cluster (same effect here)."""

    def is_assumed_pod(self, pod: Obj | PodInfo) -> bool:
        return pod_key(pod) in self._assumed

    def get_pod(self, pod: Obj | PodInfo) -> PodInfo | None:
        """``GetPod``: the cached PodInfo (its node may already be gone)."""
        state = self._pod_states.get(pod_key(pod))
        return state.pod_info if state is not None else None

    def cleanup_assumed_pods(self, now: float | None = None) -> list[PodInfo]:
        """Drop assumed Pods whose binding finished more than ``assumed_pod_ttl`` ago without the
        watch confirming it; returns them."""
        t = self._now() if now is None else now
        expired: list[PodInfo] = []
        for key in list(self._assumed):
            state = self._pod_states.get(key)
            if state is None:
                self._assumed.discard(key)
                continue
            if state.binding_finished and state.deadline is not None and t > state.deadline:
                log.warning("Pod expired pod=%s node=%s", state.pod_info.key, state.pod_info.node_name)
                self._remove(state)
                expired.append(state.pod_info)
        return expired

    # -- snapshot ------------------------------------------------------------------------------------
    def update_snapshot(self, snapshot: Snapshot) -> None:
        """``UpdateSnapshot``: bring ``snapshot`` up to date, cloning only NodeInfos changed since
        its generation. Node-less NodeInfos are left out; ``node_info_list`` follows the node tree.

        Raises:
            CacheError: the snapshot was inconsistent (it has been rebuilt; the caller's cycle fails
                as upstream's does).
        """
        snapshot.objects = self.objects
        snapshot.images = self._images
        gen = snapshot.generation
        update_all = False
        aff_changed = anti_changed = False
        pvc_delta: dict[str, int] = {}
        for name in reversed(self._nodes):
            ni = self._nodes[name]
            if ni.generation <= gen:
                break
            if ni.node is None:
                continue
            existing = snapshot.node_info_map.get(name)
            clone = ni.clone()
            if existing is None:
                update_all = True
                snapshot.node_info_map[name] = clone
                continue
            if bool(existing.pods_with_affinity) != bool(clone.pods_with_affinity):
                aff_changed = True
            if bool(existing.pods_with_required_anti_affinity) != bool(clone.pods_with_required_anti_affinity):
                anti_changed = True
            for k, v in existing.pvc_ref_counts.items():
                pvc_delta[k] = pvc_delta.get(k, 0) - v
            for k, v in clone.pvc_ref_counts.items():
                pvc_delta[k] = pvc_delta.get(k, 0) + v
            assign_node_info(existing, clone)
            snapshot.node_changed(existing)
        if self._nodes:
            snapshot.generation = max(snapshot.generation, next(reversed(self._nodes.values())).generation)
        if len(snapshot.node_info_map) > self._tree.num_nodes:
            for name in list(snapshot.node_info_map):
                cached = self._nodes.get(name)
                if cached is None or cached.node is None:
                    del snapshot.node_info_map[name]
            update_all = True
        if update_all:
            snapshot.node_info_list = [snapshot.node_info_map[n] for n in self._tree.list()
                                       if n in snapshot.node_info_map]
            snapshot.invalidate_derived()
            snapshot.rebuild_lists()
        else:
            for k, d in pvc_delta.items():
                v = snapshot.used_pvc_ref_counts.get(k, 0) + d
                if v > 0:
                    snapshot.used_pvc_ref_counts[k] = v
                else:
                    snapshot.used_pvc_ref_counts.pop(k, None)
            if aff_changed or anti_changed:
                snapshot.have_pods_with_affinity_list = [n for n in snapshot.node_info_list if n.pods_with_affinity]
                snapshot.have_pods_with_required_anti_affinity_list = [
                    n for n in snapshot.node_info_list if n.pods_with_required_anti_affinity]
        if len(snapshot.node_info_list) != self._tree.num_nodes:
            msg = (f"snapshot state is not consistent, length of NodeInfoList={len(snapshot.node_info_list)} not "
                   f"equal to length of nodes in tree={self._tree.num_nodes}, length of NodeInfoMap="
                   f"{len(snapshot.node_info_map)}, length of nodes in cache={len(self._nodes)}, trying to recover")
            log.error(msg)
            snapshot.node_info_map = {n: ni.clone() for n, ni in self._nodes.items() if ni.node is not None}
            snapshot.node_info_list = [snapshot.node_info_map[n] for n in self._tree.list()
                                       if n in snapshot.node_info_map]
            snapshot.invalidate_derived()
            snapshot.rebuild_lists()
            raise CacheError(msg)

    def snapshot(self) -> Snapshot:
        """A fresh full snapshot (tests, debugging)."""
        snap = Snapshot(self.objects)
        self.update_snapshot(snap)
        return snap

    # -- introspection ---------------------------------------------------------------------------------
    def node_count(self) -> int:
        """NodeInfos in the cache (node-less ones included), as ``scheduler_cache_size{type="nodes"}``."""
        return len(self._nodes)

    def pod_count(self) -> int:
        return len(self._pod_states)

    def assumed_count(self) -> int:
        return len(self._assumed)

    def has_node(self, name: str) -> bool:
        """Whether Node ``name`` exists (a node-less NodeInfo kept for its Pods does not count)."""
        ni = self._nodes.get(name)
        return ni is not None and ni.node is not None

    def node_names(self) -> list[str]:
        """Names of the Nodes in the tree, in node-tree order."""
        return self._tree.list()

    def node_info(self, name: str) -> NodeInfo | None:
        """The live NodeInfo (do not mutate); tests and debugging."""
        return self._nodes.get(name)

    def pod_states(self) -> list[tuple[PodInfo, bool, bool]]:
        """Every cached Pod as ``(PodInfo, assumed, binding_finished)`` (do not mutate the PodInfo);
        the debug dump of :mod:`py_scheduler.app.serving.cachedump`."""
        return [(st.pod_info, key in self._assumed, st.binding_finished) for key, st in self._pod_states.items()]


def assign_node_info(existing: NodeInfo, clone: NodeInfo) -> None:
    """``*existing = *clone``: keep the snapshot's NodeInfo object, take the clone's state, and bump its
    generation once (a change: what ``NodeInfo.__setattr__`` would do field by field)."""
    put = object.__setattr__
    for slot in NodeInfo.__slots__:
        put(existing, slot, getattr(clone, slot))
    put(existing, "generation", next_generation())
