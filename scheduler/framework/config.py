"""Scheduler configuration: the KubeSchedulerConfiguration model, its defaults, and profiles.

Upstream: ``pkg/scheduler/apis/config/v1/default_plugins.go`` (the default multiPoint plugin list
and weights; with DynamicResourceAllocation GA and NodeDeclaredFeatures on by default in 1.37),
``apis/config/v1/defaults.go`` (percentageOfNodesToScore 0 = adaptive, backoff 1 s / 10 s, lease
15 s / 10 s / 2 s, client qps 50 / burst 100) and ``framework/runtime/framework.go``
(``expandMultiPointPlugins``: multiPoint first, then per-point enables; explicit weights win).

Defaults equal kube-scheduler's except the default profile name, ``py-scheduler``, which also
carries the GPU plugins (they Skip for Pods that ask for no GPU, so non-GPU placements are
unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.framework.runtime import Framework, Observer
from scheduler.plugins import registry

DEFAULT_SCHEDULER_NAME = "py-scheduler"

UPSTREAM_DEFAULT_PLUGINS: list[tuple[str, int]] = [
    ("SchedulingGates", 0), ("PrioritySort", 0), ("NodeName", 0), ("NodeUnschedulable", 0),
    ("TaintToleration", 3), ("NodeAffinity", 2), ("NodePorts", 0), ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0), ("NodeVolumeLimits", 0), ("VolumeBinding", 0), ("VolumeZone", 0),
    ("PodTopologySpread", 2), ("InterPodAffinity", 2), ("DynamicResources", 2),
    ("DefaultPreemption", 0), ("NodeResourcesBalancedAllocation", 1), ("ImageLocality", 1),
    ("DefaultBinder", 0), ("NodeDeclaredFeatures", 0),
]
"""kube-scheduler v1.37's default multiPoint list (name, weight; 0 = no weight given)."""

GPU_PLUGINS: list[tuple[str, int]] = [("GPUFilter", 0), ("GPUScore", 2)]

EXTENSION_POINTS = ("queueSort", "preEnqueue", "preFilter", "filter", "postFilter", "preScore", "score",
                    "reserve", "permit", "preBind", "bind", "postBind")


class ConfigError(ValueError):
    """A configuration that must stop start-up; the message names the field and value."""


@dataclass(slots=True)
class PluginSet:
    """``enabled`` (name, weight or None) and ``disabled`` names of one extension point."""

    enabled: list[tuple[str, int | None]] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ProfileConfig:
    """One ``profiles[]`` entry."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    plugins: dict[str, PluginSet] = field(default_factory=dict)  # "multiPoint", "score", ...
    plugin_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    percentage_of_nodes_to_score: int | None = None


@dataclass(slots=True)
class LeaderElectionConfig:
    leader_elect: bool = True
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    resource_name: str = "py-scheduler"
    resource_namespace: str = "kube-system"


@dataclass(slots=True)
class SchedulerConfig:
    """``KubeSchedulerConfiguration`` (kubescheduler.config.k8s.io/v1) as far as py-scheduler
    uses it; units: seconds, percent, queries per second."""

    profiles: list[ProfileConfig] = field(default_factory=lambda: [ProfileConfig()])
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    qps: float = 50.0
    burst: int = 100
    parallelism: int = 16


def default_multipoint(with_gpu: bool = True) -> list[tuple[str, int]]:
    """The default profile's multiPoint list restricted to plugins implemented in this build."""
    have = set(registry.available())
    plugins = UPSTREAM_DEFAULT_PLUGINS + (GPU_PLUGINS if with_gpu else [])
    return [(n, w) for n, w in plugins if n in have]


def missing_default_plugins() -> list[str]:
    """Upstream default plugins not implemented in this build (documented in the README)."""
    have = set(registry.available())
    return [n for n, _ in UPSTREAM_DEFAULT_PLUGINS if n not in have]


