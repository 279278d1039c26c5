"""Feature gates: kube-scheduler's ``--feature-gates``, the one configuration path of ``run``,
``explain`` and ``simulate``.

Upstream: ``pkg/features/kube_features.go`` (the gates, their defaults in v1.37) and
``pkg/scheduler/framework/plugins/feature/feature.go`` (``feature.Features``: the gates a plugin
factory receives). Only gates that change what py-scheduler does are accepted:

* ``OpportunisticBatching`` (Beta, on): the batch of identical Pods (``py_scheduler.framework.batch``).
* ``TaintTolerationComparisonOperators`` (Alpha, off): ``Lt`` / ``Gt`` tolerations compare the
  taint's value with the toleration's as decimal int64 (TaintToleration's Filter and Score,
  NodeUnschedulable; ``k8s.io/api/core/v1/toleration.go`` ``ToleratesTaint``); off, they tolerate
  nothing.
* ``GenericWorkload`` (Beta, off): the default profile gains GangScheduling; PodGroups are watched.
* ``TopologyAwareWorkloadScheduling`` (Alpha, off; needs GenericWorkload): TopologyPlacementGenerator
  and PodGroupPodsCount (weight 1).

Every command calls :func:`apply_feature_gates` with its ``--feature-gates`` value before it builds
its profiles; plugin factories read :func:`enabled`.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULTS", "GATES", "GENERIC_WORKLOAD", "OPPORTUNISTIC_BATCHING", "TAINT_TOLERATION_COMPARISON_OPERATORS",
           "TOPOLOGY_AWARE_WORKLOAD_SCHEDULING", "apply_feature_gates", "enabled", "parse_feature_gates", "set_gates"]

OPPORTUNISTIC_BATCHING = "OpportunisticBatching"
TAINT_TOLERATION_COMPARISON_OPERATORS = "TaintTolerationComparisonOperators"
GENERIC_WORKLOAD = "GenericWorkload"
TOPOLOGY_AWARE_WORKLOAD_SCHEDULING = "TopologyAwareWorkloadScheduling"

DEFAULTS: Mapping[str, bool] = {
    OPPORTUNISTIC_BATCHING: True,
    TAINT_TOLERATION_COMPARISON_OPERATORS: False,
    GENERIC_WORKLOAD: False,
    TOPOLOGY_AWARE_WORKLOAD_SCHEDULING: False,
}
"""The gates py-scheduler understands and their v1.37 defaults."""

GATES: dict[str, bool] = dict(DEFAULTS)
"""The process's gate values (one dict, read when profiles are built)."""
_enabled = GATES


def _check_dependencies(gates: Mapping[str, bool]) -> None:
    if gates.get(TOPOLOGY_AWARE_WORKLOAD_SCHEDULING) and not gates.get(GENERIC_WORKLOAD):
        raise ValueError(f"feature gate {TOPOLOGY_AWARE_WORKLOAD_SCHEDULING} depends on {GENERIC_WORKLOAD}, "
                         f"which is off")


def set_gates(gates: Mapping[str, bool]) -> None:
    """Merge ``gates`` into the process's gates (the others keep their values).

    Raises:
        ValueError: an unknown gate, or TopologyAwareWorkloadScheduling on without GenericWorkload
            (nothing is changed then).
    """
    unknown = sorted(set(gates) - set(DEFAULTS))
    if unknown:
        raise ValueError(_unrecognized(unknown[0]))
    merged = {**GATES, **gates}
    _check_dependencies(merged)
    GATES.update(merged)


def _unrecognized(name: str) -> str:
    """Upstream's ``unrecognized feature gate: X``, plus which gates are taken: a kube-scheduler gate
    such as DynamicResourceAllocation is refused here too, and a user porting kube-scheduler's flags
    needs to know that the others are simply fixed at their v1.37 defaults."""
    return (f"unrecognized feature gate: {name} (py-scheduler takes {', '.join(DEFAULTS)}; kube-scheduler's "
            "other gates stay at their v1.37 defaults)")


def parse_feature_gates(spec: str) -> dict[str, bool]:
    """Parse ``Name=true|false,...`` (component-base's ``featuregate.Set``: spaces around entries
    are ignored, values are case-insensitive). Returns the gates given.

    Raises:
        ValueError: an entry without ``=`` (``missing bool value for X``), a value other than true /
            false, or an unknown gate (``unrecognized feature gate: X``, as upstream).
    """
    gates: dict[str, bool] = {}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or value.strip().lower() not in ("true", "false"):
            raise ValueError(f"missing bool value for {name}" if not sep else
                             f"invalid value of {name}={value.strip()}, err: must be true or false")
        if name not in DEFAULTS:
            raise ValueError(_unrecognized(name))
        gates[name] = value.strip().lower() == "true"
    return gates


def apply_feature_gates(spec: str) -> dict[str, bool]:
    """Parse ``spec`` and make it the process's gates (the defaults for those not given); the
    profiles built afterwards see them. ``OpportunisticBatching``, when given, also sets
    ``runtime.OPPORTUNISTIC_BATCHING_DEFAULT``. Returns the gates given.

    Raises:
        ValueError: see :func:`parse_feature_gates` (nothing is changed then).
    """
    gates = parse_feature_gates(spec)
    _check_dependencies({**DEFAULTS, **gates})
    _enabled.clear()
    _enabled.update(DEFAULTS)
    _enabled.update(gates)
    if OPPORTUNISTIC_BATCHING in gates:
        from py_scheduler.framework import runtime

        runtime.OPPORTUNISTIC_BATCHING_DEFAULT = gates[OPPORTUNISTIC_BATCHING]
    return gates


def enabled(name: str) -> bool:
    """Whether gate ``name`` is on.

    Raises:
        KeyError: not a gate of :data:`DEFAULTS`.
    """
    return _enabled[name]
