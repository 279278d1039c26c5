"""In-tree plugin registry: upstream plugin name -> factory.

Upstream: ``pkg/scheduler/framework/plugins/registry.go``. A factory takes the plugin's
``pluginConfig.args`` (a dict, ``{}`` when none) and a handle, and returns the plugin instance; it
raises :class:`py_scheduler.framework.errors.ConfigError` naming the bad field.

Each entry is ``"module:Class"`` and is imported on first use, so the registry stays one table. An
entry that cannot be imported is an error (:class:`~py_scheduler.framework.errors.PluginImportError`),
never a plugin silently left out. The configuration loader gets this module passed in as its
:class:`~py_scheduler.framework.handle.PluginRegistry`.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import TYPE_CHECKING

from py_scheduler.framework.errors import PluginImportError
from py_scheduler.framework.handle import PluginFactory

if TYPE_CHECKING:
    from py_scheduler.framework.config import ProfileConfig, SchedulerConfig
    from py_scheduler.framework.handle import ObjectLister
    from py_scheduler.framework.runtime import Framework

_ENTRIES: dict[str, str] = {
    "PrioritySort": "py_scheduler.plugins.queue_sort:PrioritySort",
    "SchedulingGates": "py_scheduler.plugins.scheduling_gates:SchedulingGates",
    "NodeName": "py_scheduler.plugins.node_name:NodeName",
    "NodeUnschedulable": "py_scheduler.plugins.node_unschedulable:NodeUnschedulable",
    "TaintToleration": "py_scheduler.plugins.taint_toleration:TaintToleration",
    "NodeAffinity": "py_scheduler.plugins.node_affinity:NodeAffinity",
    "NodePorts": "py_scheduler.plugins.node_ports:NodePorts",
    "NodeResourcesFit": "py_scheduler.plugins.node_resources_fit:NodeResourcesFit",
    "NodeResourcesBalancedAllocation": "py_scheduler.plugins.balanced_allocation:NodeResourcesBalancedAllocation",
    "ImageLocality": "py_scheduler.plugins.image_locality:ImageLocality",
    "PodTopologySpread": "py_scheduler.plugins.pod_topology_spread:PodTopologySpread",
    "InterPodAffinity": "py_scheduler.plugins.inter_pod_affinity:InterPodAffinity",
    "VolumeRestrictions": "py_scheduler.plugins.volume_restrictions:VolumeRestrictions",
    "NodeVolumeLimits": "py_scheduler.plugins.node_volume_limits:NodeVolumeLimits",
    "VolumeBinding": "py_scheduler.plugins.volume_binding:VolumeBinding",
    "VolumeZone": "py_scheduler.plugins.volume_zone:VolumeZone",
    "DynamicResources": "py_scheduler.plugins.dynamic_resources:DynamicResources",
    "DefaultPreemption": "py_scheduler.plugins.default_preemption:DefaultPreemption",
    "NodeDeclaredFeatures": "py_scheduler.plugins.node_declared_features:NodeDeclaredFeatures",
    "DefaultBinder": "py_scheduler.plugins.default_binder:DefaultBinder",
    "GangScheduling": "py_scheduler.plugins.gang_scheduling:GangScheduling",
    "TopologyPlacementGenerator": "py_scheduler.plugins.topology_placement:TopologyPlacement",
    "PodGroupPodsCount": "py_scheduler.plugins.pod_group_pods_count:PodGroupPodsCount",
    "GPUFilter": "py_scheduler.plugins.gpu.filter:GPUFilter",
    "GPUScore": "py_scheduler.plugins.gpu.score:GPUScore",
}


def register(name: str, entry: str) -> None:
    """Add an out-of-tree plugin (upstream ``app.WithPlugin(name, factory)`` given to
    ``NewSchedulerCommand``): ``entry`` is ``"module:Class"``, imported on first use like the in-tree
    ones. A program that embeds py-scheduler (or a test) calls this before loading its configuration.

    Raises:
        ValueError: ``name`` is already registered (upstream: "a plugin named X already exists").
    """
    if name in _ENTRIES:
        raise ValueError(f"a plugin named {name} already exists")
    _ENTRIES[name] = entry


def available() -> list[str]:
    """Every registered plugin, in registry order, after importing each one.

    Raises:
        PluginImportError: a registered plugin cannot be imported (a broken build fails at start-up,
            naming the plugin; it never silently disappears from the profile).
    """
    for name in _ENTRIES:
        get(name)
    return list(_ENTRIES)


def known(name: str) -> bool:
    """Whether ``name`` is registered."""
    return name in _ENTRIES


@functools.cache
def get(name: str) -> PluginFactory:
    """The factory (the class's ``create(args, handle)``) for ``name``; imported once.

    Raises:
        KeyError: unknown plugin name.
        PluginImportError: the plugin's module or class cannot be imported (message: the plugin, its
            ``module:Class`` entry and the cause).
    """
    entry = _ENTRIES[name]
    mod, _, attr = entry.partition(":")
    try:
        cls = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise PluginImportError(f"plugin {name!r} ({entry}) cannot be imported: {exc}") from exc
    factory: PluginFactory = cls.create
    return factory


def replica_framework(profile: ProfileConfig, cfg: SchedulerConfig, objects: ObjectLister) -> Framework:
    """``profile`` built with this registry over ``objects`` (a replica's cluster objects), with no
    client, events or queue: the Framework a node shard worker runs PreFilter, Filter, PreScore and
    Score with (py_scheduler/core/shards.py; a module-level function, so ``functools.partial(replica_framework,
    profile, cfg)`` pickles into a spawned worker).

    Raises:
        ConfigError: as :func:`~py_scheduler.framework.config.build_framework`.
    """
    from py_scheduler.framework.config import build_framework
    from py_scheduler.framework.handle import Handle

    return build_framework(profile, cfg, handle=Handle.detached(cfg.feature_gates, objects),
                           registry=sys.modules[__name__])  # this module is the registry
