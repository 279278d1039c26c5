"""What a plugin may use besides its arguments: the typed Handle (upstream ``fwk.Handle``).

Upstream: ``staging/src/k8s.io/kube-scheduler/framework/interface.go`` (``Handle``: ``SnapshotSharedLister``,
``ClientSet``, ``EventRecorder``, ``SharedInformerFactory``, the waiting-Pods map) and
``pkg/scheduler/framework/runtime/framework.go`` (``frameworkImpl`` is the Handle a plugin factory gets).

Every plugin factory receives one :class:`Handle` at ``create(args, handle)``, complete at construction
(every capability a required keyword) and frozen. The framework owns the Protocols here; the live
process and the offline engine provide the implementations, so the same plugin code runs everywhere:

- ``objects``: the latest informer state of the kinds the scheduler watches (live: the informers' store,
  updated as watch events arrive; offline: the snapshot file's objects plus what the binding cycle wrote
  in memory). Plugins read it in the binding cycle (e.g. VolumeBinding's PreBind waits on it until the PV
  controller reports a claim bound); the scheduling cycle reads ``state.snapshot`` (no per-cycle field).
- ``client``: the API writes of the binding cycle (Bind, PreBind); ``None`` where nothing is written.
- ``events``: Kubernetes Events on behalf of the profile (``None``: none).
- ``feature_gates``: the same object as ``SchedulerConfig.feature_gates``.
- ``activator``: ``Handle.Activate`` (``PodActivator``): move unscheduled Pods to activeQ.
- ``profile`` / ``waiting_pods``: the profile's framework (``frameworkImpl`` *is* the Handle; Filter with
  nominated Pods, PreFilterExtensions) and the Pods its Permit plugins hold. Each profile gets its own
  copy (``dataclasses.replace``), to which its Framework binds itself once.

What exists only after the profiles are built (the API client once logged in, the informers' store, the
queue) is a connect-once port (:class:`LateClient`, :class:`LateObjects`, :class:`QueueActivator`;
upstream's ``SetPodActivator``), in the Handle from the start, never replaced.

Errors raised by :class:`APIClient` are :class:`APIError` and its subclasses, so plugins handle
conflicts and deletions without knowing which client they run on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status

if TYPE_CHECKING:
    from py_scheduler.framework.interfaces import FilterPlugin, PreFilterExtensions



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


@runtime_checkable
class VersionedLister(Protocol):
    """An :class:`ObjectLister` that says when a kind's objects changed (the live informers' does), so a
    plugin may keep what it derives from a listing until then."""

    def version(self, kind: str) -> int:
        """A number that changes whenever an object of ``kind`` is added, replaced or removed."""
        ...


class EventRecorder(Protocol):
    """``events.EventRecorder``: an Event about ``regarding`` (a Pod or another object)."""

    async def event(self, regarding: Obj, type_: str, reason: str, action: str, note: str) -> None: ...


class WaitingPodHandle(Protocol):
    """``fwk.WaitingPod``: a Pod held at Permit (:class:`~py_scheduler.framework.binding_cycle.WaitingPod`)."""

    @property
    def pod(self) -> PodInfo: ...

    done: bool
    """Allowed or rejected (no longer waiting)."""

    def pending_plugins(self) -> list[str]:
        """The Permit plugins that have not allowed the Pod yet."""
        ...

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


class PodActivator(Protocol):
    """``fwk.PodActivator``: move these unscheduled Pods (API objects) to activeQ."""

    def activate(self, pods: Iterable[Obj]) -> None: ...


_T = TypeVar("_T")


class _Port(Generic[_T]):
    """A provider connected once, after the Handle that holds the port exists."""

    __slots__ = ("_target",)

    def __init__(self) -> None:
        self._target: _T | None = None

    def connect(self, target: _T) -> None:
        """Connect the provider. Raises RuntimeError when already connected (never replaced)."""
        if self._target is not None:
            raise RuntimeError(f"{type(self).__name__} is already connected")
        self._target = target

    def _get(self) -> _T:
        if self._target is None:
            raise RuntimeError(f"{type(self).__name__} is not connected yet")
        return self._target


class LateClient(_Port[APIClient]):
    """:class:`APIClient` whose client is connected once the process has logged in."""

    async def get(self, path: str) -> Obj | None:
        return await self._get().get(path)

    async def create(self, path: str, obj: Obj) -> Obj:
        return await self._get().create(path, obj)

    async def update(self, path: str, obj: Obj) -> Obj:
        return await self._get().update(path, obj)

    async def patch(self, path: str, patch: Obj, content_type: str = "application/merge-patch+json") -> Obj:
        return await self._get().patch(path, patch, content_type)

    async def delete(self, path: str, uid: str | None = None) -> None:
        await self._get().delete(path, uid)

    async def bind(self, namespace: str, name: str, uid: str, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> None:
        await self._get().bind(namespace, name, uid, node_name, annotations)


class LateObjects(_Port[ObjectLister]):
    """:class:`ObjectLister` whose store is connected once the informers exist; empty until then."""

    __slots__ = ("_unversioned",)

    def __init__(self) -> None:
        super().__init__()
        self._unversioned = 0

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return None if self._target is None else self._target.get(kind, namespace, name)

    def list(self, kind: str) -> Iterable[Obj]:
        return () if self._target is None else self._target.list(kind)

    def version(self, kind: str) -> int:
        """The store's version of ``kind``; a new number at every call when the store has none."""
        target = self._target
        if isinstance(target, VersionedLister):
            return target.version(kind)
        self._unversioned -= 1
        return self._unversioned


class QueueActivator(_Port[PodActivator]):
    """:class:`PodActivator` connected once to the scheduling queue (built from the profiles, upstream's
    ``SetPodActivator``); activates nothing while unconnected (offline: there is no queue)."""

    def activate(self, pods: Iterable[Obj]) -> None:
        if self._target is not None:
            self._target.activate(pods)


@dataclass(frozen=True, slots=True, kw_only=True)
class Handle:
    """What a plugin factory gets (``fwk.Handle``), complete at construction and frozen (assigning a
    field raises ``FrozenInstanceError``). ``None`` is an explicit "not here" (explain has no client)."""

    objects: ObjectLister
    client: APIClient | None
    events: EventRecorder | None
    feature_gates: FeatureGates
    activator: PodActivator
    _profile: _Port[ProfileHandle] = field(default_factory=_Port, init=False, repr=False, compare=False)
    """Bound once by the Framework; fresh in every copy (``replace`` re-creates fields not in ``__init__``)."""

    @classmethod
    def detached(cls, feature_gates: FeatureGates | None = None, objects: ObjectLister | None = None,
                 client: APIClient | None = None) -> Handle:
        """A profile outside the live process (offline, tests, a Framework built without a Handle): no
        objects or client unless given, no events, no queue."""
        return cls(objects=objects if objects is not None else LateObjects(), client=client, events=None,
                   feature_gates=feature_gates if feature_gates is not None else FeatureGates(),
                   activator=QueueActivator())

    def bind_profile(self, profile: ProfileHandle) -> None:
        """Bind the profile's framework (once, when it is assembled). Raises RuntimeError the second time."""
        self._profile.connect(profile)

    @property
    def profile(self) -> ProfileHandle:
        """The profile's framework. Raises RuntimeError before the Framework is assembled."""
        return self._profile._get()

    @property
    def waiting_pods(self) -> WaitingPodsHandle:
        """``IterateOverWaitingPods`` / ``GetWaitingPod``: the Pods the profile's Permit plugins hold."""
        return self.profile.waiting_pods


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
