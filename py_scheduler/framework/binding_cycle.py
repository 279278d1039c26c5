"""The binding cycle's extension points: Permit (with the waiting-Pods map), PreBind, Bind, PostBind,
and Unreserve.

Upstream: ``pkg/scheduler/framework/runtime/framework.go`` (``RunPermitPlugins``, ``AddWaitingPod``,
``WaitOnPermit``, ``WillWaitOnPermit``, ``RejectWaitingPod``, ``RunPreBindPreFlights``,
``RunPreBindPlugins``, ``RunBindPlugins``, ``RunPostBindPlugins``, ``RunReservePluginsUnreserve``)
and ``pkg/scheduler/framework/runtime/waiting_pods_map.go`` (``waitingPodsMap``, ``waitingPod``:
one timer per waiting plugin, ``Allow`` / ``Reject`` from anywhere, the first outcome wins).

Every function takes the profile's :class:`~py_scheduler.framework.runtime.Framework` (its
``permit_plugins``, ``pre_bind_plugins``, ``bind_plugins``, ``post_bind_plugins``,
``reserve_plugins`` and ``waiting_pods``) and reports durations through its observer as the
scheduling-cycle points do: ``observer(point, "", code, seconds)`` for the whole extension point
(``scheduler_framework_extension_point_duration_seconds{extension_point=Permit|PreBindPreFlight|
PreBind|Bind|PostBind|Unreserve}``), ``observer(point, plugin, code, seconds)`` per plugin in sampled
cycles (``scheduler_plugin_execution_duration_seconds``). A plugin that raises is a bug, not a reason
to lose the Pod: its exception becomes an Error status naming the plugin (upstream plugins return
errors; a panic would kill kube-scheduler).

Concurrency: everything runs on the asyncio event loop of the scheduler (one thread), so the
waiting-Pods map needs no locks; timers are ``loop.call_later`` handles.

Nothing here touches the API itself: PreBind and Bind plugins write through the Handle's client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from py_scheduler.framework.types import Code, CycleState, PodInfo, Status

if TYPE_CHECKING:
    from py_scheduler.framework.runtime import Framework

log = logging.getLogger("py_scheduler.framework")

MAX_PERMIT_TIMEOUT = 15 * 60.0
"""``maxTimeout`` (framework.go): a Permit plugin may make a Pod wait at most 15 minutes."""

SKIP_PRE_BIND_KEY = "framework/skipPreBindPlugins"
"""CycleState key of the PreBind plugins whose PreBindPreFlight returned Skip (upstream's
``CycleState.SetSkipPreBindPlugins``); :func:`run_pre_bind` does not call them."""

_CODE_NAMES = {Code.SUCCESS: "Success", Code.ERROR: "Error", Code.UNSCHEDULABLE: "Unschedulable",
               Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable", Code.WAIT: "Wait",
               Code.SKIP: "Skip", Code.PENDING: "Pending"}


def code_name(code: Code) -> str:
    """``fwk.Code.String()``: the ``status`` / ``result`` label of the metrics."""
    return _CODE_NAMES[code]


def _plugin_error(point: str, plugin: str, exc: BaseException) -> Status:
    log.error("%s plugin %s raised", point, plugin, exc_info=exc)
    return Status(Code.ERROR, [f"{type(exc).__name__}: {exc}"], plugin)


# --- the waiting-Pods map ------------------------------------------------------------------------------

class WaitingPod:
    """A Pod that a Permit plugin told to wait (``waitingPod``).

    ``plugins_wait``: plugin name -> seconds it may wait; each gets a timer that rejects the Pod
    (``rejected due to timeout after waiting <d> at plugin <name>``) unless the plugin allows it
    first. The first outcome wins: :meth:`allow` from the last pending plugin (Success),
    :meth:`reject` (Unschedulable) or :meth:`preempt` (Error); later ones are ignored.

    Must be created on the running event loop (the timers are ``call_later`` handles).
    """

    def __init__(self, pod: PodInfo, plugins_wait: Mapping[str, float]) -> None:
        self.pod = pod
        self._loop = asyncio.get_running_loop()
        self._result: asyncio.Future[Status] = self._loop.create_future()
        self.done = False
        self._pending: dict[str, asyncio.TimerHandle] = {}
        for plugin, seconds in plugins_wait.items():
            self._pending[plugin] = self._loop.call_later(
                max(seconds, 0.0), self.reject, plugin,
                f"rejected due to timeout after waiting {_go_duration(seconds)} at plugin {plugin}")

    def pending_plugins(self) -> list[str]:
        """``GetPendingPlugins``: the plugins that have not allowed the Pod yet."""
        return list(self._pending)

    def _send(self, status: Status) -> None:
        # upstream: a non-blocking send on a channel of size 1: the first status is kept.
        if not self._result.done():
            self._result.set_result(status)

    def allow(self, plugin: str) -> None:
        """``Allow``: ``plugin`` lets the Pod through; once no plugin is pending, the Pod is admitted."""
        timer = self._pending.pop(plugin, None)
        if timer is not None:
            timer.cancel()
        if self._pending:
            return
        self._send(Status.success())
        self.done = True

    def _stop(self, code: Code, plugin: str, message: str) -> bool:
        for timer in self._pending.values():
            timer.cancel()
        self._send(Status(code, [message], plugin))
        if self.done:
            return False
        self.done = True
        return True

    def reject(self, plugin: str, message: str) -> bool:
        """``Reject``: the Pod fails Permit as Unschedulable from ``plugin``. False when the Pod was
        already allowed or stopped."""
        return self._stop(Code.UNSCHEDULABLE, plugin, message)

    def preempt(self, plugin: str, message: str) -> bool:
        """``Preempt``: the Pod fails Permit with an Error (it was chosen as a preemption victim)."""
        return self._stop(Code.ERROR, plugin, message)

    async def outcome(self) -> Status:
        """Wait for the outcome (Success, or the rejecting / preempting status)."""
        return await asyncio.shield(self._result)


class WaitingPods:
    """``waitingPodsMap``: Pod UID -> :class:`WaitingPod`, for the binding cycle and for plugins
    that allow or reject Pods from elsewhere (``Handle.IterateOverWaitingPods`` /
    ``GetWaitingPod`` / ``RejectWaitingPod``)."""

    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}

    def add(self, wp: WaitingPod) -> None:
        self._pods[wp.pod.uid] = wp

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def get(self, uid: str) -> WaitingPod | None:
        return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)

    def reject(self, uid: str) -> bool:
        """``RejectWaitingPod`` (the Pod was deleted): True when a waiting Pod was rejected, so its
        binding cycle cleans up; False when ``uid`` is not waiting (any more)."""
        wp = self._pods.get(uid)
        return wp is not None and wp.reject("", "removed")


def _go_duration(seconds: float) -> str:
    """``time.Duration.String()`` for the timeout message (``10s``, ``1.5s``, ``15m0s``, ``500ms``)."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    total = round(seconds, 9)
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    sec = f"{s:.9f}".rstrip("0").rstrip(".") + "s"
    if h:
        return f"{int(h)}h{int(m)}m{sec}"
    if m:
        return f"{int(m)}m{sec}"
    return sec


