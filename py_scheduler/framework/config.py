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

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from py_scheduler.framework.errors import ConfigError as ConfigError
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.handle import Handle, PluginRegistry
from py_scheduler.framework.runtime import Framework, Observer

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
    """``leaderElection`` (component-base ``LeaderElectionConfiguration``); durations in seconds.
    ``resource_lock`` is always ``leases`` (the only lock kube-scheduler accepts)."""

    leader_elect: bool = True
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    resource_name: str = "py-scheduler"
    resource_namespace: str = "kube-system"
    resource_lock: str = "leases"


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
    kubeconfig: str = ""
    """``clientConnection.kubeconfig`` (empty: the ``--kubeconfig`` flag, else in-cluster config)."""
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """``--feature-gates`` (not part of the file): the process's one gates value; the profiles'
    Handles carry this same object."""


def gated_default_plugins(gates: FeatureGates) -> list[tuple[str, int]]:
    """What ``applyFeatureGates`` appends to the default multiPoint list for the workload gates:
    GenericWorkload -> GangScheduling (``applyGangScheduling``); TopologyAwareWorkloadScheduling ->
    TopologyPlacementGenerator and PodGroupPodsCount weight 1 (``applyTopologyAwareWorkloadScheduling``)."""
    out = [("GangScheduling", 0)] if gates.generic_workload else []
    if gates.topology_aware_workload_scheduling:
        out += [("TopologyPlacementGenerator", 0), ("PodGroupPodsCount", 1)]
    return out


def default_multipoint(registry: PluginRegistry, with_gpu: bool = True,
                       gates: FeatureGates | None = None) -> list[tuple[str, int]]:
    """The default profile's multiPoint list restricted to plugins implemented in this build (with
    the plugins the workload gates add, after upstream's, before the GPU plugins)."""
    have = set(registry.available())
    gated = gated_default_plugins(gates or FeatureGates())
    plugins = UPSTREAM_DEFAULT_PLUGINS + gated + (GPU_PLUGINS if with_gpu else [])
    return [(n, w) for n, w in plugins if n in have]


def missing_default_plugins(registry: PluginRegistry) -> list[str]:
    """Upstream default plugins not implemented in this build (documented in the README)."""
    have = set(registry.available())
    return [n for n, _ in UPSTREAM_DEFAULT_PLUGINS if n not in have]


def expand_profile(profile: ProfileConfig, registry: PluginRegistry, with_gpu: bool = True,
                   gates: FeatureGates | None = None) -> tuple[list[tuple[str, int]], dict[str, list[str]]]:
    """Resolve a profile to (ordered plugin list with weights, per-extension-point names).

    multiPoint: the defaults, minus ``multiPoint.disabled`` (``*`` disables all), plus
    ``multiPoint.enabled`` (a re-enabled default takes its new weight in place). Then each
    extension point's own ``disabled`` removes the plugin from that point only, and its
    ``enabled`` adds it there (weights given on ``score`` win).

    Raises:
        ConfigError: unknown or unimplemented plugin names.
    """
    mp = profile.plugins.get("multiPoint", PluginSet())
    defaults = default_multipoint(registry, with_gpu, gates)
    if "*" in mp.disabled:
        defaults = []
    order: list[tuple[str, int]] = [(n, w) for n, w in defaults if n not in mp.disabled]
    names = [n for n, _ in order]
    for name, weight in mp.enabled:
        _check_plugin(registry, name, "multiPoint")
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
                _check_plugin(registry, name, point, must_exist=False)
        for name, weight in ps.enabled:
            _check_plugin(registry, name, point)
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


def _check_plugin(registry: PluginRegistry, name: str, where: str, must_exist: bool = True) -> None:
    if not registry.known(name):
        raise ConfigError(f"{where}: unknown plugin {name!r}")
    if must_exist and name not in registry.available():
        raise ConfigError(f"{where}: plugin {name!r} is not implemented in this py-scheduler build")


