"""Informers: watch streams (the Pod reflector, kopf for the other kinds) -> object store -> scheduler
cache and queue.

Upstream: ``pkg/scheduler/eventhandlers.go`` (``addAllEventHandlers``: bound Pods to the cache,
unbound Pods that name one of our profiles to the queue, Pods that become bound leave the queue,
Nodes to the cache; every change offered to the queue as a cluster event; assumed Pods deleted
while binding are released) and ``pkg/scheduler/scheduler.go`` (the Pod informer excludes
``status.phase`` Succeeded/Failed with a field selector; managed fields are stripped).

The Pods - the one high-volume stream - come through a :class:`~py_scheduler.app.reflector.Reflector`
(client-go's ``reflector.go``: paged LIST, then WATCH with bookmarks from its resourceVersion, a
re-LIST after ``410 Gone``); its first LIST is the Pod kind's initial sync and every event goes
straight to :class:`ObjectStore` and :class:`EventHandlers`. Measured on the e2e test bed (2 shared
cores, 3000 Pods created then deleted by another process, the handler included):
0.17 ms CPU per Pod event against 0.6-0.8 ms through kopf, and 0.12-0.15 s of CPU against 1.1-1.6 s
for the start-up sync of 3000 Pods (kopf listed every Pod a second time beside our LIST, with a
worker task and queue per object; bench/RESULTS.md, issue 9).

kopf stays the controller runtime of the other (low-volume) kinds: one ``@kopf.on.event`` handler
per kind, in a private ``OperatorRegistry``, run embedded in our event loop (see
``py_scheduler.app.main``), with peering off (``standalone``), no k8s-event posting, no change handlers
(so kopf never patches an object: it would need annotations/finalizers only for change handlers),
CRD/namespace scanning off and login through our own kubeconfig (:func:`build_registry`).

Consistency: kopf gives the new object of each event but no relist signal and no "old" object, so
:class:`ObjectStore` keeps the last object per key and turns events into (old, new) deltas,
dropping events older than what it holds (resourceVersions of one resource are etcd revisions and
compare as integers) and remembering deletions for a while (tombstones), so a late listing event
cannot resurrect a deleted object. Objects that vanished while a watch was down (kopf re-lists after
``410 Gone`` but cannot tell what disappeared) are removed by :meth:`Informers.reconcile`: an
authoritative paged LIST through the adapter; whatever the store holds that the LIST lacks and
that is not newer than the LIST is deleted. A reconcile runs at start (the initial sync that makes
the scheduler ready), whenever kopf re-lists a kind (its listing events, ``type=None``, arriving
after the initial sync), whenever the Pod reflector re-lists after a gap (it says so explicitly: no
listing heuristics), and every ``resync_period`` as a safety net; for the Pods a reconcile is the
reflector's own re-LIST, applied page by page. While a gap is being reconciled
:attr:`Informers.consistent` is clear and the scheduling loop pauses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from py_scheduler.app.kube import Kube, KubeError, NotFound
from py_scheduler.app.reflector import MIN_WATCH_TIMEOUT, Reflector
from py_scheduler.cache.cache import Cache
from py_scheduler.framework import config
from py_scheduler.queue.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD,
    ActionType,
    ClusterEvent,
    Resource,
    node_scheduling_properties_change,
    pod_scheduling_properties_change,
)
from py_scheduler.queue.scheduling_queue import PriorityQueue

log = logging.getLogger("py_scheduler.informers")

Obj = dict[str, Any]
Delta = tuple[Obj | None, Obj | None]

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
STARTUP_LISTING_GRACE = 60.0
"""Seconds after the initial sync during which kopf's listing events of a kind whose watch has not
delivered anything yet are taken for kopf's own initial listing, not a re-list."""
TERMINAL_PHASES = ("Succeeded", "Failed")
REFLECTED_KINDS = ("Pod",)
"""Kinds watched by a :class:`~py_scheduler.app.reflector.Reflector` instead of kopf (the high-volume stream)."""


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """A kind the scheduler watches: ``kind`` (as in ClusterObjects), ``group_version``
    (``v1``, ``apps/v1``), ``plural``, whether namespaced, the ClusterEvent resource its changes are
    offered to the queue as (None: no plugin cares), and an optional field selector. ``optional``
    kinds may be absent from the cluster (their LIST 404s)."""

    kind: str
    group_version: str
    plural: str
    namespaced: bool
    event_resource: str | None = None
    field_selector: str | None = None
    optional: bool = False

    @property
    def list_path(self) -> str:
        prefix = "/api" if self.group_version == "v1" else "/apis"
        return f"{prefix}/{self.group_version}/{self.plural}"

    def key(self, obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        return f"{meta.get('namespace') or 'default'}/{name}" if self.namespaced else name


KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("Node", "v1", "nodes", False, Resource.NODE),
    WatchedKind("Pod", "v1", "pods", True, Resource.POD, POD_FIELD_SELECTOR),
    WatchedKind("Namespace", "v1", "namespaces", False),
    WatchedKind("Service", "v1", "services", True),
    WatchedKind("ReplicationController", "v1", "replicationcontrollers", True),
    WatchedKind("PersistentVolumeClaim", "v1", "persistentvolumeclaims", True, Resource.PERSISTENT_VOLUME_CLAIM),
    WatchedKind("PersistentVolume", "v1", "persistentvolumes", False, Resource.PERSISTENT_VOLUME),
    WatchedKind("ReplicaSet", "apps/v1", "replicasets", True),
    WatchedKind("StatefulSet", "apps/v1", "statefulsets", True),
    WatchedKind("StorageClass", "storage.k8s.io/v1", "storageclasses", False, Resource.STORAGE_CLASS),
    WatchedKind("CSINode", "storage.k8s.io/v1", "csinodes", False, Resource.CSI_NODE),
    WatchedKind("CSIDriver", "storage.k8s.io/v1", "csidrivers", False, Resource.CSI_DRIVER),
    WatchedKind("CSIStorageCapacity", "storage.k8s.io/v1", "csistoragecapacities", True,
                Resource.CSI_STORAGE_CAPACITY),
    WatchedKind("VolumeAttachment", "storage.k8s.io/v1", "volumeattachments", False, Resource.VOLUME_ATTACHMENT),
    WatchedKind("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True),
    WatchedKind("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", False),
    WatchedKind("ResourceClaim", "resource.k8s.io/v1", "resourceclaims", True, Resource.RESOURCE_CLAIM,
                optional=True),
    WatchedKind("ResourceSlice", "resource.k8s.io/v1", "resourceslices", False, Resource.RESOURCE_SLICE,
                optional=True),
    WatchedKind("DeviceClass", "resource.k8s.io/v1", "deviceclasses", False, Resource.DEVICE_CLASS,
                optional=True),
    # GenericWorkload (beta, off by default: absent unless the API server serves scheduling.k8s.io/v1beta1).
    WatchedKind("PodGroup", "scheduling.k8s.io/v1beta1", "podgroups", True, Resource.POD_GROUP, optional=True),
)
KINDS_BY_NAME = {k.kind: k for k in KINDS}


def _rv(obj: Obj | None) -> int | None:
    raw = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


def _strip(obj: Obj) -> Obj:
    """Drop ``metadata.managedFields`` (upstream's informer transform) to save memory."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class ObjectStore:
    """The last known object per kind and key, turning watch/list events into (old, new) deltas.

    ``tombstone_ttl`` seconds: how long a deletion is remembered to reject stale re-adds.
    """

    def __init__(self, now: Callable[[], float] = time.monotonic, tombstone_ttl: float = 900.0) -> None:
        self._now = now
        self.tombstone_ttl = tombstone_ttl
        self._objs: dict[str, dict[str, Obj]] = {}
        self._tombs: dict[str, dict[str, tuple[int | None, float]]] = {}

    def get(self, kind: str, key: str) -> Obj | None:
        return self._objs.get(kind, {}).get(key)

    def list_kind(self, kind: str) -> list[Obj]:
        """Every stored object of ``kind``."""
        return list(self._objs.get(kind, {}).values())

    def __len__(self) -> int:
        return sum(len(v) for v in self._objs.values())

    def _bury(self, kind: str, key: str, rv: int | None) -> None:
        self._tombs.setdefault(kind, {})[key] = (rv, self._now())

    def apply(self, wk: WatchedKind, etype: str | None, obj: Obj) -> Delta | None:
        """Apply one event (``ADDED``/``MODIFIED``/``DELETED``, None for a listing); returns the
        delta, or None when it changes nothing (duplicate or stale)."""
        key = wk.key(obj)
        objs = self._objs.setdefault(wk.kind, {})
        cur = objs.get(key)
        rv = _rv(obj)
        if etype == "DELETED":
            if cur is None:
                self._bury(wk.kind, key, rv)
                return None
            cur_rv = _rv(cur)
            if rv is not None and cur_rv is not None and rv < cur_rv:
                return None
            del objs[key]
            self._bury(wk.kind, key, rv)
            return cur, None
        if cur is not None:
            cur_rv = _rv(cur)
            if rv is not None and cur_rv is not None and rv <= cur_rv:
                return None
            if cur_rv is None and rv is None and cur == obj:
                return None
            objs[key] = _strip(obj)
            return cur, obj
        tomb = self._tombs.get(wk.kind, {}).get(key)
        if tomb is not None and rv is not None and tomb[0] is not None and rv <= tomb[0]:
            return None
        self._tombs.get(wk.kind, {}).pop(key, None)
        objs[key] = _strip(obj)
        return None, obj

    def reconcile(self, wk: WatchedKind, items: Iterable[Obj], list_rv: str) -> list[Delta]:
        """Apply an authoritative LIST taken at ``list_rv``: upsert what it has, delete what it lacks
        unless the stored object is newer than the LIST."""
        deltas: list[Delta] = []
        seen: set[str] = set()
        for obj in items:
            seen.add(wk.key(obj))
            d = self.apply(wk, None, obj)
            if d is not None:
                deltas.append(d)
        deltas.extend(self.sweep(wk, seen, list_rv))
        return deltas

    def sweep(self, wk: WatchedKind, seen: set[str], list_rv: str) -> list[Delta]:
        """The deletions of an authoritative LIST taken at ``list_rv`` whose items' keys are ``seen``
        (already applied, e.g. page by page): every stored object of ``wk`` not seen and not newer than
        the LIST is deleted and remembered (tombstone). Returns the ``(old, None)`` deltas."""
        deltas: list[Delta] = []
        try:
            lrv: int | None = int(list_rv)
        except ValueError:
            lrv = None
        objs = self._objs.setdefault(wk.kind, {})
        for key, cur in list(objs.items()):
            if key in seen:
                continue
            cur_rv = _rv(cur)
            if lrv is None or cur_rv is None or cur_rv <= lrv:
                del objs[key]
                self._bury(wk.kind, key, lrv)
                deltas.append((cur, None))
        self.prune_tombstones()
        return deltas

    def prune_tombstones(self) -> None:
        limit = self._now() - self.tombstone_ttl
        for tombs in self._tombs.values():
            for key in [k for k, (_, t) in tombs.items() if t < limit]:
                del tombs[key]


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _assigned(pod: Obj | None) -> bool:
    return bool(((pod or {}).get("spec") or {}).get("nodeName"))


def _terminal(pod: Obj | None) -> bool:
    return ((pod or {}).get("status") or {}).get("phase") in TERMINAL_PHASES


def _scheduler_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


def _priority(pod: Obj) -> int:
    p = (pod.get("spec") or {}).get("priority")
    return p if isinstance(p, int) and not isinstance(p, bool) else 0


class EventHandlers:
    """``eventhandlers.go``: route deltas to the cache, the queue and ClusterObjects.

    ``profiles``: the schedulerNames we are responsible for.
    """

    def __init__(self, cache: Cache, queue: PriorityQueue, profiles: Iterable[str]) -> None:
        self.cache = cache
        self.queue = queue
        self.profiles = set(profiles)
        # schedulerName -> Framework when given one (its waiting-Pods map: a deleted Pod waiting on
        # Permit is rejected there).
        self.frameworks: Mapping[str, Any] = profiles if isinstance(profiles, Mapping) else {}

    def responsible(self, pod: Obj) -> bool:
        """``responsibleForPod``: the Pod names one of our profiles."""
        return _scheduler_name(pod) in self.profiles

    def on_delta(self, wk: WatchedKind, old: Obj | None, new: Obj | None) -> None:
        """Apply one delta; exceptions are logged (one bad object must not stop the stream).

        A delta whose two sides have different UIDs (an object deleted and recreated under the same
        name, its events seen out of order) is applied as a deletion followed by an addition.
        """
        if old is not None and new is not None and _uid(old) and _uid(new) and _uid(old) != _uid(new):
            self.on_delta(wk, old, None)
            self.on_delta(wk, None, new)
            return
        try:
            if wk.kind == "Pod":
                self._pod(old, new)
            elif wk.kind == "Node":
                self._node(old, new)
            else:
                self._other(wk, old, new)
        except Exception:
            obj = new if new is not None else old
            meta = (obj or {}).get("metadata") or {}
            log.exception("handling %s %s/%s failed", wk.kind, meta.get("namespace", ""), meta.get("name"))

    # -- nodes ---------------------------------------------------------------------------------------
    def _node(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None and old is None:
            log.debug("Add event for node node=%s", (new.get("metadata") or {}).get("name"))
            self.cache.add_node(new)
            self.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, new)
        elif new is not None and old is not None:
            self.cache.update_node(old, new)
            for ev in node_scheduling_properties_change(new, old):
                self.queue.move_all_to_active_or_backoff(ev, old, new)
        elif old is not None:
            log.debug("Delete event for node node=%s", (old.get("metadata") or {}).get("name"))
            self.queue.move_all_to_active_or_backoff(EVENT_NODE_DELETE, old, None)
            self.cache.remove_node(old)

    # -- pods ----------------------------------------------------------------------------------------
    def _pod(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None and _terminal(new):
            # A terminal Pod releases its resources (the field selector turns it into a deletion).
            if old is not None:
                self._pod_delete(old)
            elif _assigned(new):
                self.cache.remove_pod(new)
            return
        if old is None and new is not None:
            self._pod_add(new)
        elif old is not None and new is not None:
            self._pod_update(old, new)
        elif old is not None:
            self._pod_delete(old)

    def _pod_add(self, pod: Obj) -> None:
        if self.responsible(pod) and not _assigned(pod):
            log.debug("Add event for unscheduled pod pod=%s", _pod_ref(pod))
            self.queue.add(pod)
            if config.feature_gates.get("GenericWorkload"):
                # upstream addPodToSchedulingQueue: a new member may complete a waiting gang.
                self.queue.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_ADD, None, pod)
        if _assigned(pod):
            log.debug("Add event for scheduled pod pod=%s", _pod_ref(pod))
            self.cache.add_pod(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, pod)

    def _pod_update(self, old: Obj, new: Obj) -> None:
        if _assigned(old):
            self.cache.update_pod(old, new)
            for ev in pod_scheduling_properties_change(new, old, False):
                self.queue.move_all_to_active_or_backoff(ev, old, new)
        elif _assigned(new):
            # The binding: add to the cache (confirms an assumed Pod) and leave the queue.
            self.cache.add_pod(new)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, new)
            if self.responsible(old):
                self.queue.delete(old)
        elif self.responsible(old):
            self._update_in_queue(old, new)

    def _update_in_queue(self, old: Obj, new: Obj) -> None:
        if (old.get("metadata") or {}).get("resourceVersion") == (new.get("metadata") or {}).get("resourceVersion"):
            return
        if self.cache.is_assumed_pod(new):
            if (new.get("metadata") or {}).get("deletionTimestamp") and \
                    not (old.get("metadata") or {}).get("deletionTimestamp"):
                self._assumed_pod_deleted(new)
            return
        self.queue.update(old, new)
        old_nnn = (old.get("status") or {}).get("nominatedNodeName")
        if old_nnn and old_nnn != (new.get("status") or {}).get("nominatedNodeName"):
            prio = _priority(old)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, old, None,
                                                     lambda p: _priority(p) <= prio)

    def _pod_delete(self, pod: Obj) -> None:
        if _assigned(pod):
            log.debug("Delete event for scheduled pod pod=%s", _pod_ref(pod))
            self.cache.remove_pod(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)
            return
        if not self.responsible(pod):
            return
        log.debug("Delete event for unscheduled pod pod=%s", _pod_ref(pod))
        self.queue.delete(pod)
        if self.cache.is_assumed_pod(pod):
            self._assumed_pod_deleted(pod)
        elif (pod.get("status") or {}).get("nominatedNodeName"):
            prio = _priority(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None,
                                                     lambda p: _priority(p) <= prio)

    def _assumed_pod_deleted(self, pod: Obj) -> None:
        """``handleAssumedPodDeletion``: a Pod waiting on Permit is rejected (its binding cycle then
        unreserves and forgets it); otherwise the assumed resources are released now and the bind
        will fail."""
        assumed = self.cache.get_pod(pod)
        if assumed is None:
            return
        fw = self.frameworks.get(_scheduler_name(pod))
        waiting = getattr(fw, "waiting_pods", None)
        if waiting is not None and waiting.reject(assumed.uid):
            return
        try:
            self.cache.remove_assumed_pod(assumed)
        except Exception:
            log.exception("Scheduler cache RemoveAssumedPod failed pod=%s", assumed.key)
        self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed.pod, None)

    # -- other kinds ---------------------------------------------------------------------------------
    def _other(self, wk: WatchedKind, old: Obj | None, new: Obj | None) -> None:
        objects = self.cache.objects
        if new is not None:
            objects.upsert(wk.kind, new)
        elif old is not None:
            objects.delete(wk.kind, old)
        if wk.event_resource is None:
            return
        action = ActionType.ADD if old is None else ActionType.DELETE if new is None else ActionType.UPDATE
        self.queue.move_all_to_active_or_backoff(ClusterEvent(wk.event_resource, action), old, new)


def _pod_ref(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class _NoDiffBase(kopf.DiffBaseStorage):
    """A kopf diff-base storage that keeps and builds nothing.

    Only ``on.event`` handlers are registered and they never read a diff, yet kopf's default storage
    deep-copies every object's essence on every event to compute one (~0.1 ms per Pod event on the
    bench, bench/RESULTS.md). Nothing is ever written to the objects either way.
    """

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return kopf.BodyEssence()

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


class Informers:
    """The watch side of the live process.

    Args:
        kube: the API adapter (authoritative LISTs, kopf login).
        handlers: where deltas go.
        kinds: what to watch (default :data:`KINDS`).
        resync_period: seconds between full reconciles (0: only on start and re-lists).
        relist_quiet: seconds without listing events before a re-list is reconciled.
        reflect: kinds listed and watched by a :class:`Reflector` (default :data:`REFLECTED_KINDS`);
            kopf watches the others.
        min_watch_timeout: the reflectors' shortest watch ``timeoutSeconds`` (jittered up to twice it).

    Attributes:
        store: the :class:`ObjectStore` (also the Pod lister of the scheduling loop).
        synced: set once every kind has been listed once (``WaitForCacheSync``).
        consistent: set after the initial sync; cleared while a re-list (a watch gap: kopf or a
            reflector re-lists after ``410 Gone``) is being received and reconciled - the scheduling
            loop pauses then.
        reflectors: kind -> its :class:`Reflector`.
    """

    def __init__(self, kube: Kube, handlers: EventHandlers, kinds: Iterable[WatchedKind] = KINDS, *,
                 resync_period: float = 600.0, relist_quiet: float = 1.0,
                 reflect: Iterable[str] = REFLECTED_KINDS, min_watch_timeout: float = MIN_WATCH_TIMEOUT) -> None:
        self.kube = kube
        self.handlers = handlers
        self.kinds = tuple(kinds)
        self.resync_period = resync_period
        self.relist_quiet = relist_quiet
        self.store = ObjectStore()
        self.synced = asyncio.Event()
        self.unavailable: set[str] = set()
        self._listing_seen: dict[str, float] = {}
        self._last_listing: dict[str, float] = {}
        self.consistent = asyncio.Event()
        self._watching: set[str] = set()
        self._synced_at = 0.0
        self._wake = asyncio.Event()
        self.events_seen = 0
        self.reconciles = 0
        reflected = set(reflect)
        self.reflectors: dict[str, Reflector] = {
            wk.kind: Reflector(kube, wk, self.store, self._deliver,
                               on_relist_start=functools.partial(self._gap_start, wk.kind),
                               on_relist_end=functools.partial(self._gap_end, wk.kind),
                               min_watch_timeout=min_watch_timeout)
            for wk in self.kinds if wk.kind in reflected}
        self._reflector_tasks: dict[str, asyncio.Task[None]] = {}
        self._relisting: set[str] = set()
        self._others_due: set[str] = set()

    # -- the event path ------------------------------------------------------------------------------
    def on_event(self, kind: str, etype: str | None, obj: Obj) -> None:
        """One watch event from kopf (``etype`` None while kopf lists)."""
        wk = KINDS_BY_NAME.get(kind)
        if wk is None or not isinstance(obj, dict):
            return
        self.events_seen += 1
        if etype is None:
            # kopf lists at start too: only a listing after this kind's watch has delivered events,
            # a second listing burst of the kind (its first one was kopf's initial listing), or one
            # well after start-up is a re-list worth reconciling. A re-list pauses scheduling until
            # reconciled: kopf applies the listed objects at once but never says what vanished.
            now = time.monotonic()
            last = self._last_listing.get(kind)
            self._last_listing[kind] = now
            new_burst = last is not None and now - last > self.relist_quiet
            if self.synced.is_set() and (kind in self._watching or new_burst or
                                         now - self._synced_at > STARTUP_LISTING_GRACE):
                if not self._listing_seen:
                    log.info("kopf is re-listing %s (a watch gap): scheduling paused until the caches are "
                             "reconciled", kind)
                self._listing_seen[kind] = now
                self.consistent.clear()
                self._wake.set()
        else:
            self._watching.add(kind)
        delta = self.store.apply(wk, etype, obj)
        if delta is not None:
            self.handlers.on_delta(wk, *delta)

    def _deliver(self, wk: WatchedKind, old: Obj | None, new: Obj | None) -> None:
        """The reflectors' event path: a delta straight to the handlers (no kopf, no listing heuristics)."""
        self.handlers.on_delta(wk, old, new)

    def _gap_start(self, kind: str, reason: str) -> None:
        """A reflector re-lists after a watch gap: pause scheduling until it and the other kinds are
        reconciled."""
        if not self.synced.is_set():
            return
        if not self._relisting and not self._listing_seen:
            log.info("re-listing %s (%s): scheduling paused until the caches are reconciled", kind, reason)
        self._relisting.add(kind)
        self.consistent.clear()

    def _gap_end(self, kind: str, changes: int, ok: bool) -> None:
        """A reflector's re-list finished (``ok``) or failed (it retries; scheduling stays paused)."""
        if not ok or kind not in self._relisting:
            return
        self.reconciles += 1
        if changes:
            log.info("reconciled %s: %d change(s) the watch had not delivered", kind, changes)
        self._relisting.discard(kind)
        self._others_due.add(kind)
        self._wake.set()

    def _check_reflectors(self) -> None:
        """Raise what a reflector task died of (a bug: API failures are retried inside)."""
        for kind, task in self._reflector_tasks.items():
            if task.done():
                exc = None if task.cancelled() else task.exception()
                raise RuntimeError(f"the {kind} reflector stopped unexpectedly: {exc!r}") from exc

    def _start_reflector(self, kind: str, stop: asyncio.Event) -> None:
        if kind in self._reflector_tasks:
            return
        task = asyncio.create_task(self.reflectors[kind].run(stop), name=f"{kind} reflector")
        task.add_done_callback(lambda _: self._wake.set())
        self._reflector_tasks[kind] = task

    def pod(self, namespace: str, name: str) -> Obj | None:
        """The informer's Pod (the lister of ``handleSchedulingFailure``)."""
        return self.store.get("Pod", f"{namespace}/{name}")

    # -- reconcile -----------------------------------------------------------------------------------
    async def reconcile(self, wk: WatchedKind) -> int:
        """LIST ``wk`` and apply it; returns the number of deltas. Raises KubeError on failure.

        A reflected kind is re-listed through its reflector (pages applied as they arrive)."""
        reflector = self.reflectors.get(wk.kind)
        if reflector is not None:
            n = await reflector.relist()
            self.reconciles += 1
            if n and self.synced.is_set():
                log.info("reconciled %s: %d change(s) the watch had not delivered", wk.kind, n)
            return n
        try:
            items, rv = await self.kube.list_objects(wk.list_path, field_selector=wk.field_selector)
        except NotFound:
            if wk.optional:
                if wk.kind not in self.unavailable:
                    log.info("%s (%s) is not served by this cluster; not watching it", wk.kind, wk.group_version)
                self.unavailable.add(wk.kind)
                return 0
            raise
        self.unavailable.discard(wk.kind)
        deltas = self.store.reconcile(wk, items, rv)
        for old, new in deltas:
            self.handlers.on_delta(wk, old, new)
        self.reconciles += 1
        if deltas and self.synced.is_set():
            log.info("reconciled %s: %d change(s) the watch had not delivered", wk.kind, len(deltas))
        return len(deltas)

    async def _reconcile_kinds(self, kinds: Iterable[WatchedKind]) -> bool:
        ok = True
        for wk in kinds:
            try:
                await self.reconcile(wk)
            except KubeError as exc:
                ok = False
                log.warning("listing %s failed: %s", wk.kind, exc)
        return ok

    async def run(self, stop: asyncio.Event) -> None:
        """Initial sync (retrying until every kind is listed), then reconcile re-lists and resync.

        The reflectors run as sub-tasks (their first LIST is their kind's initial sync) and are
        stopped with this. Raises RuntimeError when a reflector dies of a bug."""
        try:
            await self._run(stop)
        finally:
            tasks = list(self._reflector_tasks.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, stop: asyncio.Event) -> None:
        pending = list(self.kinds)
        delay = 0.5
        while pending and not stop.is_set():
            failed = []
            for wk in pending:
                if wk.kind in self.reflectors:
                    self._start_reflector(wk.kind, stop)  # it lists (and retries) on its own
                    continue
                try:
                    await self.reconcile(wk)
                except KubeError as exc:
                    log.warning("initial list of %s failed: %s", wk.kind, exc)
                    failed.append(wk)
            pending = failed
            if pending:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                delay = min(delay * 2, 10.0)
        while not stop.is_set() and not all(r.listed.is_set() for r in self.reflectors.values()):
            self._check_reflectors()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(stop.wait(), *(r.listed.wait() for r in self.reflectors.values())),
                                       timeout=1.0)
        if stop.is_set():
            return
        self._synced_at = time.monotonic()
        self.consistent.set()
        self.synced.set()
        log.info("informer caches synced: %d objects", len(self.store))
        last_resync = time.monotonic()
        while not stop.is_set():
            timeout = self.relist_quiet if self._listing_seen else (
                max(self.resync_period - (time.monotonic() - last_resync), 0.1) if self.resync_period > 0 else 3600.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(stop.wait(), self._wake.wait()), timeout=timeout)
            # Cleared after waking, not before waiting: a wake-up set while this loop was busy (a
            # reflector's re-list ending during a resync) is then seen by the next wait instead of
            # being lost, which left scheduling paused until the next resync.
            self._wake.clear()
            if stop.is_set():
                return
            self._check_reflectors()
            now = time.monotonic()
            if self._others_due:
                # A reflector re-listed after a gap: the other watches broke too; reconcile them now
                # (best effort: a kind failing to LIST must not keep scheduling paused).
                due, self._others_due = self._others_due, set()
                log.debug("%s re-listed; reconciling every other kind", ", ".join(sorted(due)))
                await self._reconcile_kinds(wk for wk in self.kinds if wk.kind not in due and
                                            wk.kind not in self.reflectors)
            quiet = [k for k, t in self._listing_seen.items() if now - t >= self.relist_quiet]
            if quiet:
                for k in quiet:
                    del self._listing_seen[k]
                # Every kind, not only those re-listed: the watches broke together, and a LIST of
                # each taken now is a consistent cut from after the gap. Only the re-listed kinds'
                # LISTs must succeed; the others are best effort (their own re-list follows anyway).
                log.debug("kopf re-listed %s; reconciling every kind", ", ".join(quiet))
                ok = await self._reconcile_kinds(KINDS_BY_NAME[k] for k in quiet)
                await self._reconcile_kinds(wk for wk in self.kinds if wk.kind not in quiet)
                if not ok:
                    for k in quiet:
                        self._listing_seen.setdefault(k, now)
            if not self._listing_seen and not self._relisting and not self.consistent.is_set():
                log.info("caches reconciled after the watch gap: scheduling resumed")
                self.consistent.set()
            if self.resync_period > 0 and now - last_resync >= self.resync_period:
                last_resync = now
                await self._reconcile_kinds(self.kinds)

    # -- kopf wiring ---------------------------------------------------------------------------------
    def build_registry(self) -> kopf.OperatorRegistry:
        """A private kopf registry: one silent event handler per kind plus the login handler."""
        registry = kopf.OperatorRegistry()
        for wk in self.kinds:
            if wk.kind not in self.reflectors:
                self._register(registry, wk)
        kube = self.kube

        @kopf.on.login(registry=registry)
        async def login(**_: Any) -> kopf.ConnectionInfo:
            ep = await kube.fresh_endpoint()
            return kopf.ConnectionInfo(
                server=ep.server, ca_path=ep.ca_path, insecure=ep.insecure,
                scheme="Bearer" if ep.token else None, token=ep.token,
                certificate_path=ep.cert_path, private_key_path=ep.key_path, default_namespace="default")

        return registry

    def _register(self, registry: kopf.OperatorRegistry, wk: WatchedKind) -> None:
        kind = wk.kind

        async def handler(**kwargs: Any) -> None:
            event = kwargs.get("event") or {}
            self.on_event(kind, event.get("type"), event.get("object") or {})

        kopf.on.event(wk.group_version, wk.plural, id=f"py-scheduler-{kind}", registry=registry)(handler)

    def build_settings(self) -> kopf.OperatorSettings:
        """kopf settings: no peering, no event posting, no scanning, the Pod field selector."""
        settings = kopf.OperatorSettings()
        settings.peering.standalone = True
        settings.peering.clusterwide = True
        settings.posting.enabled = False
        settings.scanning.disabled = True
        settings.persistence.diffbase_storage = _NoDiffBase()
        settings.batching.batch_window = 0.01  # kopf's default 0.1 s would delay every Pod event by 100 ms
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.reconnect_backoff = 0.5
        settings.queueing.idle_timeout = 30.0
        settings.networking.error_backoffs = (0.5, 1, 2, 3, 5, 8)
        for wk in self.kinds:
            if wk.field_selector and wk.kind not in self.reflectors:
                settings.watching.field_selectors[(wk.group_version, wk.plural)] = wk.field_selector
        return settings


async def _first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