# --- the extension points ------------------------------------------------------------------------------

class _Timer:
    """Observes one extension point (always) and its plugins (sampled cycles only)."""

    def __init__(self, fw: Framework, point: str) -> None:
        self.fw = fw
        self.point = point
        self.t0 = time.perf_counter()

    def plugin(self, plugin: str, status: Status, t0: float) -> None:
        if self.fw.observer is not None and self.fw.record_plugin_metrics:
            self.fw.observer(self.point, plugin, code_name(status.code), time.perf_counter() - t0)

    def done(self, status: Status) -> Status:
        if self.fw.observer is not None:
            self.fw.observer(self.point, "", code_name(status.code), time.perf_counter() - self.t0)
        return status


def run_permit(fw: Framework, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, dict[str, float]]:
    """``RunPermitPlugins``: every Permit plugin in order.

    Returns (status, plugin -> seconds to wait). A rejection comes back as the plugin returned it
    (with its name); an error as ``running Permit plugin "<name>": <message>``; when no plugin
    rejected and one or more asked to wait, a Wait status whose reasons end in ``one or more
    plugins asked to wait and no plugin rejected pod`` with each waiting plugin's timeout (at most
    :data:`MAX_PERMIT_TIMEOUT`); otherwise Success and an empty map. The caller adds a Wait to
    ``fw.waiting_pods`` (:func:`add_waiting_pod`) and the binding cycle waits on it
    (:func:`wait_on_permit`).
    """
    timer = _Timer(fw, "Permit")
    waits: dict[str, float] = {}
    wait_status: Status | None = None
    for pl in fw.permit_plugins:
        t0 = time.perf_counter()
        try:
            st, timeout = pl.permit(state, pod, node_name)
        except Exception as exc:
            st, timeout = _plugin_error("Permit", pl.name, exc), 0.0
        timer.plugin(pl.name, st, t0)
        if st.is_success():
            continue
        if st.is_rejected():
            return timer.done(Status(st.code, st.reasons, pl.name)), {}
        if st.code == Code.WAIT:
            waits[pl.name] = min(float(timeout), MAX_PERMIT_TIMEOUT)
            wait_status = Status(Code.WAIT, list(st.reasons), pl.name)
            continue
        return timer.done(Status(Code.ERROR, [f'running Permit plugin "{pl.name}": {st.message()}'], pl.name)), {}
    if wait_status is not None:
        wait_status.reasons.append("one or more plugins asked to wait and no plugin rejected pod")
        return timer.done(wait_status), waits
    return timer.done(Status.success()), {}