def build_framework(profile: ProfileConfig, cfg: SchedulerConfig | None = None,
                    observer: Observer | None = None, handle: Handle | None = None, *,
                    registry: PluginRegistry) -> Framework:
    """Instantiate a profile's plugins (with their pluginConfig args) into a :class:`Framework`.

    ``registry`` is the plugin registry (``py_scheduler.plugins.registry``), passed in so this module
    does not import the plugins. Every factory gets the profile's own copy of ``handle`` (a detached
    :class:`Handle` with ``cfg``'s gates when None) to which the Framework binds itself. The Handle's
    feature gates must be ``cfg.feature_gates`` (one source; ValueError otherwise).

    Raises:
        ConfigError: unknown plugin, bad args (the plugin's own message, prefixed with its name), no
        or several queue sort plugins, no bind plugin (upstream's ``NewFramework`` messages).
    """
    h = dataclasses.replace(handle) if handle is not None else Handle.detached(
        cfg.feature_gates if cfg is not None else None)
    if cfg is not None and h.feature_gates != cfg.feature_gates:
        raise ValueError("the Handle's feature gates must be the configuration's (one source: SchedulerConfig)")
    order, points = expand_profile(profile, registry, gates=h.feature_gates)
    for name in profile.plugin_config:
        if not registry.known(name):
            raise ConfigError(f"pluginConfig: unknown plugin {name!r}")
    instances: list[tuple[Any, int]] = []
    for name, weight in order:
        args = profile.plugin_config.get(name, {})
        try:
            plugin = registry.get(name)(args, h)
        except ConfigError as exc:
            raise ConfigError(f"pluginConfig[{name}].args: {exc}") from exc
        instances.append((plugin, weight))
    fw = Framework(profile.scheduler_name, instances, profile.percentage_of_nodes_to_score,
                   points or None, observer, handle=h)
    # NewFramework (pkg/scheduler/framework/runtime/framework.go): a profile that could not sort its
    # queue or bind a Pod is refused, not run (it would place Pods nowhere, or anywhere)
    if len(fw.queue_sort) != 1:
        raise ConfigError(f"only one queue sort plugin required for profile with scheduler name "
                          f"{profile.scheduler_name!r}, but got {len(fw.queue_sort)}")
    if not fw.bind_plugins:
        raise ConfigError(f"at least one bind plugin is needed for profile with scheduler name "
                          f"{profile.scheduler_name!r}")
    return fw


def build_frameworks(cfg: SchedulerConfig, observer: Observer | None = None,
                     handle: Handle | None = None, *, registry: PluginRegistry) -> dict[str, Framework]:
    """schedulerName -> Framework for every profile.

    Raises:
        ConfigError: duplicate schedulerName, or any :func:`build_framework` error.
    """
    out: dict[str, Framework] = {}
    for p in cfg.profiles:
        if p.scheduler_name in out:
            raise ConfigError(f"profiles: duplicate schedulerName {p.scheduler_name!r}")
        out[p.scheduler_name] = build_framework(p, cfg, observer, handle, registry=registry)
    return out


# --- KubeSchedulerConfiguration file -------------------------------------------------------------------
#
# Upstream: ``staging/src/k8s.io/kube-scheduler/config/v1/types.go`` (field names),
# ``pkg/scheduler/apis/config/v1/defaults.go`` (defaults), ``pkg/scheduler/apis/config/validation/
# validation.go`` (messages: "not in valid range [0-100]", "must be greater than 0", "must be greater than
# or equal to PodInitialBackoffSeconds", "should be an integer value greater than zero",
# `resourceLock value must be "leases"`, "must be the same for all profiles"), component-base
# ``config/validation/validation.go`` (leader election: "must be greater than zero", "must be greater than
# `RenewDeadline`"; client connection: burst "must be non-negative"). Decoding is strict like
# kube-scheduler's (``runtime.serializer.strict``): unknown and duplicate fields are errors.

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"

UPSTREAM_ONLY_POINTS = ("placementGenerate", "placementScore", "podGroupPostFilter")
"""Extension points of v1.37's API that py-scheduler does not run: accepted only when empty."""

_TOP_FIELDS = frozenset({
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
    "enableContentionProfiling", "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
    "profiles", "extenders", "delayCacheUntilActive",
})
_LEADER_FIELDS = frozenset({"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
                            "resourceName", "resourceNamespace"})
_CLIENT_FIELDS = frozenset({"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"})
_PROFILE_FIELDS = frozenset({"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"})
_PLUGIN_SET_FIELDS = frozenset({"enabled", "disabled"})
_PLUGIN_FIELDS = frozenset({"name", "weight"})
_PLUGIN_CONFIG_FIELDS = frozenset({"name", "args"})

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_LEADER_JITTER_FACTOR = 1.2  # client-go leaderelection.JitterFactor


class _Errors:
    """Collects ``path: message`` strings; :meth:`raise_if_any` raises one ConfigError with all of them."""

    def __init__(self, registry: PluginRegistry) -> None:
        self.registry = registry
        self.items: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.items.append(f"{path}: {msg}" if path else msg)

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError("; ".join(self.items), self.items)


