"""The QueueingHint map of a profile: cluster event -> the hint functions of the plugins that
registered it (upstream: ``buildQueueingHintMap`` in ``pkg/scheduler/scheduler.go``; the map is
read by ``isPodWorthRequeuing`` in ``backend/queue/scheduling_queue.go``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from py_scheduler.framework.events import (
    ClusterEvent,
    ClusterEventWithHint,
    EnqueueExtensions,
    QueueingHintFn,
    Resource,
    match_cluster_events,
    unroll_pod_event,
    unroll_wildcard_resource,
)
from py_scheduler.framework.interfaces import (
    FilterPlugin,
    PermitPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    ReservePlugin,
)

log = logging.getLogger("py_scheduler.queue")

HintMap = dict[ClusterEvent, list["HintFunction"]]


@dataclass(slots=True)
class HintFunction:
    plugin: str
    fn: QueueingHintFn | None


def matching_hints(hint_map: HintMap, rejectors: frozenset[str],
                    ev: ClusterEvent) -> list[HintFunction]:
    """The hint functions of ``rejectors`` registered for an event matching ``ev``, in the order
    ``isPodWorthRequeuing`` calls them (the hint map's, then registration order)."""
    return [hf for registered, fns in hint_map.items() if match_cluster_events(registered, ev)
            for hf in fns if hf.plugin in rejectors]


def _enqueue_extension_plugins(fw: Any) -> list[Any]:
    """Plugins whose rejections are requeued by events (``shouldHaveEnqueueExtensions``):
    PreEnqueue, PreFilter, Filter, Reserve (and Permit) plugins."""
    out: list[Any] = []
    for p in fw.plugins.values():
        if isinstance(p, PreEnqueuePlugin | PreFilterPlugin | FilterPlugin | ReservePlugin | PermitPlugin):
            out.append(p)
    return out


def build_hint_map(fw: Any) -> tuple[HintMap, dict[str, list[ClusterEvent]]]:
    """``buildQueueingHintMap`` for one profile: event -> hint functions, plus plugin -> events."""
    hint_map: HintMap = {}
    plugin_events: dict[str, list[ClusterEvent]] = {}
    for p in _enqueue_extension_plugins(fw):
        if isinstance(p, EnqueueExtensions):
            try:
                registered: list[ClusterEventWithHint] = list(p.events_to_register())
            except Exception:
                log.exception("EventsToRegister of plugin %s failed; registering every event", p.name)
                registered = unroll_wildcard_resource()
        else:
            registered = unroll_wildcard_resource()
        evs: list[ClusterEvent] = []
        for ewh in registered:
            hf = HintFunction(p.name, ewh.hint_fn)
            targets = unroll_pod_event(ewh.event) if ewh.event.resource == Resource.POD else [ewh.event]
            for ev in targets:
                hint_map.setdefault(ev, []).append(hf)
                evs.append(ev)
        plugin_events[p.name] = evs
    return hint_map, plugin_events
