"""Offline scheduling: the live scheduler's cycle, run in memory on a snapshot.

Each pending Pod goes through the same :class:`~py_scheduler.framework.algorithm.Algorithm` the live
scheduler uses (PreFilter, Filter, PostFilter, PreScore, Score, NormalizeScore, selectHost), in
queue order; a placed Pod then runs the profile's Reserve plugins, its PreBind plugins (against
:class:`~py_scheduler.offline.memapi.MemoryAPI`: the writes, e.g. VolumeBinding's PV / claim
bindings, land in the snapshot's objects, and the PV controller / provisioner answer at once) and is
*assumed* on its node in the snapshot, so every later Pod sees it. Nothing is written to any API
server.

Upstream: ``pkg/scheduler/schedule_one.go`` (``ScheduleOne``: ``schedulePod``, then
``RunReservePluginsReserve`` and ``assume``; a Reserve failure runs Unreserve and fails the Pod),
``framework/plugins/queuesort/priority_sort.go`` (queue order: priority descending, then the time
the Pod was queued, here its ``creationTimestamp``; ties keep file order) and
``backend/cache/cache.go`` (``AssumePod``).

Differences from the live scheduler, on purpose: a tie between nodes with equal totals is broken
with a ``random.Random(0)`` so output is reproducible; preemption (PostFilter) only *reports* the
node it would nominate, it evicts nothing; with ``explain`` every feasible node is scored even
when only one is feasible; OpportunisticBatching is off (``Algorithm.schedule`` gets no ``cycle``),
so every Pod's table covers every node and no wall-clock batch age makes a run machine-dependent --
a batched choice always has the best total of the full cycle (tests/unit/framework/test_batch.py),
so placements differ from a batched live run at most by tie-breaking.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.core.cycle import SCHEDULED, PodCycle, schedule_pod, unreserve_and_forget
from py_scheduler.core.group_cycle import pod_group_name, pod_group_of
from py_scheduler.core.group_cycle import schedule_group as group_cycle
from py_scheduler.core.ports import SnapshotState
from py_scheduler.framework import objects as ob
from py_scheduler.framework.algorithm import Algorithm, ScheduleResult
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.handle import APIClient, Handle, ObjectLister
from py_scheduler.framework.interfaces import PostFilterResult, PreEnqueuePlugin
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import CycleState, PodInfo, Status
from py_scheduler.offline.loader import ClusterData, creation_timestamp, pod_key
from py_scheduler.offline.memapi import MemoryAPI
from py_scheduler.plugins import registry

PRE_BIND_MAX_STEPS = 16
"""Suspensions an offline PreBind may make before it is given up (see ``OfflineScheduler._pre_bind``)."""


def _drive(coro: Coroutine[Any, Any, Status]) -> Status:
    """Run a PreBind coroutine without an event loop: it may only suspend on bare yields
    (``asyncio.sleep(0)``); anything else, or more than :data:`PRE_BIND_MAX_STEPS` of them, ends it."""
    try:
        for _ in range(PRE_BIND_MAX_STEPS):
            if coro.send(None) is not None:
                coro.close()
                return Status.error("PreBind waited on I/O, which the offline engine cannot do")
    except StopIteration as stop:
        result = stop.value
        return result if isinstance(result, Status) else Status.error(f"PreBind returned {result!r}")
    coro.close()
    return Status.error("binding volumes: context deadline exceeded")

__all__ = ["OfflineScheduler", "Outcome", "ProfileError", "held_message", "load_frameworks", "queue_order"]

log = logging.getLogger(__name__)


def held_message(plugin: str, reason: str) -> str:
    """Why a Pod that a PreEnqueue plugin holds out of the active queue is not tried (upstream
    ``backend/queue/scheduling_queue.go``, ``runPreEnqueuePluginsForPod``: the first failing plugin
    becomes the Pod's ``GatingPlugin``): ``simulate``'s and ``explain``'s message and ``explain
    --pod``'s note, the same words in all three."""
    return f'held by PreEnqueue plugin "{plugin}": {reason}'


class ProfileError(Exception):
    """The scheduler configuration cannot be loaded or built; ``str()`` is one line."""


@dataclass(slots=True)
class Outcome:
    """One Pod's offline cycle.

    Attributes:
        pod: the Pod object as it was scheduled (a copy, ``spec.nodeName`` cleared).
        result: the :class:`ScheduleResult` (``selected`` None when the Pod does not fit or could
            not be parsed; then ``message`` says why).
        annotations: annotations Reserve plugins recorded on the assumed Pod (GPU indices).
        score: the selected node's weighted total, or None (not placed, or a single feasible
            node that was not scored).
        allocations: the placed Pod's DRA claim allocations (:class:`AllocationReporter`'s shape:
            ``[{"claim", "allocation"}]``, ``allocation`` as the API's ``status.allocation``).
    """

    pod: Obj
    result: ScheduleResult
    annotations: dict[str, str]
    allocations: list[Obj] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.result.pod

    @property
    def score(self) -> int | None:
        sel = self.result.selected
        return self.result.totals.get(sel) if sel is not None else None


def load_frameworks(config: Path | None, feature_gates: str = "", *, objects: ObjectLister | None = None,
                    client: APIClient | None = None) -> tuple[dict[str, Framework], str, int]:
    """Build every profile of ``config`` (the default configuration when None) under the
    ``--feature-gates`` ``feature_gates`` (:meth:`~py_scheduler.framework.features.FeatureGates.parse`,
    the path ``run`` takes too; "" is every gate at its v1.37 default), their Handle reading ``objects``
    and writing through ``client`` (None: nothing is written).

    Returns (schedulerName -> Framework, the default profile's name, the global
    percentageOfNodesToScore). The default profile is ``py-scheduler`` when configured, else the
    first profile.

    Raises:
        ProfileError: invalid feature gates, the file cannot be loaded (or this build cannot load
        configuration files), or a profile cannot be built (unknown plugin, bad args).
    """
    from py_scheduler.framework import config as cfgmod

    try:
        gates = FeatureGates.parse(feature_gates)
    except ValueError as exc:
        raise ProfileError(f"invalid --feature-gates: {exc}") from exc

    if config is None:
        cfg = cfgmod.SchedulerConfig()
    else:
        try:
            cfg = cfgmod.load_config(config, registry=registry)
        except cfgmod.ConfigError as exc:
            msg = str(exc)
            raise ProfileError(msg if msg.startswith(str(config)) else f"{config}: {msg}") from exc
        except OSError as exc:
            raise ProfileError(f"{config}: cannot read: {exc.strerror or exc}") from exc
    cfg.feature_gates = gates
    handle = Handle.detached(gates, objects, client)
    try:
        fws = cfgmod.build_frameworks(cfg, handle=handle, registry=registry)
    except cfgmod.ConfigError as exc:
        where = f"{config}: " if config is not None else ""
        raise ProfileError(f"{where}{exc}") from exc
    if not fws:
        raise ProfileError(f"{config}: no profiles configured")
    default = cfgmod.DEFAULT_SCHEDULER_NAME if cfgmod.DEFAULT_SCHEDULER_NAME in fws else next(iter(fws))
    return fws, default, int(cfg.percentage_of_nodes_to_score)


def _raw_priority(pod: Obj) -> int:
    prio = (pod.get("spec") or {}).get("priority")
    return prio if isinstance(prio, int) and not isinstance(prio, bool) else 0


def queue_order(pods: list[Obj], file_order: dict[str, int] | None = None) -> list[Obj]:
    """PrioritySort order: ``spec.priority`` descending, then ``creationTimestamp`` ascending, then
    position in the snapshot file (Pods without a timestamp after dated ones)."""
    order = file_order or {}
    return sorted(pods, key=lambda p: (-_raw_priority(p), creation_timestamp(p), order.get(pod_key(p), 0)))


class OfflineScheduler:
    """Schedules Pods one after another on one :class:`Snapshot`, assuming each placed Pod.

    ``frameworks`` maps schedulerName -> Framework; a Pod naming no configured profile uses
    ``default_profile``. One :class:`Algorithm` (rotating start index, seeded tie-breaks) serves all
    Pods, as the single live scheduling loop does.
    """

    def __init__(self, frameworks: dict[str, Framework], default_profile: str, snapshot: Snapshot,
                 percentage_of_nodes_to_score: int = 0, seed: int = 0, api: MemoryAPI | None = None) -> None:
        self.frameworks = frameworks
        self.default_profile = default_profile
        self.snapshot = snapshot
        self.algorithm = Algorithm(percentage_of_nodes_to_score, rng=random.Random(seed))
        self.state = SnapshotState(snapshot)
        self.rejected: dict[str, str] = {}
        """Pod key -> the API server's refusal to create it (:attr:`ClusterData.rejected`)."""
        self.api = api
        """The in-memory API the profiles' Handle writes to (None: PreBind plugins are not run)."""
        for fw in frameworks.values():
            for p in fw.plugins.values():
                if hasattr(p, "cycle_budget"):
                    p.cycle_budget = None  # no event loop to keep answering: no cycle is cut short
        if api is not None:
            api.attach(snapshot)
            for fw in frameworks.values():
                for p in fw.plugins.values():
                    if hasattr(p, "bind_poll_interval"):
                        p.bind_poll_interval = 0.0  # the in-memory controllers answer at once

    @classmethod
    def from_data(cls, data: ClusterData, config: Path | None, feature_gates: str = "") -> OfflineScheduler:
        """Snapshot of ``data`` plus the frameworks of ``config`` under ``feature_gates``.

        Raises:
            ProfileError: see :func:`load_frameworks`.
            py_scheduler.offline.loader.SnapshotError: a malformed Node / bound Pod.
        """
        api = MemoryAPI()
        # a Pod the API server would have refused is no gang member: it never existed there
        api.unscheduled = [p for p in data.pods if not (p.get("spec") or {}).get("nodeName")
                           and pod_key(p) not in data.rejected]
        fws, default, pct = load_frameworks(config, feature_gates, objects=api, client=api.client)
        sched = cls(fws, default, data.snapshot(), pct, api=api)
        sched.rejected = dict(data.rejected)
        return sched

    def framework_for(self, pod: Obj) -> Framework:
        """The profile named by ``spec.schedulerName``, else the default profile."""
        name = (pod.get("spec") or {}).get("schedulerName")
        if isinstance(name, str) and name in self.frameworks:
            return self.frameworks[name]
        return self.frameworks[self.default_profile]

    def unbind(self, pod: Obj) -> Obj:
        """For explaining a bound Pod: take it off its node in the snapshot and return a pending copy
        (``spec.nodeName`` cleared), so it is scheduled as if it had just arrived."""
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if isinstance(node, str) and node in self.snapshot.node_info_map:
            self.snapshot.node_info_map[node].remove_pod(uid)
            self.snapshot.rebuild_lists()
        pending = dict(pod)
        pending["spec"] = {k: v for k, v in spec.items() if k != "nodeName"}
        return pending

    def schedule(self, pod: Obj, *, explain: bool = True, assume: bool = True) -> Outcome:
        """Run one cycle for ``pod`` and, when it fits and ``assume`` is set, Reserve + assume it.

        Never raises for a bad Pod or a failing plugin: a :class:`PodParseError`, a
        :class:`SchedulingError`, a Reserve rejection or a plugin that raises (a bug: its exception
        named, ``<Type>: <message>``) comes back as ``result.message`` with ``selected`` None, and
        nothing of this Pod stays reserved nor assumed. A Pod the API server would not have created
        (:attr:`rejected`) is not tried: its message says so.
        """
        fw = self.framework_for(pod)
        key = pod_key(pod)
        refused = self._refused(pod)
        if refused is not None:
            return refused
        try:
            pod_info = PodInfo(pod)
        except PodParseError as exc:
            return Outcome(pod, ScheduleResult(pod=key, profile=fw.profile_name, message=str(exc),
                                               weights=dict(fw.score_weights)), {})
        except (AttributeError, TypeError, ValueError) as exc:  # a field of the wrong JSON type
            return Outcome(pod, ScheduleResult(pod=key, profile=fw.profile_name, message=f"malformed Pod: {exc}",
                                               weights=dict(fw.score_weights)), {})
        return self._outcome(fw, pod, pod_info, schedule_pod(fw, self.algorithm, self.state, pod_info, explain=explain,
                                                           assume=assume))

    def _outcome(self, fw: Framework, pod: Obj, pod_info: PodInfo, c: PodCycle) -> Outcome:
        """The Outcome of one Pod's cycle (:mod:`py_scheduler.core`): an assumed Pod runs its PreBind
        plugins in memory (a failure unreserves and forgets it); an unplaced one carries its
        FailedScheduling message."""
        res = c.result or ScheduleResult(pod=pod_info.key, profile=fw.profile_name, weights=dict(fw.score_weights))
        if c.assumed is not None and c.state is not None:
            msg = self._pre_bind(fw, c.state, pod_info, c.node)
            if not msg:
                return Outcome(pod, res, dict(c.state.pod_annotations), fw.claim_allocations(c.state, pod_info))
            unreserve_and_forget(fw, c.state, c.assumed, self.state)
            c.message = msg
        elif c.outcome == SCHEDULED:  # not asked to assume
            return Outcome(pod, res, {})
        if res.selected is not None or c.result is None:
            res.message = c.message
        res.selected = None
        return Outcome(pod, res, {})

    def _pre_bind(self, fw: Framework, state: CycleState, pod_info: PodInfo, node: str) -> str:
        """The profile's PreBindPreFlight and PreBind runners (``Framework.run_pre_bind_pre_flights`` /
        ``run_pre_bind``, the live binding cycle's) against the in-memory API; returns the failure
        message (the live loop's), "" on success.
        A PreBind still waiting after :data:`PRE_BIND_MAX_STEPS` suspensions would wait for ever
        here (the in-memory controllers have already answered): it fails as upstream's timeout."""
        if self.api is None:
            return ""
        self.api.pending[(pod_info.namespace, pod_info.name)] = pod_info.pod
        try:
            # the live binding cycle's runners (framework/binding_cycle.py), driven without a loop
            st = fw.run_pre_bind_pre_flights(state, pod_info, node)
            if st.is_success():
                st = _drive(fw.run_pre_bind(state, pod_info, node))
            return "" if st.is_success() or st.is_skip() else st.message()
        finally:
            self.api.pending.pop((pod_info.namespace, pod_info.name), None)

    def run(self, pods: list[Obj], *, explain: bool = True,
            progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        """Schedule ``pods`` in the given order (call :func:`queue_order` first), each seeing the
        earlier placements. ``progress`` is called after each Pod.

        With ``GenericWorkload`` on (the profile has GangScheduling), the first Pod of a PodGroup
        brings every later pending member of that group (same profile) into one pod group cycle, as
        the live loop does (:mod:`py_scheduler.core.group_cycle`): placed whole when the group's
        ``minCount`` can be placed, otherwise none of them (each one's message says why). The
        outcomes keep the order of ``pods``.
        """
        out: list[Outcome | None] = [None] * len(pods)
        for i, pod in enumerate(pods):
            if out[i] is not None:
                continue
            # a Pod the API server refuses never exists; a gang below minCount waits for members: never tried
            held = self._refused(pod) or self._held_by_gang(pod)
            group = None if held is not None else pod_group_of(self.framework_for(pod), pod)
            if group is None:
                single = held or self.schedule(pod, explain=explain)
                out[i] = single
                if progress is not None:
                    progress(single)
                continue
            fw, pod_group = self.framework_for(pod), group[1]
            ns, name = ob.namespace(pod, "default"), pod_group_name(pod)
            idx = [j for j in range(i, len(pods)) if out[j] is None and ob.namespace(pods[j], "default") == ns
                   and pod_group_name(pods[j]) == name and self.framework_for(pods[j]) is fw]
            gated = self._gated_member(fw, ns, str(name))
            if gated is not None:  # the live queue gates the whole group (scheduling_queue.go)
                for j in idx:
                    o = Outcome(pods[j], ScheduleResult(pod=pod_key(pods[j]), profile=fw.profile_name,
                                                        message=gated, weights=dict(fw.score_weights)), {})
                    out[j] = o
                    if progress is not None:
                        progress(o)
                continue
            for j, o in zip(idx, self.schedule_group(fw, pod_group, [pods[j] for j in idx], explain=explain),
                            strict=True):
                out[j] = o
                if progress is not None:
                    progress(o)
        return [o for o in out if o is not None]

    def _refused(self, pod: Obj) -> Outcome | None:
        """An unplaced Outcome for a Pod of :attr:`rejected`, else None."""
        msg = self.rejected.get(pod_key(pod))
        if msg is None:
            return None
        fw = self.framework_for(pod)
        return Outcome(pod, ScheduleResult(pod=pod_key(pod), profile=fw.profile_name,
                                           message=f"not created: the API server refuses it: {msg}",
                                           weights=dict(fw.score_weights)), {})

    def _gated_member(self, fw: Framework, namespace: str, group: str) -> str | None:
        """Why the group's members are not tried when one of its unbound members waits for
        ``spec.schedulingGates`` (upstream's queue gates a pod group entity while any of its Pods is
        gated: ``runPreEnqueuePlugins``), else None."""
        for p in self.api.unscheduled if self.api is not None else ():
            spec = p.get("spec") or {}
            gates = spec.get("schedulingGates")
            if (gates and ob.namespace(p, "default") == namespace and pod_group_name(p) == group
                    and self.framework_for(p) is fw and not ob.meta(p).get("deletionTimestamp")):
                names = [str(g.get("name")) for g in gates if isinstance(g, dict)]
                return held_message("SchedulingGates", f"pod {pod_key(p)} of its pod group is waiting for "
                                                        f"scheduling gates: [{' '.join(names)}]")
        return None

    def _held_by_gang(self, pod: Obj) -> Outcome | None:
        """An unplaced Outcome when GangScheduling's PreEnqueue holds ``pod`` out of the queue: it names
        a PodGroup the snapshot does not hold, or its group has fewer Pods than ``minCount`` (upstream
        ``preEnqueueHierarchiesDisabled``: "waiting for pods's pod group ... to appear", "waiting for
        minCount pods from a gang to appear in scheduling queue"). The live scheduler never tries such
        a Pod; placing it alone showed a placement that cannot happen, and trying its group cycle a
        capacity refusal ("minCount (3) cannot be satisfied") where it waits for members. None
        otherwise."""
        fw = self.framework_for(pod)
        gang = fw.plugins.get("GangScheduling")
        if gang is None or pod_group_name(pod) is None or not isinstance(gang, PreEnqueuePlugin):
            return None
        try:
            status = gang.pre_enqueue(PodInfo(pod))
        except (PodParseError, AttributeError, TypeError, ValueError):
            return None  # schedule() reports the malformed field
        if status.is_success():
            return None
        return Outcome(pod, ScheduleResult(pod=pod_key(pod), profile=fw.profile_name,
                                           message=held_message(gang.name, status.message()),
                                           weights=dict(fw.score_weights)), {})

    def schedule_group(self, fw: Framework, pod_group: Obj, pods: list[Obj], *,
                       explain: bool = True) -> list[Outcome]:
        """One pod group cycle (:func:`~py_scheduler.framework.podgroup.schedule_pod_group`) over
        ``pods`` on this snapshot: each member's Reserve and in-memory assume (reverted unless the
        group is feasible), then PreBind of the placed members. One Outcome per Pod, in order; a Pod
        that cannot be parsed fails alone."""
        infos: list[PodInfo] = []
        outcomes: dict[int, Outcome] = {}
        for k, pod in enumerate(pods):
            refused = self._refused(pod)
            if refused is not None:
                outcomes[k] = refused
                continue
            try:
                infos.append(PodInfo(pod))
            except (PodParseError, AttributeError, TypeError, ValueError) as exc:
                msg = str(exc) if isinstance(exc, PodParseError) else f"malformed Pod: {exc}"
                outcomes[k] = Outcome(pod, ScheduleResult(pod=pod_key(pod), profile=fw.profile_name, message=msg,
                                                          weights=dict(fw.score_weights)), {})
        g = group_cycle(fw, self.algorithm, self.state, pod_group, infos, explain=explain) if infos else None
        members = iter(zip(infos, g.members if g is not None else [], strict=True))
        out: list[Outcome] = []
        for k, pod in enumerate(pods):
            if k in outcomes:
                out.append(outcomes[k])
                continue
            pi, c = next(members)
            o = self._outcome(fw, pod, pi, c)
            if g is not None and g.victims and c.nominated and o.result.post_filter is None:
                # the group's preemption, reported as a single Pod's is: nominated, victims not evicted
                o.result.post_filter = PostFilterResult(c.nominated, list(g.victims))
            out.append(o)
        return out