def _q(value: Any) -> str:
    """A value quoted the way Go's ``%q`` / field errors show it (double quotes)."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mapping(value: Any, path: str, allowed: frozenset[str], errs: _Errors) -> dict[str, Any] | None:
    """``value`` as a dict with only ``allowed`` keys (unknown keys reported); None when absent/null."""
    if value is None:
        return None
    if not isinstance(value, dict):
        errs.add(path, f"expected an object, got {type(value).__name__} {_q(value)}")
        return None
    for key in value:
        if not isinstance(key, str):
            errs.add(path, f"field names must be strings, got {key!r}")
        elif key not in allowed:
            errs.add(_join(path, key), f"unknown field {_q(key)}")
    return value


def _int(value: Any, path: str, errs: _Errors, lo: int = -_INT64_MAX - 1, hi: int = _INT64_MAX) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errs.add(path, f"Invalid value: {_q(value)}: must be an integer")
        return None
    if not lo <= value <= hi:
        errs.add(path, f"Invalid value: {value}: out of range [{lo}, {hi}]")
        return None
    return value


def _bool(value: Any, path: str, errs: _Errors) -> bool | None:
    if not isinstance(value, bool):
        errs.add(path, f"Invalid value: {_q(value)}: must be true or false")
        return None
    return value


def _str(value: Any, path: str, errs: _Errors) -> str | None:
    if not isinstance(value, str):
        errs.add(path, f"Invalid value: {_q(value)}: must be a string")
        return None
    return value


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Parse a Go ``time.Duration`` string (``metav1.Duration``: ``15s``, ``1m30s``, ``250ms``, ``-2s``,
    ``0``) into seconds.

    Raises:
        ValueError: not a Go duration (a bare number other than ``0`` has no unit and is rejected, as Go
        does).
    """
    s = text.strip()
    if not s:
        raise ValueError(f"invalid duration {_q(text)}")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_RE.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {_q(text)}")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {_q(text)}")
    return sign * total


def _duration(value: Any, path: str, errs: _Errors) -> float | None:
    if not isinstance(value, str):
        errs.add(path, f"Invalid value: {_q(value)}: must be a duration string such as \"15s\"")
        return None
    try:
        return parse_go_duration(value)
    except ValueError as exc:
        errs.add(path, f"Invalid value: {_q(value)}: {exc}")
        return None


def _plugin_list(value: Any, path: str, point: str, errs: _Errors, disabled: bool) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    if value is None:
        return out
    if not isinstance(value, list):
        errs.add(path, f"expected a list, got {type(value).__name__}")
        return out
    available: set[str] | None = None
    for i, entry in enumerate(value):
        epath = f"{path}[{i}]"
        m = _mapping(entry, epath, _PLUGIN_FIELDS, errs)
        if m is None:
            if entry is None:
                errs.add(epath, "expected an object with a name")
            continue
        name = m.get("name")
        if not isinstance(name, str) or not name:
            errs.add(f"{epath}.name", "Required value" if name in (None, "") else f"Invalid value: {_q(name)}")
            continue
        weight: int | None = None
        if m.get("weight") is not None:
            weight = _int(m["weight"], f"{epath}.weight", errs, 0, _INT32_MAX)
        if disabled and name == "*":
            out.append((name, None))
            continue
        if not errs.registry.known(name):
            errs.add(f"{epath}.name", f"unknown plugin {_q(name)}")
            continue
        if not disabled:
            if available is None:
                available = set(errs.registry.available())
            if name not in available:
                errs.add(f"{epath}.name", f"plugin {_q(name)} is not implemented in this py-scheduler build")
                continue
        out.append((name, weight))
    return out


def _parse_plugins(value: Any, path: str, errs: _Errors) -> dict[str, PluginSet]:
    allowed = frozenset(("multiPoint", *EXTENSION_POINTS, *UPSTREAM_ONLY_POINTS))
    m = _mapping(value, path, allowed, errs)
    out: dict[str, PluginSet] = {}
    if m is None:
        return out
    for point, raw in m.items():
        if point not in allowed:
            continue
        ppath = f"{path}.{point}"
        ps_map = _mapping(raw, ppath, _PLUGIN_SET_FIELDS, errs)
        if ps_map is None:
            continue
        enabled = _plugin_list(ps_map.get("enabled"), f"{ppath}.enabled", point, errs, disabled=False)
        disabled = [n for n, _ in _plugin_list(ps_map.get("disabled"), f"{ppath}.disabled", point, errs,
                                               disabled=True)]
        if point in UPSTREAM_ONLY_POINTS:
            if enabled:
                errs.add(ppath, "extension point is not supported by py-scheduler")
            continue
        if enabled or disabled:
            out[point] = PluginSet(enabled=enabled, disabled=disabled)
    return out