def add_waiting_pod(fw: Framework, pod: PodInfo, waits: Mapping[str, float]) -> WaitingPod:
    """``AddWaitingPod``: the Pod waits (with one timer per plugin) until allowed or rejected."""
    wp = WaitingPod(pod, waits)
    fw.waiting_pods.add(wp)
    return wp


def will_wait_on_permit(fw: Framework, pod: PodInfo) -> bool:
    """``WillWaitOnPermit``."""
    return fw.waiting_pods.get(pod.uid) is not None


async def wait_on_permit(fw: Framework, pod: PodInfo,
                         on_waited: Callable[[str, float], None] | None = None) -> Status:
    """``WaitOnPermit``: Success at once unless the Pod is waiting; otherwise wait for its outcome
    and leave the map. ``on_waited(result, seconds)`` is told how long it waited
    (``scheduler_permit_wait_duration_seconds{result}``). A rejection comes back as is; an error
    (preemption) as ``waiting on permit for pod: <message>``."""
    wp = fw.waiting_pods.get(pod.uid)
    if wp is None:
        return Status.success()
    t0 = time.perf_counter()
    try:
        st = await wp.outcome()
    finally:
        fw.waiting_pods.remove(pod.uid)
    if on_waited is not None:
        on_waited(code_name(st.code), time.perf_counter() - t0)
    if st.is_success() or st.is_rejected():
        return st
    return Status(Code.ERROR, [f"waiting on permit for pod: {st.message()}"], st.plugin)


def run_pre_bind_pre_flights(fw: Framework, state: CycleState, pod: PodInfo, node_name: str) -> Status:
    """``RunPreBindPreFlights``: Success when one or more PreBind plugins have work for this Pod,
    Skip when none has (the plugins that answered Skip are recorded under :data:`SKIP_PRE_BIND_KEY`
    and left out of :func:`run_pre_bind`); Error (``running PreBindPreFlight "<name>": ...``) when a
    plugin failed or returned anything but Success / Skip / Error (upstream's ``... returned "<code>",
    which is unsupported``)."""
    timer = _Timer(fw, "PreBindPreFlight")
    skipped: set[str] = set()
    result = Status.skip()
    for pl in fw.pre_bind_plugins:
        t0 = time.perf_counter()
        try:
            st = pl.pre_bind_pre_flight(state, pod, node_name)
        except Exception as exc:
            st = _plugin_error("PreBindPreFlight", pl.name, exc)
        timer.plugin(pl.name, st, t0)
        if st.code == Code.ERROR:
            return timer.done(Status(Code.ERROR, [f'running PreBindPreFlight "{pl.name}": {st.message()}'],
                                     pl.name))
        if st.is_success():
            result = Status.success()
        elif st.is_skip():
            skipped.add(pl.name)
        else:
            return timer.done(Status(Code.ERROR, [
                f'PreBindPreFlight {pl.name} returned "{code_name(st.code)}", which is unsupported. '
                "It is supposed to return Success, Skip, or Error status"], pl.name))
    state.data[SKIP_PRE_BIND_KEY] = frozenset(skipped)
    return timer.done(result)


