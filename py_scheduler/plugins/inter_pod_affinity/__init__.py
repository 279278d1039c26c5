"""InterPodAffinity: required / preferred pod affinity and anti-affinity, in both directions.

Upstream (kube-scheduler v1.37.2):
``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go`` (PreFilter / Filter / AddPod /
RemovePod, the topology-pair counters, the self-affinity special case),
``scoring.go`` (PreScore / Score / NormalizeScore), ``plugin.go`` (args, namespaceSelector
resolution, namespace labels), ``staging/src/k8s.io/kube-scheduler/framework/types.go``
(``AffinityTerm.Matches``, ``GetAffinityTerms``, default namespaces),
``pkg/scheduler/framework/types.go`` (``NewPodInfo``: a term list that fails to parse is dropped)
and ``apis/config/validation/validation_pluginargs.go`` (``ValidateInterPodAffinityArgs``).

Feature gates at their v1.37 defaults: ``InterPodAffinityHostnameFastPath`` is Alpha and off, so
every term goes through the cluster-wide topology counters (the fast path gives the same
verdicts); ``MatchLabelKeysInPodAffinity`` is applied by the API server (merged into the
labelSelector at Pod creation), not here; ``InPlacePodVerticalScalingSchedulerPreemption`` is off.

Modules: :mod:`.common` (names, parsed terms), :mod:`.index` (the cross-cycle index),
:mod:`.filtering`, :mod:`.scoring`, :mod:`.plugin` (the class), as upstream's files.

Each Pod's terms are parsed once and memoized in ``pod_info.parsed["InterPodAffinity"]`` (existing
Pods too). The incoming Pod's ``namespaceSelector`` is resolved per cycle against the Namespaces in
``snapshot.objects`` (they may change); existing Pods' namespaceSelectors are matched against the
incoming Pod's namespace labels.
"""

from py_scheduler.plugins.inter_pod_affinity.plugin import InterPodAffinity

__all__ = ["InterPodAffinity"]