def _parse_plugin_config(value: Any, path: str, errs: _Errors) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if value is None:
        return out
    if not isinstance(value, list):
        errs.add(path, f"expected a list, got {type(value).__name__}")
        return out
    for i, entry in enumerate(value):
        epath = f"{path}[{i}]"
        m = _mapping(entry, epath, _PLUGIN_CONFIG_FIELDS, errs)
        if m is None:
            continue
        name = m.get("name")
        if not isinstance(name, str) or not name:
            errs.add(f"{epath}.name", "Required value")
            continue
        if not errs.registry.known(name):
            errs.add(f"{epath}.name", f"unknown plugin {_q(name)}")
            continue
        if name in out:
            errs.add(epath, f"Duplicate value: {_q(name)}")
            continue
        args = m.get("args")
        if args is None:
            out[name] = {}
            continue
        if not isinstance(args, dict):
            errs.add(f"{epath}.args", f"expected an object, got {type(args).__name__}")
            continue
        args = dict(args)
        kind = args.pop("kind", None)
        api_version = args.pop("apiVersion", None)
        if kind is not None and kind != f"{name}Args":
            errs.add(f"{epath}.args.kind", f"Invalid value: {_q(kind)}: has to match plugin args {_q(name + 'Args')}")
        if api_version is not None and api_version != API_VERSION:
            errs.add(f"{epath}.args.apiVersion", f"Invalid value: {_q(api_version)}: must be {_q(API_VERSION)}")
        out[name] = args
    return out


def _parse_percentage(value: Any, path: str, errs: _Errors) -> int | None:
    if value is None:
        return None
    v = _int(value, path, errs, -_INT32_MAX - 1, _INT32_MAX)
    if v is not None and not 0 <= v <= 100:
        errs.add(path, f"Invalid value: {v}: not in valid range [0-100]")
        return None
    return v


def _parse_profile(value: Any, path: str, single: bool, errs: _Errors) -> ProfileConfig | None:
    m = _mapping(value, path, _PROFILE_FIELDS, errs)
    if m is None:
        if value is None:
            m = {}
        else:
            return None
    prof = ProfileConfig()
    name = m.get("schedulerName")
    if name is None:
        if not single:
            errs.add(f"{path}.schedulerName", "Required value")
    elif isinstance(name, str) and name:
        prof.scheduler_name = name
    else:
        errs.add(f"{path}.schedulerName", "Required value" if name == "" else f"Invalid value: {_q(name)}")
    prof.percentage_of_nodes_to_score = _parse_percentage(m.get("percentageOfNodesToScore"),
                                                          f"{path}.percentageOfNodesToScore", errs)
    prof.plugins = _parse_plugins(m.get("plugins"), f"{path}.plugins", errs)
    prof.plugin_config = _parse_plugin_config(m.get("pluginConfig"), f"{path}.pluginConfig", errs)
    return prof