async def run_pre_bind(fw: Framework, state: CycleState, pod: PodInfo, node_name: str) -> Status:
    """``RunPreBindPlugins``: the PreBind plugins in order (but those PreBindPreFlight skipped), one
    at a time; the first failure ends the run. A rejection comes back as the plugin returned it
    (with its name), any other failure as ``running PreBind plugin "<name>": <message>``."""
    timer = _Timer(fw, "PreBind")
    skipped = state.data.get(SKIP_PRE_BIND_KEY) or frozenset()
    for pl in fw.pre_bind_plugins:
        if pl.name in skipped:
            continue
        t0 = time.perf_counter()
        try:
            st = await pl.pre_bind(state, pod, node_name)
        except Exception as exc:
            st = _plugin_error("PreBind", pl.name, exc)
        timer.plugin(pl.name, st, t0)
        if st.is_success():
            continue
        if st.is_rejected():
            return timer.done(Status(st.code, st.reasons, pl.name))
        return timer.done(Status(Code.ERROR, [f'running PreBind plugin "{pl.name}": {st.message()}'], pl.name))
    return timer.done(Status.success())


async def run_bind(fw: Framework, state: CycleState, pod: PodInfo, node_name: str) -> Status:
    """``RunBindPlugins``: the Bind plugins in order until one does not Skip; that one's status is
    the result (a rejection as returned, an error as ``running Bind plugin "<name>": <message>``).
    Skip when there is no Bind plugin or every one skipped (the caller treats that as a failure:
    nobody bound the Pod)."""
    timer = _Timer(fw, "Bind")
    status = Status.skip()
    for pl in fw.bind_plugins:
        t0 = time.perf_counter()
        try:
            status = await pl.bind(state, pod, node_name)
        except Exception as exc:
            status = _plugin_error("Bind", pl.name, exc)
        timer.plugin(pl.name, status, t0)
        if status.is_skip():
            continue
        if status.is_success():
            return timer.done(status)
        if status.is_rejected():
            return timer.done(Status(status.code, status.reasons, pl.name))
        return timer.done(Status(Code.ERROR, [f'running Bind plugin "{pl.name}": {status.message()}'], pl.name))
    return timer.done(status)


def run_post_bind(fw: Framework, state: CycleState, pod: PodInfo, node_name: str) -> None:
    """``RunPostBindPlugins``: informational; a plugin that raises is logged and the others run."""
    timer = _Timer(fw, "PostBind")
    for pl in fw.post_bind_plugins:
        t0 = time.perf_counter()
        try:
            pl.post_bind(state, pod, node_name)
        except Exception:
            log.exception("PostBind plugin %s failed for pod %s", pl.name, pod.key)
        timer.plugin(pl.name, Status.success(), t0)
    timer.done(Status.success())


def run_unreserve(fw: Framework, state: CycleState, pod: PodInfo, node_name: str) -> None:
    """``RunReservePluginsUnreserve``: every Reserve plugin's Unreserve in *reverse* order; a plugin
    that raises is logged and the others still run (each must be idempotent)."""
    timer = _Timer(fw, "Unreserve")
    for pl in reversed(fw.reserve_plugins):
        t0 = time.perf_counter()
        try:
            pl.unreserve(state, pod, node_name)
        except Exception:
            log.exception("Unreserve plugin %s failed for pod %s", pl.name, pod.key)
        timer.plugin(pl.name, Status.success(), t0)
    timer.done(Status.success())
