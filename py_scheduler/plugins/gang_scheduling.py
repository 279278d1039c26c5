"""GangScheduling: all-or-nothing scheduling of the Pods of a gang PodGroup (feature gate ``GenericWorkload``).

Upstream (kube-scheduler v1.37.2):
``pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go`` (PreEnqueue, Permit,
EventsToRegister with queueing hints, PlacementFeasible), ``pkg/scheduler/backend/cache/podgroupstate.go``
(a group's Pods split into unscheduled / assumed / assigned; ``AllPodsCount``,
``ScheduledPodsCount`` = assumed + assigned), ``staging/src/k8s.io/api/scheduling/v1beta1/types.go``
(``PodGroup.spec.schedulingPolicy.gang.minCount``) and ``core/v1`` ``Pod.spec.schedulingGroup.podGroupName``.
Added to the default profile's multiPoint list when ``GenericWorkload`` is on
(``apis/config/v1/default_plugins.go`` ``applyGangScheduling``).

What it does, for a Pod whose ``spec.schedulingGroup.podGroupName`` names a PodGroup with a ``gang``
policy (a Pod without a group, or in a ``basic`` group, passes untouched):

- PreEnqueue: UnschedulableAndUnresolvable ``waiting for pods's pod group "<name>" to appear in
  scheduling queue`` until the PodGroup exists, then ``waiting for minCount pods from a gang to appear
  in scheduling queue`` until at least ``minCount`` Pods of the group exist.
- Permit: Wait (:data:`PERMIT_TIMEOUT_SECONDS`, upstream's 5 minutes, or ``permitTimeoutSeconds``
  from pluginConfig) ``waiting for minCount pods from a gang to be scheduled`` while fewer than
  ``minCount`` members are assumed or bound; the member that completes the quorum is admitted and
  Allows every member waiting in the framework's waiting-Pods map, so the group binds together.

The live loop and ``simulate`` schedule a gang in one *pod group scheduling cycle* as v1.37.2 does
(:mod:`py_scheduler.framework.podgroup`, :mod:`py_scheduler.core.group_cycle`; upstream
``pkg/scheduler/schedule_one_podgroup.go``): :meth:`GangScheduling.placement_feasible` decides there,
no PostFilter runs, and a trial's Unreserve (CycleState key ``POD_GROUP_CYCLE_KEY``) releases nothing
else. Where members are still scheduled one cycle each (``explain`` of one Pod, tests of this plugin),
a partial gang could hold resources (GPUs) while it waits at Permit; to keep "whole or nothing" true
in that path this plugin also (as the scheduler-plugins coscheduling plugin does):

- Reserve / Unreserve record which members are assumed (upstream keeps this in the cache's pod
  group state; the plugin cannot see the cache, so it keeps its own set, and counts a member as
  assigned once its informer object carries ``spec.nodeName``);
- Unreserve of a member while the quorum is not met (its Permit timed out, a member was deleted,
  its binding failed) rejects every other waiting member of the group, so nothing stays reserved;
- PostFilter (after DefaultPreemption) for a member that fits nowhere while the quorum is not met
  rejects the waiting members likewise, instead of letting them hold resources until the timeout;
  the group is then held at PreEnqueue (``pod group <name> could not be placed whole; waiting for a
  cluster change``) until a Node event or another Pod's deletion / update, as upstream retries a
  group only on a cluster event. Without that hold the freed room's own events would wake the
  misfit member at once and the group would reserve and release in a loop (on the test bed: 690
  scheduling attempts in 25 s for one 4-member gang that cannot fit).

Where the plugin reads objects: ``handle.objects`` (an :class:`~py_scheduler.framework.handle.ObjectLister`:
``list("Pod")``, ``get("PodGroup", ns, name)``); without it (no lister wired) every gang Pod waits at
PreEnqueue for its PodGroup. Cost: one pass over the listed Pods per PreEnqueue / Permit of a gang
member; Pods without a scheduling group cost one dict lookup.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from py_scheduler.framework import objects as ob
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from py_scheduler.framework.handle import APIClient, Handle, ObjectLister, VersionedLister, WaitingPodHandle
from py_scheduler.framework.interfaces import PlacementProgress, PodGroupInfo, PostFilterResult
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.podgroup import POD_GROUP_CYCLE_KEY, pod_group_name
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status

log = logging.getLogger("py_scheduler.plugins.gang_scheduling")

NAME = "GangScheduling"
PERMIT_TIMEOUT_SECONDS = 300.0
"""``permitTimeoutDuration``: how long a gang member waits at Permit for the quorum (5 minutes)."""

POD_GROUP = Resource.POD_GROUP
"""``fwk.PodGroup`` event resource."""

MSG_MIN_COUNT_NOT_IN_QUEUE = "waiting for minCount pods from a gang to appear in scheduling queue"
MSG_MIN_COUNT_NOT_SCHEDULED = "waiting for minCount pods from a gang to be scheduled"
MSG_REJECTED_WITH_GROUP = "rejected with its pod group {group}: {why}"
MSG_HELD = "pod group {group} could not be placed whole; waiting for a cluster change"
CONDITION = "PodGroupInitiallyScheduled"
"""``schedulingapi.PodGroupInitiallyScheduled``: True (reason ``Scheduled``) once the quorum is placed,
never regressed to False afterwards; False (reason ``Unschedulable``) while the group cannot be placed."""


def _pod_group_missing(name: str) -> str:
    # upstream's wording, typo included ("pods's")
    return f'waiting for pods\'s pod group "{name}" to appear in scheduling queue'


def gang_min_count(pod_group: Obj) -> int | None:
    """``spec.schedulingPolicy.gang.minCount`` of a PodGroup; None when the policy is not ``gang``.

    A gang policy with a missing or malformed ``minCount`` counts as 1 (the API server refuses
    such objects; bad input must not stall the group forever)."""
    spec = pod_group.get("spec")
    policy = spec.get("schedulingPolicy") if isinstance(spec, dict) else None
    gang = policy.get("gang") if isinstance(policy, dict) else None
    if not isinstance(gang, dict):
        return None
    n = gang.get("minCount")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1




@dataclass(slots=True)
class PodGroupState:
    """One group's members (``podGroupStateData``): UIDs split into ``assigned`` (bound: the Pod
    object has ``spec.nodeName``), ``assumed`` (reserved by this scheduler, not bound yet) and
    ``unscheduled``; ``pods`` maps every member UID to its object."""

    pods: dict[str, Obj] = field(default_factory=dict)
    assigned: set[str] = field(default_factory=set)
    assumed: set[str] = field(default_factory=set)
    unscheduled: set[str] = field(default_factory=set)

    def all_pods_count(self) -> int:
        return len(self.pods)

    def scheduled_pods_count(self) -> int:
        """Assumed + assigned members (``ScheduledPodsCount``)."""
        return len(self.assumed) + len(self.assigned)


def set_condition(conditions: list[Obj], cond: Obj, now: str) -> bool:
    """``apimeta.SetStatusCondition``: add or update ``cond`` (by ``type``) in ``conditions`` in place;
    ``lastTransitionTime`` changes only when ``status`` does. Returns whether anything changed."""
    for c in conditions:
        if c.get("type") == cond["type"]:
            changed = False
            if c.get("status") != cond["status"]:
                c["status"] = cond["status"]
                c["lastTransitionTime"] = now
                changed = True
            for k in ("reason", "message", "observedGeneration"):
                if c.get(k) != cond.get(k):
                    c[k] = cond.get(k)
                    changed = True
            return changed
    conditions.append({**cond, "lastTransitionTime": now})
    return True


def condition_patch(pod_group: Obj, status: str, reason: str, message: str, now: str) -> Obj | None:
    """The status patch ``updatePodGroupCondition`` sends for the ``PodGroupInitiallyScheduled``
    condition, or None when nothing changes (or when it would regress True to something else)."""
    st = pod_group.get("status")
    old = st.get("conditions") if isinstance(st, dict) else None
    conditions = [dict(c) for c in old if isinstance(c, dict)] if isinstance(old, list) else []
    existing = next((c for c in conditions if c.get("type") == CONDITION), None)
    if existing is not None and existing.get("status") == "True" and status != "True":
        return None
    cond = {"type": CONDITION, "status": status, "reason": reason, "message": message,
            "observedGeneration": ob.meta(pod_group).get("generation", 0)}
    if not set_condition(conditions, cond, now):
        return None
    return {"status": {"conditions": [c for c in conditions if c.get("type") == CONDITION]}}


def placement_feasible(min_count: int, scheduled: int, remaining: int) -> Status:
    """``PlacementFeasible``: the group-cycle check of a gang's quorum.

    ``scheduled`` members placed so far in the cycle, ``remaining`` still to try. Unschedulable when
    even all remaining ones cannot reach ``min_count``; Wait while they still might; Success once
    ``scheduled >= min_count``."""
    if remaining + scheduled < min_count:
        return Status(Code.UNSCHEDULABLE, [f"minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, "
                                           f"{remaining} remaining"], NAME)
    if scheduled < min_count:
        return Status(Code.WAIT, [f"minCount ({min_count}) is not yet satisfied: {scheduled} scheduled, "
                                  f"{remaining} remaining"], NAME)
    return Status.success()


class GangScheduling:
    """PreEnqueue + Reserve + Permit + PostFilter plugin enforcing a gang's ``minCount``.

    Args (pluginConfig, a py-scheduler extension; upstream has none): ``permitTimeoutSeconds``
    (positive number, default 300).
    """

    name = NAME

    def __init__(self, objects: ObjectLister | None = None, permit_timeout: float = PERMIT_TIMEOUT_SECONDS,
                 handle: Handle | None = None) -> None:
        self._objects = objects
        self._handle = handle
        """The profile's Handle: its waiting-Pods map, ``activator`` and ``client`` (none without it)."""
        self.permit_timeout = permit_timeout
        self._assumed: dict[str, set[str]] = {}
        """Group key ``ns/name`` -> UIDs this scheduler reserved and has not seen bound or released."""
        self._writes: set[asyncio.Task[None]] = set()
        self._initially_scheduled: dict[str, tuple[str, str]] = {}
        """PodGroup UID -> ``(namespace, name)`` this process marked PodGroupInitiallyScheduled=True and
        the informer's copy does not show yet (never regressed meanwhile). Bounded: pruned at each write
        (:meth:`_prune_initially_scheduled`) once the PodGroup is deleted or its copy shows True."""
        self._condition_wanted: dict[str, tuple[str, str, str, str, str]] = {}
        """PodGroup UID -> the latest ``(namespace, name, status, reason, message)`` wanted and not yet
        sent; its writer (:meth:`_send_conditions`) takes it. Bounded by the groups being written."""
        self._condition_writers: dict[str, asyncio.Task[None]] = {}
        """PodGroup UID -> its one writer task while it runs (writes of one group go out in order)."""
        self._changes = 0
        """Cluster changes seen through the queueing hints (Node events, other Pods' deletions)."""
        self._yielding: dict[str, set[str]] = {}
        """Group key -> members rejected to yield to an older gang whose Unreserve has not run yet."""
        self._groups: tuple[int | None, dict[tuple[str, str], tuple[dict[str, Obj], set[str], set[str]]]] | None = None
        """(the lister's Pod version, (namespace, group) -> its listed members): :meth:`_listed`'s listing."""
        self._released: dict[str, int] = {}
        """Group key -> ``_changes`` when the group was released because a member fit nowhere: until
        the cluster changes, its members are held at PreEnqueue (no reserve-and-release churn)."""

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle | None) -> GangScheduling:
        """Raises ConfigError on a bad ``permitTimeoutSeconds``."""
        t = args.get("permitTimeoutSeconds", PERMIT_TIMEOUT_SECONDS)
        if isinstance(t, bool) or not isinstance(t, int | float) or t <= 0:
            raise ConfigError(f"permitTimeoutSeconds: must be a positive number of seconds, got {t!r}")
        return cls(None, float(t), handle)

    @property
    def objects(self) -> ObjectLister | None:
        """The one given, else the Handle's (live: a port connected once the informers exist)."""
        if self._objects is not None:
            return self._objects
        return self._handle.objects if self._handle is not None else None

    def _waiting_pods(self) -> Iterable[WaitingPodHandle]:
        """The profile's waiting-Pods map (``IterateOverWaitingPods``); none without a Handle."""
        return self._handle.waiting_pods if self._handle is not None else ()

    # -- pod group state -----------------------------------------------------------------------------
    def _pod_group(self, namespace: str, name: str) -> Obj | None:
        if self.objects is None:
            return None
        obj: Obj | None = self.objects.get("PodGroup", namespace, name)
        return obj

    def pod_group(self, namespace: str, name: str) -> Obj | None:
        """The PodGroup object ``namespace/name`` from the informers, or None."""
        return self._pod_group(namespace, name)

    def _list_pods(self) -> Iterable[Obj]:
        if self.objects is None:
            return ()
        pods: Iterable[Obj] = self.objects.list("Pod")
        return pods

    def _listed(self, namespace: str, name: str) -> tuple[dict[str, Obj], set[str], set[str]]:
        """Group ``namespace/name``'s listed members: (UID -> Pod, bound UIDs, the others' UIDs);
        terminal Pods and Pods being deleted left out, as the scheduler's informers drop them. Every
        group comes from one listing, kept while the lister's Pod version stays (a
        :class:`VersionedLister`: the live informers), so an event or a cycle that asks about each of
        a gang's N members lists the cluster's Pods once, not N times (a 1 000-member gang cost 5 s
        per member add, Permit and requeue before). Read only: callers copy."""
        objects = self.objects
        version = objects.version("Pod") if isinstance(objects, VersionedLister) else None
        if version is None or self._groups is None or self._groups[0] != version:
            groups: dict[tuple[str, str], tuple[dict[str, Obj], set[str], set[str]]] = {}
            for pod in self._list_pods():
                group = pod_group_name(pod)
                if not group:
                    continue
                meta = ob.meta(pod)
                status = pod.get("status")
                phase = status.get("phase") if isinstance(status, dict) else None
                if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
                    continue
                pods, bound, others = groups.setdefault((ob.namespace(pod, "default"), group), ({}, set(), set()))
                uid = str(meta.get("uid") or "")
                pods[uid] = pod
                spec = pod.get("spec")
                (bound if isinstance(spec, dict) and spec.get("nodeName") else others).add(uid)
            self._groups = (version, groups)
        return self._groups[1].get((namespace, name)) or ({}, set(), set())

    def pod_group_state(self, namespace: str, name: str) -> PodGroupState:
        """The members of group ``namespace/name`` now (Pods listed + this plugin's assumed set).

        Terminal Pods (phase Succeeded / Failed) and Pods being deleted are not members, as the
        scheduler's informers drop them."""
        key = f"{namespace}/{name}"
        assumed = self._assumed.get(key, set())
        if assumed:
            # A member rejected at Permit stays assumed until its binding cycle unreserves it; it
            # must not count toward the quorum meanwhile (or a partial gang would be let through).
            assumed -= self._rejected_waiting()
        pods, bound, others = self._listed(namespace, name)
        st = PodGroupState(dict(pods), set(bound), others & assumed, others - assumed)
        # Forget assumed members that are gone or bound (upstream: the cache's AddPod/DeletePod).
        if assumed:
            assumed &= st.assumed
            if not assumed:
                self._assumed.pop(key, None)
        return st

    def scheduled_pods(self, namespace: str, name: str) -> list[Obj]:
        """The group's assumed and bound members (``ScheduledPods``), for ``validatePodGroup``."""
        st = self.pod_group_state(namespace, name)
        return [pod for uid, pod in st.pods.items() if uid in st.assigned or uid in st.assumed]

    def _gang_of(self, pod: PodInfo) -> tuple[str, int] | None:
        """(group name, minCount) when the Pod belongs to an existing gang PodGroup."""
        name = pod_group_name(pod.pod)
        if name is None:
            return None
        pg = self._pod_group(pod.namespace, name)
        if pg is None:
            return None
        n = gang_min_count(pg)
        return None if n is None else (name, n)

    # -- PreEnqueue ----------------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """``PreEnqueue`` (``preEnqueueHierarchiesDisabled``): hold a gang member out of activeQ
        until its PodGroup exists and the group has at least ``minCount`` Pods."""
        name = pod_group_name(pod.pod)
        if name is None:
            return Status.success()
        pg = self._pod_group(pod.namespace, name)
        if pg is None:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [_pod_group_missing(name)], NAME)
        n = gang_min_count(pg)
        if n is None:
            return Status.success()
        if self.pod_group_state(pod.namespace, name).all_pods_count() < n:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [MSG_MIN_COUNT_NOT_IN_QUEUE], NAME)
        if self._held(f"{pod.namespace}/{name}"):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [MSG_HELD.format(group=name)], NAME)
        return Status.success()

    def _held(self, key: str) -> bool:
        """Whether group ``key`` was released for a misfit and the cluster has not changed since."""
        at = self._released.get(key)
        if at is None:
            return False
        if at == self._changes:
            return True
        del self._released[key]
        return False

    # -- Reserve / Unreserve -------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Record the member as assumed (upstream: the cache's ``assumePod`` on the group state)."""
        name = pod_group_name(pod.pod)
        if name is not None:
            self._assumed.setdefault(f"{pod.namespace}/{name}", set()).add(pod.uid)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Forget the member (``forgetPod``); while the group's quorum is not met, reject every
        other member waiting at Permit so the partial gang releases what it reserved."""
        name = pod_group_name(pod.pod)
        if name is None:
            return
        key = f"{pod.namespace}/{name}"
        yielding = self._yielding.get(key)
        if yielding is not None:
            yielding.discard(pod.uid)
            if not yielding:
                del self._yielding[key]
        members = self._assumed.get(key)
        if members is not None:
            members.discard(pod.uid)
            if not members:
                self._assumed.pop(key, None)
        if state.data.get(POD_GROUP_CYCLE_KEY):
            return  # a pod group cycle reverting a trial: it settles the group (and its condition) itself
        gang = self._gang_of(pod)
        if gang is None:
            return
        if self.pod_group_state(pod.namespace, name).scheduled_pods_count() >= gang[1]:
            return
        self.reject_waiting(pod.namespace, name, f"member {pod.name} was unreserved")

    # -- Permit --------------------------------------------------------------------------------------
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """``Permit`` (``permitPodGroup``): Wait until ``minCount`` members are assumed or bound,
        then Allow every waiting member of the group and admit this one."""
        gang = self._gang_of(pod)
        if gang is None:
            return Status.success(), 0.0
        name, min_count = gang
        if self._held(f"{pod.namespace}/{name}"):
            self._assumed.get(f"{pod.namespace}/{name}", set()).discard(pod.uid)
            return Status(Code.UNSCHEDULABLE, [MSG_HELD.format(group=name)], NAME), 0.0
        st = self.pod_group_state(pod.namespace, name)
        if st.scheduled_pods_count() < min_count:
            if self._handle is not None and st.unscheduled:
                self._handle.activator.activate([st.pods[u] for u in sorted(st.unscheduled)])
            return Status(Code.WAIT, [MSG_MIN_COUNT_NOT_SCHEDULED], NAME), self.permit_timeout
        for wp in self._waiting(pod.namespace, name):
            wp.allow(NAME)
        self.write_condition(pod.namespace, name, "True", "Scheduled", "")
        return Status.success(), 0.0

    # -- PostFilter ----------------------------------------------------------------------------------
    def post_filter(self, state: CycleState, pod: PodInfo,
                    node_statuses: dict[str, Status]) -> tuple[PostFilterResult | None, Status]:
        """A member that fits nowhere (after preemption found nothing) while its group's quorum is not
        met: the older gang wins. When gangs younger than this one (PodGroup ``creationTimestamp``, then
        namespace/name) hold members at Permit and no older one does, their waiting members are
        rejected and they are held (this group keeps its reservations; the freed room requeues the
        misfit member). Otherwise this group's waiting members are rejected and it is held until the
        cluster changes. Without the order, two gangs competing for the same GPUs release each other
        in turn forever. Never nominates, adds no reason to the FailedScheduling message."""
        gang = self._gang_of(pod)
        if gang is None or self.pod_group_state(pod.namespace, gang[0]).scheduled_pods_count() >= gang[1]:
            return None, Status(Code.UNSCHEDULABLE, [], NAME)
        key = f"{pod.namespace}/{gang[0]}"
        mine = self._age(key)
        others = {f"{wp.pod.namespace}/{pod_group_name(wp.pod.pod)}" for wp in self._all_waiting()}
        for k in list(self._assumed):  # gangs holding reservations, waiting at Permit or not yet there
            ns, _, name = k.partition("/")
            if self.pod_group_state(ns, name).assumed:  # (prunes members since bound or gone)
                others.add(k)
        others.discard(key)
        younger = sorted(k for k in others if self._age(k) > mine)
        yielding = any(uids and self._age(k) > mine for k, uids in self._yielding.items())
        if (younger or yielding) and not any(self._age(k) < mine for k in others):
            for k in younger:
                self._released[k] = self._changes  # members not yet at Permit are refused there
                ns, _, name = k.partition("/")
                rejected = self.reject_waiting(ns, name, f"yields to the older pod group {gang[0]}", uids=True)
                if rejected:
                    self._yielding.setdefault(k, set()).update(rejected)
            # This group keeps its reservations: the yielded room frees when their Unreserve runs.
        elif self.reject_waiting(pod.namespace, gang[0], f"member {pod.name} cannot be scheduled"):
            # Hold the group until the cluster changes: retrying at once would reserve and release again.
            self._released[key] = self._changes
        # No reason of its own: the FailedScheduling message stays upstream's.
        return None, Status(Code.UNSCHEDULABLE, [], NAME)

    def _age(self, key: str) -> tuple[str, str]:
        """Order of gangs: (PodGroup creationTimestamp, namespace/name); RFC 3339 UTC sorts as text."""
        ns, _, name = key.partition("/")
        pg = self._pod_group(ns, name) or {}
        return str(ob.meta(pg).get("creationTimestamp") or ""), key

    def _all_waiting(self) -> list[WaitingPodHandle]:
        """Gang members waiting at Permit (not yet allowed or rejected), any group."""
        return [wp for wp in self._waiting_pods() if not wp.done and pod_group_name(wp.pod.pod) is not None]

    # -- PlacementFeasible (the pod group cycle) --------------------------------------------------------
    def placement_feasible(self, state: CycleState, pod_group: PodGroupInfo, progress: PlacementProgress) -> Status:
        """``PlacementFeasible``: :func:`placement_feasible` with the group's ``minCount`` (1 when the
        policy is not gang)."""
        n = gang_min_count(pod_group.pod_group)
        return placement_feasible(n if n is not None else 1, progress.scheduled, progress.remaining)

    # -- the waiting-Pods map ------------------------------------------------------------------------
    def _waiting(self, namespace: str, name: str) -> list[WaitingPodHandle]:
        return [wp for wp in self._waiting_pods()
                if wp.pod.namespace == namespace and pod_group_name(wp.pod.pod) == name]

    def _rejected_waiting(self) -> set[str]:
        """UIDs in the waiting-Pods map already rejected (or preempted) but not yet unreserved: done
        with plugins still pending (an allowed Pod is done with none pending)."""
        return {wp.pod.uid for wp in self._waiting_pods() if wp.done and wp.pending_plugins()}

    @overload
    def reject_waiting(self, namespace: str, name: str, why: str) -> int: ...

    @overload
    def reject_waiting(self, namespace: str, name: str, why: str, uids: Literal[True]) -> set[str]: ...

    def reject_waiting(self, namespace: str, name: str, why: str, uids: bool = False) -> int | set[str]:
        """Reject every member of group ``namespace/name`` waiting at Permit and mark the group
        Unschedulable (``why`` as the condition's message); returns how many were rejected (their
        UIDs with ``uids=True``)."""
        done: set[str] = set()
        members = self._assumed.get(f"{namespace}/{name}", set())
        for wp in self._waiting(namespace, name):
            if wp.reject(NAME, MSG_REJECTED_WITH_GROUP.format(group=name, why=why)):
                members.discard(wp.pod.uid)  # no longer counts, even before its Unreserve runs
                done.add(wp.pod.uid)
        self.write_condition(namespace, name, "False", "Unschedulable", why)
        return done if uids else len(done)

    # -- PodGroup status ------------------------------------------------------------------------------
    def write_condition(self, namespace: str, name: str, status: str, reason: str, message: str) -> None:
        """Patch the group's ``PodGroupInitiallyScheduled`` condition through the Handle's client
        (``updatePodGroupCondition``), in the background; nothing without a client (explain) or an
        event loop. API errors are logged, never raised (upstream: ``HandleErrorWithLogger``)."""
        client = self._handle.client if self._handle is not None else None
        pg = self._pod_group(namespace, name)
        if client is None or pg is None:
            return
        uid = str(ob.meta(pg).get("uid") or f"{namespace}/{name}")
        self._prune_initially_scheduled()
        if uid in self._initially_scheduled:
            return  # True is terminal (and written once); the informer's copy may not show it yet
        if status == "True":
            self._initially_scheduled[uid] = (namespace, name)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._condition_wanted[uid] = (namespace, name, status, reason, message)
        if uid not in self._condition_writers:
            task = loop.create_task(self._send_conditions(uid, client))
            self._condition_writers[uid] = task
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def _send_conditions(self, uid: str, client: APIClient) -> None:
        """The one writer of group ``uid``'s condition: sends the latest wanted condition, then the
        next one wanted meanwhile, until none is left. Two patches of one group in flight at once
        could land in either order, and a False landing after True would stay; a condition wanted
        while another is being sent replaces any older one not yet sent."""
        try:
            while (want := self._condition_wanted.pop(uid, None)) is not None:
                namespace, name, status, reason, message = want
                pg = self._pod_group(namespace, name)
                if pg is None:
                    continue
                now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                patch = condition_patch(pg, status, reason, message, now)
                if patch is None:
                    continue
                path = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups/{name}/status"
                try:
                    await client.patch(path, patch, "application/strategic-merge-patch+json")
                except Exception as exc:  # APIError, connection errors: the condition is informational
                    log.warning("Failed to update PodGroup status podGroup=%s/%s: %s", namespace, name, exc)
        finally:
            self._condition_writers.pop(uid, None)

    def _prune_initially_scheduled(self) -> None:
        """Forget the groups whose True need no remembering: deleted (or replaced under the same name:
        another UID), or whose informer copy shows the condition True, which :func:`condition_patch`
        then guards as upstream does (``updatePodGroupCondition`` reads only the PodGroup's own
        condition, ``pkg/scheduler/schedule_one_podgroup.go``; this map only covers the informer's lag).
        O(entries): the groups written True whose update has not arrived yet."""
        for uid, (namespace, name) in list(self._initially_scheduled.items()):
            pg = self._pod_group(namespace, name)
            if pg is None or str(ob.meta(pg).get("uid") or f"{namespace}/{name}") != uid:
                del self._initially_scheduled[uid]
                continue
            st = pg.get("status")
            conds = st.get("conditions") if isinstance(st, dict) else None
            if isinstance(conds, list) and any(isinstance(c, dict) and c.get("type") == CONDITION
                                               and c.get("status") == "True" for c in conds):
                del self._initially_scheduled[uid]

    # -- queueing hints ------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: a Pod of the same group added (unscheduled or assigned) may complete
        the quorum; a PodGroup added, or updated with a smaller ``minCount``, may too."""
        pod_added: Callable[[Obj, Any, Any], QueueingHint] = self._hint_pod_added
        return [
            ClusterEventWithHint(ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD), pod_added),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD), pod_added),
            ClusterEventWithHint(ClusterEvent(POD_GROUP, ActionType.ADD), self._hint_pod_group_added),
            ClusterEventWithHint(ClusterEvent(POD_GROUP, ActionType.UPDATE), self._hint_pod_group_updated),
            # py-scheduler's release-on-misfit: a group held since then goes back on a cluster change.
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ALL), self._hint_cluster_change),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE),
                                 self._hint_cluster_change),
        ]

    def _undone_assumption(self, obj: Obj) -> bool:
        """A Pod "deleted" from a node only because its reservation was undone (it still exists,
        unbound): another gang releasing what it reserved is not a cluster change."""
        meta = ob.meta(obj)
        name = meta.get("name")
        if pod_group_name(obj) is None or not isinstance(name, str) or self.objects is None:
            return False
        current: Obj | None = self.objects.get("Pod", ob.namespace(obj, "default"), name)
        spec = current.get("spec") if isinstance(current, dict) else None
        return isinstance(spec, dict) and not spec.get("nodeName")

    def _hint_cluster_change(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        """Queue a held group's members on a Node event or another Pod's deletion / update (not one of
        the group's own members: their release is what left the group held)."""
        other = old if isinstance(old, dict) else new
        if isinstance(other, dict) and self._same_group(pod, other, pod_group_name(other)):  # Nodes have no group
            return QueueingHint.QUEUE_SKIP
        if isinstance(other, dict) and self._undone_assumption(other):
            return QueueingHint.QUEUE_SKIP
        self._changes += 1
        name = pod_group_name(pod)
        return QueueingHint.QUEUE if name is not None and f"{ob.namespace(pod, 'default')}/{name}" in self._released \
            else QueueingHint.QUEUE_SKIP

    @staticmethod
    def _same_group(pod: Obj, other: Any, other_name: str | None) -> bool:
        name = pod_group_name(pod)
        return (name is not None and other_name == name and isinstance(other, dict)
                and ob.namespace(other, "default") == ob.namespace(pod, "default"))

    def _hint_pod_added(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, dict) and self._same_group(pod, new, pod_group_name(new)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def _hint_pod_group_added(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, dict) and self._same_group(pod, new, ob.meta(new).get("name")):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def _hint_pod_group_updated(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        if not (isinstance(new, dict) and isinstance(old, dict)
                and self._same_group(pod, new, ob.meta(new).get("name"))):
            return QueueingHint.QUEUE_SKIP
        n_old, n_new = gang_min_count(old), gang_min_count(new)
        if n_old is None or n_new is None or n_new >= n_old:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