def _parse_leader_election(value: Any, errs: _Errors) -> LeaderElectionConfig:
    le = LeaderElectionConfig()
    path = "leaderElection"
    m = _mapping(value, path, _LEADER_FIELDS, errs)
    if m is None:
        return le
    if m.get("leaderElect") is not None:
        b = _bool(m["leaderElect"], f"{path}.leaderElect", errs)
        if b is not None:
            le.leader_elect = b
    for key, attr in (("leaseDuration", "lease_duration_seconds"), ("renewDeadline", "renew_deadline_seconds"),
                      ("retryPeriod", "retry_period_seconds")):
        # A zero duration means "unset" upstream (RecommendedDefaultLeaderElectionConfiguration).
        if m.get(key) is not None:
            d = _duration(m[key], f"{path}.{key}", errs)
            if d is not None and d != 0:
                setattr(le, attr, d)
    for key, attr in (("resourceLock", "resource_lock"), ("resourceName", "resource_name"),
                      ("resourceNamespace", "resource_namespace")):
        if m.get(key) is not None:
            sv = _str(m[key], f"{path}.{key}", errs)
            if sv:  # empty string = unset -> default
                setattr(le, attr, sv)
    if le.leader_elect:
        if le.lease_duration_seconds <= 0:
            errs.add(f"{path}.leaseDuration", f"Invalid value: {le.lease_duration_seconds}s: must be greater than zero")
        if le.renew_deadline_seconds <= 0:
            errs.add(f"{path}.renewDeadline", f"Invalid value: {le.renew_deadline_seconds}s: must be greater than zero")
        if le.retry_period_seconds <= 0:
            errs.add(f"{path}.retryPeriod", f"Invalid value: {le.retry_period_seconds}s: must be greater than zero")
        if le.lease_duration_seconds <= le.renew_deadline_seconds:
            errs.add(f"{path}.leaseDuration",
                     f"Invalid value: {le.renew_deadline_seconds}s: must be greater than `RenewDeadline`")
        if le.retry_period_seconds > 0 and le.renew_deadline_seconds <= _LEADER_JITTER_FACTOR * le.retry_period_seconds:
            errs.add(f"{path}.renewDeadline", f"Invalid value: {le.renew_deadline_seconds}s: "
                     f"must be greater than retryPeriod*{_LEADER_JITTER_FACTOR}")
        if le.resource_lock != "leases":
            errs.add(f"{path}.resourceLock",
                     f'Invalid value: {_q(le.resource_lock)}: resourceLock value must be "leases"')
    return le


def _check_common_queue_sort(raw_profiles: list[Any], errs: _Errors) -> None:
    """``validateCommonQueueSort``: every profile names the same queueSort plugin set."""

    def qs(p: Any) -> Any:
        plugins = p.get("plugins") if isinstance(p, dict) else None
        return plugins.get("queueSort") if isinstance(plugins, dict) else None

    first = qs(raw_profiles[0])
    if isinstance(first, dict) and isinstance(first.get("enabled"), list) and len(first["enabled"]) > 1:
        errs.add("profiles[0].plugins.queueSort.Enabled",
                 f"Invalid value: {len(first['enabled'])}: only one queue sort plugin can be enabled")
    for i in range(1, len(raw_profiles)):
        if (qs(raw_profiles[i]) or {}) != (first or {}):
            errs.add(f"profiles[{i}].plugins.queueSort", "must be the same for all profiles")