def expand_profile(profile: ProfileConfig, with_gpu: bool = True) -> tuple[list[tuple[str, int]],
                                                                          dict[str, list[str]]]:
    """Resolve a profile to (ordered plugin list with weights, per-extension-point names).

    multiPoint: the defaults, minus ``multiPoint.disabled`` (``*`` disables all), plus
    ``multiPoint.enabled`` (a re-enabled default takes its new weight in place). Then each
    extension point's own ``disabled`` removes the plugin from that point only, and its
    ``enabled`` adds it there (weights given on ``score`` win).

    Raises:
        ConfigError: unknown or unimplemented plugin names.
    """
    mp = profile.plugins.get("multiPoint", PluginSet())
    defaults = default_multipoint(with_gpu)
    if "*" in mp.disabled:
        defaults = []
    order: list[tuple[str, int]] = [(n, w) for n, w in defaults if n not in mp.disabled]
    names = [n for n, _ in order]
    for name, weight in mp.enabled:
        _check_plugin(name, "multiPoint")
        if name in names:
            i = names.index(name)
            order[i] = (name, weight if weight is not None else order[i][1])
        else:
            order.append((name, weight or 0))
            names.append(name)
    points: dict[str, list[str]] = {}
    for point, ps in profile.plugins.items():
        if point == "multiPoint":
            continue
        if point not in EXTENSION_POINTS:
            raise ConfigError(f"profiles[{profile.scheduler_name}].plugins: unknown extension point {point!r}")
        for name in ps.disabled:
            if name != "*":
                _check_plugin(name, point, must_exist=False)
        for name, weight in ps.enabled:
            _check_plugin(name, point)
            if name not in names:
                order.append((name, weight or 0))
                names.append(name)
            elif point == "score" and weight is not None:
                i = names.index(name)
                order[i] = (name, weight)
        if ps.disabled or ps.enabled:
            points[point] = [] if "*" in ps.disabled else [
                n for n in names if n not in ps.disabled and not _only_points(n, profile, point)]
            for name, _ in ps.enabled:
                if name not in points[point]:
                    points[point].append(name)
    return order, points


def _only_points(name: str, profile: ProfileConfig, point: str) -> bool:
    """True when ``name`` came in only through other extension points' ``enabled`` lists."""
    mp_names = {n for n, _ in profile.plugins.get("multiPoint", PluginSet()).enabled}
    if name in mp_names or name in {n for n, _ in UPSTREAM_DEFAULT_PLUGINS + GPU_PLUGINS}:
        return False
    return not any(n == name for n, _ in profile.plugins.get(point, PluginSet()).enabled)


def _check_plugin(name: str, where: str, must_exist: bool = True) -> None:
    if not registry.known(name):
        raise ConfigError(f"{where}: unknown plugin {name!r}")
    if must_exist and name not in registry.available():
        raise ConfigError(f"{where}: plugin {name!r} is not implemented in this py-scheduler build")


def build_framework(profile: ProfileConfig, cfg: SchedulerConfig | None = None,
                    observer: Observer | None = None, handle: Any = None) -> Framework:
    """Instantiate a profile's plugins (with their pluginConfig args) into a :class:`Framework`.

    Raises:
        ConfigError: unknown plugin, bad args (the plugin's own message, prefixed with its name).
    """
    order, points = expand_profile(profile)
    for name in profile.plugin_config:
        if not registry.known(name):
            raise ConfigError(f"pluginConfig: unknown plugin {name!r}")
    instances: list[tuple[Any, int]] = []
    for name, weight in order:
        args = profile.plugin_config.get(name, {})
        try:
            plugin = registry.get(name)(args, handle)
        except ConfigError as exc:
            raise ConfigError(f"pluginConfig[{name}].args: {exc}") from exc
        instances.append((plugin, weight))
    return Framework(profile.scheduler_name, instances, profile.percentage_of_nodes_to_score,
                     points or None, observer)


def build_frameworks(cfg: SchedulerConfig, observer: Observer | None = None,
                     handle: Any = None) -> dict[str, Framework]:
    """schedulerName -> Framework for every profile.

    Raises:
        ConfigError: duplicate schedulerName, or any :func:`build_framework` error.
    """
    out: dict[str, Framework] = {}
    for p in cfg.profiles:
        if p.scheduler_name in out:
            raise ConfigError(f"profiles: duplicate schedulerName {p.scheduler_name!r}")
        out[p.scheduler_name] = build_framework(p, cfg, observer, handle)
    return out
