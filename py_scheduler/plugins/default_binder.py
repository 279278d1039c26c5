"""DefaultBinder: the Bind extension point.

Upstream: ``pkg/scheduler/framework/plugins/defaultbinder/default_binder.go``. The plugin itself is
pure: it describes the ``pods/binding`` subresource body; the live process
(``py_scheduler.app.binder``) POSTs it through the API adapter. Keeping the API call out of the plugin
is what lets the same profile run offline.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.handle import Handle
from py_scheduler.framework.types import PodInfo

NAME = "DefaultBinder"


class DefaultBinder:
    """Bind: ``POST /api/v1/namespaces/NS/pods/NAME/binding`` with ``metadata.uid`` set, so a Pod
    deleted and re-created under the same name is never bound by mistake."""

    name = NAME

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> DefaultBinder:
        return cls()

    def binding(self, pod: PodInfo, node_name: str) -> dict[str, Any]:
        """The v1 Binding object for ``pod`` -> ``node_name``."""
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