def parse_config(doc: dict[str, Any], *, registry: PluginRegistry) -> SchedulerConfig:
    """Build a :class:`SchedulerConfig` from a decoded KubeSchedulerConfiguration object.

    Strict: every unknown field, at any level, is an error, as are a wrong ``apiVersion`` / ``kind``,
    unknown or unimplemented plugin names, and values upstream's validation rejects. Defaults are
    kube-scheduler's (``defaults.go``) except the profile name ``py-scheduler`` and the Lease name
    ``py-scheduler``. Plugin ``args`` are checked for shape only (an object; ``kind`` must be
    ``<Plugin>Args`` if given); their content is validated by each plugin's ``create`` when
    :func:`build_frameworks` runs.

    Accepted and ignored: ``enableProfiling``, ``enableContentionProfiling``, ``delayCacheUntilActive``,
    ``clientConnection.acceptContentTypes`` / ``contentType`` (the client speaks JSON).
    Rejected: a non-empty ``extenders`` list (not supported).

    Raises:
        ConfigError: all problems found, ``"; "``-joined, each ``<field path>: <message>`` (e.g.
        ``profiles[0].plugins.score.enabled[1].name: unknown plugin "Foo"``); ``.errors`` holds the list.
    """
    errs = _Errors(registry)
    top = _mapping(doc, "", _TOP_FIELDS, errs)
    if top is None:
        errs.add("", "a KubeSchedulerConfiguration must be a YAML/JSON object")
        errs.raise_if_any()
        raise AssertionError("unreachable")
    if top.get("apiVersion") != API_VERSION:
        errs.add("apiVersion", f"Invalid value: {_q(top.get('apiVersion'))}: must be {_q(API_VERSION)}")
    if top.get("kind") != KIND:
        errs.add("kind", f"Invalid value: {_q(top.get('kind'))}: must be {_q(KIND)}")

    cfg = SchedulerConfig()
    if top.get("parallelism") is not None:
        par = _int(top["parallelism"], "parallelism", errs, -_INT32_MAX - 1, _INT32_MAX)
        if par is not None:
            if par <= 0:
                errs.add("parallelism", f"Invalid value: {par}: should be an integer value greater than zero")
            else:
                cfg.parallelism = par
    pct = _parse_percentage(top.get("percentageOfNodesToScore"), "percentageOfNodesToScore", errs)
    if pct is not None:
        cfg.percentage_of_nodes_to_score = pct
    initial, maximum = 1, 10
    if top.get("podInitialBackoffSeconds") is not None:
        v = _int(top["podInitialBackoffSeconds"], "podInitialBackoffSeconds", errs)
        if v is not None:
            initial = v
            if v <= 0:
                errs.add("podInitialBackoffSeconds", f"Invalid value: {v}: must be greater than 0")
    if top.get("podMaxBackoffSeconds") is not None:
        v = _int(top["podMaxBackoffSeconds"], "podMaxBackoffSeconds", errs)
        if v is not None:
            maximum = v
    if maximum < initial:
        errs.add("podMaxBackoffSeconds",
                 f"Invalid value: {maximum}: must be greater than or equal to PodInitialBackoffSeconds")
    cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds = float(initial), float(maximum)

    cfg.leader_election = _parse_leader_election(top.get("leaderElection"), errs)

    cc = _mapping(top.get("clientConnection"), "clientConnection", _CLIENT_FIELDS, errs)
    if cc is not None:
        if cc.get("kubeconfig") is not None:
            kc = _str(cc["kubeconfig"], "clientConnection.kubeconfig", errs)
            cfg.kubeconfig = kc or ""
        if cc.get("qps") is not None:
            qps = cc["qps"]
            if isinstance(qps, bool) or not isinstance(qps, int | float):
                errs.add("clientConnection.qps", f"Invalid value: {_q(qps)}: must be a number")
            elif qps < 0:
                errs.add("clientConnection.qps", f"Invalid value: {qps}: must be non-negative")
            elif qps > 0:  # 0 = unset -> 50
                cfg.qps = float(qps)
        if cc.get("burst") is not None:
            burst = _int(cc["burst"], "clientConnection.burst", errs, -_INT32_MAX - 1, _INT32_MAX)
            if burst is not None:
                if burst < 0:
                    errs.add("clientConnection.burst", f"Invalid value: {burst}: must be non-negative")
                elif burst > 0:  # 0 = unset -> 100
                    cfg.burst = burst
        for key in ("acceptContentTypes", "contentType"):
            if cc.get(key) is not None:
                _str(cc[key], f"clientConnection.{key}", errs)

    for key in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        if top.get(key) is not None:
            _bool(top[key], key, errs)
    ext = top.get("extenders")
    if ext:
        errs.add("extenders", "scheduler extenders are not supported by py-scheduler")

    raw_profiles = top.get("profiles")
    if raw_profiles is None or raw_profiles == []:
        cfg.profiles = [ProfileConfig()]
    elif not isinstance(raw_profiles, list):
        errs.add("profiles", f"expected a list, got {type(raw_profiles).__name__}")
    else:
        profiles: list[ProfileConfig] = []
        seen: dict[str, int] = {}
        for i, raw in enumerate(raw_profiles):
            prof = _parse_profile(raw, f"profiles[{i}]", len(raw_profiles) == 1, errs)
            if prof is None:
                continue
            if prof.scheduler_name in seen:
                errs.add(f"profiles[{i}].schedulerName",
                         f"Duplicate value: {_q(f'profiles[{seen[prof.scheduler_name]}].schedulerName')}")
            seen.setdefault(prof.scheduler_name, i)
            profiles.append(prof)
        _check_common_queue_sort(raw_profiles, errs)
        cfg.profiles = profiles
    errs.raise_if_any()
    return cfg


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (strict decoding, like kube-scheduler's)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in out:
            mark = key_node.start_mark
            raise ConfigError(f"line {mark.line + 1}: duplicate field {_q(key)}")
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_config(path: str | Path, *, registry: PluginRegistry) -> SchedulerConfig:
    """Read a KubeSchedulerConfiguration YAML (or JSON) file and :func:`parse_config` it.

    Raises:
        ConfigError: unreadable file, invalid YAML, more than one document, duplicate fields, or any
        :func:`parse_config` error; the message starts with the file name.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read config file: {exc}") from exc
    try:
        docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{p}: invalid YAML: nested too deeply") from exc
    except ValueError as exc:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
        raise ConfigError(f"{p}: invalid YAML: {str(exc).split(';')[0]}") from exc
    if len(docs) != 1:
        raise ConfigError(f"{p}: expected exactly one KubeSchedulerConfiguration document, found {len(docs)}")
    try:
        return parse_config(docs[0], registry=registry)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}", exc.errors) from exc
