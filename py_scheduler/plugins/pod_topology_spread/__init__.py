"""PodTopologySpread: spread matching Pods evenly across topology domains.

Upstream (kube-scheduler v1.37.2):
``pkg/scheduler/framework/plugins/podtopologyspread/common.go`` (constraint parsing,
``matchLabelKeys`` merge, node inclusion policies, ``countPodsMatchSelector``),
``filtering.go`` (PreFilter / Filter / AddPod / RemovePod, critical paths, ``minDomains``),
``scoring.go`` (PreScore / Score / NormalizeScore, ``log(size+2)`` topology weights),
``plugin.go`` (args, system default constraints, reason strings),
``helper/spread.go`` (default selector, see :mod:`py_scheduler.plugins.helpers.spread`) and
``apis/config/validation/validation_pluginargs.go`` (``ValidatePodTopologySpreadArgs``).

Modules, as upstream's files: :mod:`.common`, :mod:`.filtering`, :mod:`.scoring`, :mod:`.plugin`
(the class, its args), and :mod:`.count_memo` (py-scheduler's per-node count memo).

Feature gates at their v1.37 defaults: ``NodeInclusionPolicyInPodTopologySpread`` (GA, on),
``MatchLabelKeysInPodTopologySpread`` (on), ``TaintTolerationComparisonOperators`` (off),
``InPlacePodVerticalScalingSchedulerPreemption`` (off, so no resize-deferred Skip).

Float arithmetic follows Go exactly: ``math.Log`` is Go's own algorithm (:func:`go_log`, which
differs from C's ``log`` in the last bit for some inputs), ``math.Round`` rounds halves away from
zero (:func:`go_round`), float -> int64 conversions truncate.

Deviation for bad input only: a Pod whose ``topologySpreadConstraints`` cannot be parsed (a
malformed label selector, a non-integer ``maxSkew``...) is rejected at PreFilter as
UnschedulableAndUnresolvable with a message naming the field and value (upstream reports an
internal error; the API server never lets such a Pod through).
"""

from py_scheduler.plugins.pod_topology_spread.plugin import PodTopologySpread

__all__ = ["PodTopologySpread"]
