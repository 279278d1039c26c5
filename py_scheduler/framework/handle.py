"""What a plugin may use besides its arguments: the typed Handle (upstream ``fwk.Handle``).

Upstream: ``staging/src/k8s.io/kube-scheduler/framework/interface.go`` (``Handle``: ``SnapshotSharedLister``,
``ClientSet``, ``EventRecorder``, ``SharedInformerFactory``, the waiting-Pods map) and
``pkg/scheduler/framework/runtime/framework.go`` (``frameworkImpl`` is the Handle a plugin factory gets).

Every plugin factory receives one :class:`Handle` at ``create(args, handle)``. The framework owns the
Protocols here; the live process (``py_scheduler.app``) and the offline engine (``py_scheduler.offline``)
provide the implementations, so plugins never import either and the same plugin code runs live, on a
snapshot file and in tests:

- ``objects``: the latest informer state of the kinds the scheduler watches (live: the informers' store,
  updated as watch events arrive; offline: the snapshot file's objects plus what the binding cycle wrote
  in memory). Plugins read it in the binding cycle (e.g. VolumeBinding's PreBind waits on it until the PV
  controller reports a claim bound); the scheduling cycle reads the cycle's Snapshot instead.
- ``client``: the API writes a plugin makes in the binding cycle (Bind, PreBind). ``None`` where nothing
  may be written (explain).
- ``events``: Kubernetes Events on behalf of the profile.
- ``feature_gates``: gate name -> enabled, after defaults (v1.37.2's) and ``--feature-gates``.
- ``snapshot``: the snapshot of the current scheduling cycle (``SnapshotSharedLister()``), set by the
  framework at the start of each cycle; plugins usually read the same object as ``state.snapshot``.
- ``profile``: the profile's framework (upstream's ``frameworkImpl`` *is* the Handle): running the
  profile's Filter with nominated Pods and its PreFilterExtensions, as DefaultPreemption's dry runs do.
  Each profile gets its own Handle (a copy of the one given to ``build_frameworks``) whose ``profile``
  the :class:`~py_scheduler.framework.runtime.Framework` fills in once it is assembled, so a factory
  may keep the Handle and use ``profile`` at run time.

Errors raised by :class:`APIClient` are :class:`APIError` and its subclasses, so plugins handle
conflicts and deletions without knowing which client they run on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status

if TYPE_CHECKING:
    from py_scheduler.framework.interfaces import FilterPlugin, PreFilterExtensions

Obj = dict[str, Any]


class APIError(Exception):
    """An API request failed. ``status`` is the HTTP status (0: no response), ``reason`` the
    ``Status.reason`` of the API's answer (``Conflict``, ``NotFound``, ...)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class APINotFound(APIError):
    """404: the object (or its namespace) does not exist."""


class APIConflict(APIError):
    """409: a resourceVersion precondition failed, or the object already exists / is already bound."""


