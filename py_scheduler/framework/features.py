"""Feature gates: kube-scheduler's ``--feature-gates``, one typed :class:`FeatureGates` value per process,
the one configuration path of ``run``, ``explain`` and ``simulate``.

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

Every command parses its ``--feature-gates`` value with :meth:`FeatureGates.parse` into the
configuration (``SchedulerConfig.feature_gates``); the profiles' :class:`~py_scheduler.framework.handle.Handle`
carries the same object to the runtime and the plugin factories. There is no process-global state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["DEFAULTS", "GENERIC_WORKLOAD", "OPPORTUNISTIC_BATCHING", "TAINT_TOLERATION_COMPARISON_OPERATORS",
           "TOPOLOGY_AWARE_WORKLOAD_SCHEDULING", "FeatureGates", "parse_feature_gates"]

OPPORTUNISTIC_BATCHING = "OpportunisticBatching"
TAINT_TOLERATION_COMPARISON_OPERATORS = "TaintTolerationComparisonOperators"
GENERIC_WORKLOAD = "GenericWorkload"
TOPOLOGY_AWARE_WORKLOAD_SCHEDULING = "TopologyAwareWorkloadScheduling"

DEFAULTS: Mapping[str, bool] = MappingProxyType({
    OPPORTUNISTIC_BATCHING: True,
    TAINT_TOLERATION_COMPARISON_OPERATORS: False,
    GENERIC_WORKLOAD: False,
    TOPOLOGY_AWARE_WORKLOAD_SCHEDULING: False,
})
"""The gates py-scheduler understands and their v1.37 defaults."""


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The gates' values (``featuregate.FeatureGate`` after ``--feature-gates``; immutable). The
    default value is every gate at its v1.37 default."""

    opportunistic_batching: bool = True
    taint_toleration_comparison_operators: bool = False
    generic_workload: bool = False
    topology_aware_workload_scheduling: bool = False

    def __post_init__(self) -> None:
        if self.topology_aware_workload_scheduling and not self.generic_workload:
            raise ValueError(f"feature gate {TOPOLOGY_AWARE_WORKLOAD_SCHEDULING} depends on {GENERIC_WORKLOAD}, "
                             f"which is off")

    @classmethod
    def of(cls, gates: Mapping[str, bool]) -> FeatureGates:
        """The defaults with ``gates`` (gate name -> value) applied. Raises ValueError: an unknown gate,
        or TopologyAwareWorkloadScheduling on without GenericWorkload."""
        unknown = sorted(set(gates) - set(DEFAULTS))
        if unknown:
            raise ValueError(_unrecognized(unknown[0]))
        return cls(**{re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in gates.items()})

    @classmethod
    def parse(cls, spec: str) -> FeatureGates:
        """``--feature-gates`` ``spec`` over the defaults. Raises ValueError: see :func:`parse_feature_gates`
        and :meth:`of`."""
        return cls.of(parse_feature_gates(spec))


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
