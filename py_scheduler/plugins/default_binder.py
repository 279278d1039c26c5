"""DefaultBinder: the Bind extension point.

Upstream: ``pkg/scheduler/framework/plugins/defaultbinder/default_binder.go`` (``Bind``: POST the
``pods/binding`` subresource with ``metadata.uid`` set; an API error becomes the Error status).

Annotations that Reserve plugins attach to the placement (``CycleState.pod_annotations``: the GPU
indices) travel in the Binding's ``metadata.annotations``, which the API server copies onto the Pod
atomically with ``spec.nodeName`` (``pkg/registry/core/pod/storage/storage.go``,
``setPodNodeAndMetadata``). There is no separate write before the Binding, so a Binding that loses
(409: another scheduler bound the Pod first, or a replica that lost its Lease) leaves nothing on the
Pod.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.handle import APIError, Handle
from py_scheduler.framework.types import CycleState, PodInfo, Status

NAME = "DefaultBinder"


class DefaultBinder:
    """Bind through ``handle.client.bind`` (the live API client; none offline, where the engine
    applies the placement in memory and never calls Bind).

    Args:
        handle: the profile's Handle; its ``client`` is read at each Bind, so a Handle whose client
            is set after the profiles are built (the live process connects afterwards) works.
    """

    name = NAME

    def __init__(self, handle: Handle | None = None) -> None:
        self.handle = handle

    @classmethod
    def create(cls, args: dict[str, Any], handle: Any) -> DefaultBinder:
        return cls(handle if isinstance(handle, Handle) else None)

    def binding(self, pod: PodInfo, node_name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        """The v1 Binding object for ``pod`` -> ``node_name`` (``metadata.annotations`` when given)."""
        meta: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        if annotations:
            meta["annotations"] = dict(annotations)
        return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """POST the Binding with the cycle's ``pod_annotations``. Success, or Error with the API's
        message (409 already bound / UID changed, 404 gone, a refused fence...); Error too when this
        profile has no API client."""
        client = self.handle.client if self.handle is not None else None
        if client is None:
            return Status.error("no API client to bind with", NAME)
        try:
            await client.bind(pod.namespace, pod.name, pod.uid, node_name, dict(state.pod_annotations) or None)
        except APIError as exc:
            return Status.error(exc.message, NAME)
        return Status.success()
