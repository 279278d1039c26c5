"""Helpers shared by several plugins (tolerations, node / label selectors, score normalization).

Upstream counterparts: ``pkg/scheduler/framework/plugins/helper/``,
``staging/src/k8s.io/component-helpers/scheduling/corev1/`` and ``k8s.io/apimachinery/pkg/labels``.
"""