class APIClient(Protocol):
    """The API writes plugins make in the binding cycle (``ClientSet()`` narrowed to what is used).

    Paths are API paths (``/api/v1/namespaces/NS/persistentvolumeclaims/NAME``,
    ``/apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME/status``). ``update`` is a PUT whose
    body carries ``metadata.resourceVersion``: the API refuses it with :class:`APIConflict` when the
    object changed since (upstream's optimistic concurrency). Every method raises :class:`APIError`
    (:class:`APINotFound`, :class:`APIConflict`) on a refused request.
    """

    async def get(self, path: str) -> Obj | None:
        """The object at ``path``, or None when it does not exist."""
        ...

    async def create(self, path: str, obj: Obj) -> Obj:
        """POST ``obj`` to the collection ``path``; returns the created object."""
        ...

    async def update(self, path: str, obj: Obj) -> Obj:
        """PUT ``obj`` (with its resourceVersion as precondition) to ``path``; returns the stored object."""
        ...

    async def patch(self, path: str, patch: Obj, content_type: str = "application/merge-patch+json") -> Obj:
        """PATCH ``path``; returns the patched object."""
        ...

    async def delete(self, path: str, uid: str | None = None) -> None:
        """DELETE ``path`` (with a UID precondition when ``uid`` is given)."""
        ...

    async def bind(self, namespace: str, name: str, uid: str, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> None:
        """POST the ``pods/binding`` subresource: ``spec.nodeName`` and ``annotations`` (copied onto
        the Pod by the API server atomically with the node) with a UID precondition. Raises
        :class:`APIConflict` when the Pod is already bound, :class:`APINotFound` when it is gone."""
        ...


class ObjectLister(Protocol):
    """The latest watched objects by kind (``Pod``, ``PersistentVolumeClaim``, ``ResourceClaim``...)."""

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object, or None. ``namespace`` is ``""`` for cluster-scoped kinds."""
        ...

    def list(self, kind: str) -> Iterable[Obj]:
        """Every object of ``kind``."""
        ...


class EventRecorder(Protocol):
    """``events.EventRecorder``: an Event about ``regarding`` (a Pod or another object)."""

    async def event(self, regarding: Obj, type_: str, reason: str, action: str, note: str) -> None: ...


class WaitingPodHandle(Protocol):
    """``fwk.WaitingPod``: a Pod held at Permit (:class:`~py_scheduler.framework.binding_cycle.WaitingPod`)."""

    @property
    def pod(self) -> PodInfo: ...

    def allow(self, plugin: str) -> None:
        """``Allow``: ``plugin`` lets the Pod through (admitted once no plugin is pending)."""
        ...

    def reject(self, plugin: str, message: str) -> bool:
        """``Reject``: the Pod fails Permit as Unschedulable from ``plugin``."""
        ...


class WaitingPodsHandle(Protocol):
    """The waiting-Pods map as plugins see it (``IterateOverWaitingPods`` / ``GetWaitingPod``)."""

    def __iter__(self) -> Iterator[WaitingPodHandle]: ...

    def get(self, uid: str) -> WaitingPodHandle | None: ...


class ProfileHandle(Protocol):
    """The profile's framework as plugins may use it at run time (``frameworkImpl`` methods of
    ``fwk.Handle`` / ``PodNominator``; ``pkg/scheduler/framework/runtime/framework.go``)."""

    profile_name: str

    @property
    def waiting_pods(self) -> WaitingPodsHandle:
        """The Pods a Permit plugin holds (``IterateOverWaitingPods`` / ``GetWaitingPod`` /
        ``RejectWaitingPod``): a Permit plugin allows or rejects them through it."""
        ...

    @property
    def filter_plugins(self) -> Sequence[FilterPlugin]:
        """The profile's Filter plugins, in order."""
        ...

    @property
    def pre_filter_extensions(self) -> Sequence[PreFilterExtensions]:
        """The profile's PreFilter plugins with AddPod / RemovePod, in order."""
        ...

    def nominated_pods_for_node(self, node_name: str) -> Sequence[PodInfo]:
        """``NominatedPodsForNode``: the Pods nominated to ``node_name`` (empty: none)."""
        ...

    def run_filter_with_nominated_pods(self, state: CycleState, pod: PodInfo, node_info: NodeInfo,
                                       plugins: Sequence[FilterPlugin] | None = None) -> Status:
        """``RunFilterPluginsWithNominatedPods`` (only ``plugins``, a subsequence of
        :attr:`filter_plugins`, when given). Raises ``SchedulingError`` on a plugin Error."""
        ...

    def run_pre_filter_extension_add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo,
                                         node_info: NodeInfo) -> Status:
        """``RunPreFilterExtensionAddPod``."""
        ...

    def run_pre_filter_extension_remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo,
                                            node_info: NodeInfo) -> Status:
        """``RunPreFilterExtensionRemovePod``."""
        ...


@dataclass(slots=True)
class Handle:
    """What a plugin factory gets (``fwk.Handle``). Fields that do not apply where the profile runs
    are None (offline explain has no client)."""

    objects: ObjectLister | None = None
    client: APIClient | None = None
    events: EventRecorder | None = None
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    snapshot: SnapshotLister | None = None
    profile: ProfileHandle | None = None


class PluginFactory(Protocol):
    """``func(ctx, args, handle) (Plugin, error)``: builds a plugin from its pluginConfig args (a dict,
    possibly empty) and the profile's :class:`~py_scheduler.framework.handle.Handle`.

    Raises:
        py_scheduler.framework.errors.ConfigError: bad args (the message names the field).
    """

    def __call__(self, args: dict[str, Any], handle: Handle) -> Any: ...


class PluginRegistry(Protocol):
    """The plugin registry as the configuration loader uses it (``runtime.Registry``); the in-tree one
    is the module :mod:`py_scheduler.plugins.registry`, passed in by the caller so the framework
    never imports the plugins."""

    def known(self, name: str) -> bool:
        """Whether ``name`` is a registered plugin."""
        ...

    def available(self) -> list[str]:
        """The registered plugins, in registry order."""
        ...

    def get(self, name: str) -> PluginFactory:
        """The factory of ``name``. Raises KeyError when unknown."""
        ...
