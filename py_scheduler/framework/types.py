"""Core scheduling types: Status, Resource, PodInfo, NodeInfo, CycleState.

Objects are plain Kubernetes JSON dicts (as the API returns them, camelCase keys). A Pod is parsed
once into a :class:`PodInfo` when it enters the cache or the queue; a malformed field raises
:class:`PodParseError` there, never inside a plugin.

Upstream: ``pkg/scheduler/framework/types.go`` (NodeInfo, PodInfo, Resource, FitError),
``staging/src/k8s.io/kube-scheduler/framework/interface.go`` (Status codes); a Pod's requests are
:mod:`.pod_resources`'s, the snapshot Protocols :mod:`.lister`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from py_scheduler.framework import quantity
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.memo import REQUESTS, NodeMemo, ParseMemo, PodInput, PodMemo, kept_memos
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.pod_resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    STATUS_KEYS,
    is_pod_level_requests_set,
    parse_resource_list,
    pod_requests,
    requests_key,
    resize_status_inputs,
    validate_pod_resources,
)

if TYPE_CHECKING:
    from py_scheduler.framework.lister import SnapshotLister

T = TypeVar("T")

__all__ = [
    "MAX_NODE_SCORE",
    "Code",
    "CycleState",
    "HostPortInfo",
    "ImageStateSummary",
    "NodeInfo",
    "PodInfo",
    "Resource",
    "Status",
    "is_scalar_resource_name",
]


MAX_NODE_SCORE = 100
"""``fwk.MaxNodeScore``: scores after NormalizeScore lie in [0, 100]."""
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"


class Code(IntEnum):
    """Status codes of ``fwk.Code`` (same order as upstream)."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6


@dataclass(slots=True)
class Status:
    """Result of one plugin call (``fwk.Status``): a code, reasons in upstream wording, the plugin.

    ``reasons`` feed the FitError histogram (``"1 Insufficient cpu"``); ``message()`` joins them with
    ``", "`` as upstream does.
    """

    code: Code = Code.SUCCESS
    reasons: list[str] = field(default_factory=list)
    plugin: str = ""

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "", unresolvable: bool = False) -> Status:
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
        return cls(code, list(reasons), plugin)

    @classmethod
    def error(cls, message: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, [message], plugin)

    @classmethod
    def skip(cls) -> Status:
        return cls(Code.SKIP)

    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    def is_skip(self) -> bool:
        return self.code == Code.SKIP

    def is_rejected(self) -> bool:
        """Unschedulable, UnschedulableAndUnresolvable or Pending (``Status.IsRejected``)."""
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    def message(self) -> str:
        return ", ".join(self.reasons)


_SUCCESS = Status()


def is_scalar_resource_name(name: str) -> bool:
    """``schedutil.IsScalarResourceName``: extended (``vendor/x``), ``kubernetes.io/`` prefixed,
    ``hugepages-*`` and ``attachable-volumes-*`` resources; cpu, memory, pods and ephemeral-storage
    are not scalar."""
    return "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))


@dataclass(slots=True)
class Resource:
    """Resource amounts as integers (``framework.Resource``).

    ``milli_cpu`` in milli-CPU, ``memory`` and ``ephemeral_storage`` in bytes,
    ``allowed_pod_number`` a count, ``scalar`` maps other resource names (``nvidia.com/gpu``,
    ``hugepages-2Mi``) to ``Quantity.Value()`` integers.
    """

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pod_number: int = 0
    scalar: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_list(cls, rl: Mapping[str, object] | None, where: str = "resources") -> Resource:
        """Build from a ResourceList dict (``{"cpu": "2", "memory": "4Gi"}``).

        Raises:
            PodParseError: a value is not a valid quantity (``where`` prefixes the field name).
        """
        return cls.from_decimals(parse_resource_list(rl, where))

    @classmethod
    def from_decimals(cls, rl: Mapping[str, Decimal]) -> Resource:
        """``Resource.Add`` over already-parsed quantities (MilliValue for cpu, Value for the rest)."""
        r = cls()
        for name, q in rl.items():
            if name == "cpu":
                r.milli_cpu += quantity.milli_value(q)
            elif name == "memory":
                r.memory += quantity.value(q)
            elif name == "pods":
                r.allowed_pod_number += quantity.value(q)
            elif name == "ephemeral-storage":
                r.ephemeral_storage += quantity.value(q)
            elif is_scalar_resource_name(name):
                r.scalar[name] = r.scalar.get(name, 0) + quantity.value(q)
        return r

    def clone(self) -> Resource:
        return Resource(self.milli_cpu, self.memory, self.ephemeral_storage, self.allowed_pod_number,
                        dict(self.scalar))

    def get(self, name: str) -> int:
        """Amount of one resource by its Kubernetes name (milli-CPU for ``cpu``)."""
        if name == "cpu":
            return self.milli_cpu
        if name == "memory":
            return self.memory
        if name == "ephemeral-storage":
            return self.ephemeral_storage
        if name == "pods":
            return self.allowed_pod_number
        return self.scalar.get(name, 0)


_NON_MISSING = {"cpu": Decimal(DEFAULT_MILLI_CPU_REQUEST) / 1000, "memory": Decimal(DEFAULT_MEMORY_REQUEST)}


def _swap_removed(items: tuple[T, ...], i: int) -> tuple[T, ...]:
    """``items`` without ``items[i]``, the last element moved into its place (Go's ``removeFromSlice``)."""
    last = len(items) - 1
    if i == last:
        return items[:last]
    return (*items[:i], items[last], *items[i + 1:last])


_set = object.__setattr__
"""Assignment without :meth:`NodeInfo.__setattr__`'s bump, for NodeInfo's own methods (which bump once)."""

_INDEXED_FIELDS = frozenset({"node", "pods", "pods_with_affinity", "pods_with_required_anti_affinity",
                             "requested", "non_zero_requested", "allocatable", "used_ports", "pvc_ref_counts",
                             "image_states"})
"""NodeInfo fields whose assignment is a change of the NodeInfo (bumps its generation)."""


class HostPortInfo:
    """Host ports in use on a node (``framework.HostPortInfo``): ip -> {(protocol, port)}.

    A set, as upstream: two Pods holding the same (ip, protocol, port) (which a healthy cluster
    never has) count once, and removing either frees it. ``0.0.0.0`` conflicts with every IP.
    """

    __slots__ = ("_ports",)

    def __init__(self) -> None:
        self._ports: dict[str, set[tuple[str, int]]] = {}

    def clone(self) -> HostPortInfo:
        h = HostPortInfo()
        h._ports = {ip: set(v) for ip, v in self._ports.items()}
        return h

    def add(self, ip: str, protocol: str, port: int) -> None:
        self._ports.setdefault(ip or "0.0.0.0", set()).add((protocol or "TCP", port))

    def remove(self, ip: str, protocol: str, port: int) -> None:
        ip = ip or "0.0.0.0"
        d = self._ports.get(ip)
        if d is None:
            return
        d.discard((protocol or "TCP", port))
        if not d:
            del self._ports[ip]

    def check_conflict(self, ip: str, protocol: str, port: int) -> bool:
        """True when (ip, protocol, port) is taken (``HostPortInfo.CheckConflict``)."""
        if port <= 0:
            return False
        ip = ip or "0.0.0.0"
        key = (protocol or "TCP", port)
        if ip == "0.0.0.0":
            return any(key in d for d in self._ports.values())
        return any(key in self._ports.get(k, ()) for k in (ip, "0.0.0.0"))


def host_ports(pod: Obj) -> list[tuple[str, str, int]]:
    """``schedutil.GetHostPorts``: (hostIP, protocol, hostPort) of every container port with a
    hostPort, sidecar init containers included."""
    spec = pod.get("spec") or {}
    out: list[tuple[str, str, int]] = []
    containers = list(spec.get("containers") or [])
    containers += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for i, c in enumerate(containers):
        ports = c.get("ports") or []
        if not isinstance(ports, list) or not all(isinstance(p, dict) for p in ports):
            raise PodParseError(f"spec.containers[{i}].ports", ports, "expected a list of ports")
        for p in ports:
            hp = p.get("hostPort")
            if isinstance(hp, int) and not isinstance(hp, bool) and hp > 0:
                out.append((str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), hp))
    return out


@dataclass(slots=True)
class ImageStateSummary:
    """``fwk.ImageStateSummary``: an image's size in bytes and the nodes that hold it.

    One summary object per image name is shared by every NodeInfo listing the image (as in
    upstream's cache), so ``num_nodes`` stays current as nodes come and go.
    """

    size: int
    nodes: set[str] = field(default_factory=set)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)


_last_generation = 0


def next_generation() -> int:
    """A process-wide increasing counter stamped on every NodeInfo change (snapshot diffing)."""
    global _last_generation
    _last_generation += 1
    return _last_generation


def current_generation() -> int:
    """The value :func:`next_generation` returned last: while it stays the same, no NodeInfo of the
    process changed (nor was one built), so a check of NodeInfo generations made at that value still
    holds (``NodeColumns.gather`` reuses its verified selection within a cycle)."""
    return _last_generation


_NO_RESIZE_INPUTS: tuple[dict[str, Any], None, None, bool] = ({}, None, None, False)
""":func:`resize_status_inputs` of a status without any (no container status with resources, no
pod-level ones, no Infeasible resize)."""


class PodInfo:
    """A Pod parsed once (``framework.PodInfo``).

    Attributes:
        pod: the Pod as Kubernetes JSON (read-only by convention).
        uid, namespace, name, key (``namespace/name``).
        requests: effective requests (:func:`pod_requests`) as a :class:`Resource`.
        non0_cpu: milli-CPU with 100m per container lacking a CPU request.
        non0_mem: bytes with 200Mi per container lacking a memory request.
        priority: ``spec.priority`` (0 when unset).
        ports: host ports (ip, protocol, port).
        memos: the :class:`~py_scheduler.framework.memo.PodMemo` values computed for this Pod (parsed
            affinity terms, selectors, tolerations, the signature...); each memo declares the parts
            of the Pod it reads and :meth:`derive` / :meth:`reparse` keep exactly those still valid.

    Raises (constructor):
        PodParseError: a malformed quantity in any container, init container, pod-level request or
        overhead.
    """

    __slots__ = ("key", "labels", "memos", "name", "namespace", "non0_cpu", "non0_mem", "pod", "ports",
                 "priority", "requests", "uid")

    def __init__(self, pod: Obj) -> None:
        if not isinstance(pod, dict):
            raise PodParseError("pod", pod, "expected an object")
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if not isinstance(meta, dict):
            raise PodParseError("metadata", meta, "expected an object")
        if not isinstance(spec, dict):
            raise PodParseError("spec", spec, "expected an object")
        self.pod: Obj = pod
        self.uid: str = str(meta.get("uid") or "")
        self.namespace: str = str(meta.get("namespace") or "default")
        self.name: str = str(meta.get("name") or "")
        self.key: str = f"{self.namespace}/{self.name}"
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            labels = {}
        elif not all(type(k) is str and type(v) is str for k, v in labels.items()):
            labels = {str(k): str(v) for k, v in labels.items()}
        self.labels: dict[str, str] = labels  # the Pod's own dict when well-formed (memory: one copy)
        prio = spec.get("priority")
        self.priority: int = prio if isinstance(prio, int) and not isinstance(prio, bool) else 0
        rkey = requests_key(spec, pod.get("status"))
        hit = REQUESTS.get(rkey) if rkey is not None else None
        if hit is not None:
            self.requests: Resource = hit[0].clone()
            self.non0_cpu: int = hit[1]
            self.non0_mem: int = hit[2]
        else:
            memo = ParseMemo()
            validate_pod_resources(spec, memo)
            reqs = pod_requests(pod, memo=memo)
            self.requests = Resource.from_decimals(reqs)
            if is_pod_level_requests_set(spec):
                defaults = {k: v for k, v in _NON_MISSING.items() if k not in reqs}
                non0 = pod_requests(pod, defaults, memo) if defaults else reqs
            else:
                non0 = pod_requests(pod, _NON_MISSING, memo)
            self.non0_cpu = quantity.milli_value(non0.get("cpu", Decimal(0)))
            self.non0_mem = quantity.value(non0.get("memory", Decimal(0)))
            if rkey is not None:
                REQUESTS.store(rkey, (self.requests.clone(), self.non0_cpu, self.non0_mem))
        self.ports: list[tuple[str, str, int]] = host_ports(pod)
        vols = spec.get("volumes")  # read by ImageLocality, the volume plugins and the PVC counts
        if vols is not None and not (type(vols) is list and all(type(v) is dict for v in vols)):
            raise PodParseError("spec.volumes", vols, "expected a list of volumes")
        aff = spec.get("affinity")
        if aff is not None and not isinstance(aff, dict):
            raise PodParseError("spec.affinity", aff, "expected an object")
        for key, val in (aff or {}).items():
            if key in ("podAffinity", "podAntiAffinity", "nodeAffinity") and val is not None and not isinstance(
                    val, dict):
                raise PodParseError(f"spec.affinity.{key}", val, "expected an object")
        self.memos: dict[PodMemo[Any], Any] = {}

    def scheduling_requests(self) -> Resource:
        """The request NodeResourcesFit checks when scheduling this Pod: its spec alone
        (``computePodResourceRequest`` in noderesources/fit.go leaves ``UseStatusResources`` off: the
        Pod is on no node yet), where :attr:`requests` also counts a resize's status, as for a Pod on a
        node. The same object as :attr:`requests` when the status holds no resize input (every Pod
        that no one wrote a status for)."""
        status = self.pod.get("status")
        if (type(status) is not dict or not any(k in status for k in STATUS_KEYS)
                or resize_status_inputs(status) == _NO_RESIZE_INPUTS):
            return self.requests
        return Resource.from_decimals(pod_requests({**self.pod, "status": {}}))

    def derive(self, pod: Obj) -> PodInfo:
        """This PodInfo for ``pod``, another version of the same Pod that differs only in
        ``spec.nodeName``, ``metadata.annotations`` and ``status`` (the assumed Pod of a scheduling
        cycle), without parsing it again. The memos whose declared inputs are equal in both versions
        are kept (:func:`~py_scheduler.framework.memo.kept_memos`); the dict is shared when nothing
        a memo may read changed."""
        out = PodInfo.__new__(PodInfo)
        for name in PodInfo.__slots__:
            setattr(out, name, getattr(self, name))
        out.pod = pod
        out.memos = kept_memos(self.memos, _changed_inputs(self.pod, pod))
        return out

    def reparse(self, pod: Obj) -> PodInfo:
        """A PodInfo for ``pod``, a newer version of this Pod (the watch's bound version of an
        assumed Pod, a status update): derived without parsing when nothing :meth:`__init__` reads
        changed (:func:`same_parse_inputs`), else parsed as new (with no memos). A derived PodInfo
        keeps the memos whose declared :class:`~py_scheduler.framework.memo.PodInput` did not change
        (see :meth:`derive`).

        Raises:
            PodParseError: ``pod`` had to be parsed and a field is malformed (as the constructor).
        """
        old = self.pod
        if not same_parse_inputs(old, pod):
            return PodInfo(pod)
        out = self.derive(pod)
        old_labels = old["metadata"].get("labels")
        new_labels = pod["metadata"].get("labels")
        if self.labels is old_labels and isinstance(new_labels, dict):
            out.labels = new_labels  # the new version's own (equal) dict: the old Pod can be freed
        return out

    @property
    def spec(self) -> Obj:
        spec: Obj = self.pod.get("spec") or {}
        return spec

    @property
    def node_name(self) -> str:
        return str(self.spec.get("nodeName") or "")

    @property
    def scheduler_name(self) -> str:
        return str(self.spec.get("schedulerName") or "default-scheduler")

    @property
    def affinity(self) -> Obj:
        aff: Obj = self.spec.get("affinity") or {}
        return aff

    def has_affinity(self) -> bool:
        """``podWithAffinity``: the Pod has pod affinity or pod anti-affinity."""
        a = self.affinity
        return bool(a.get("podAffinity") or a.get("podAntiAffinity"))

    def has_required_anti_affinity(self) -> bool:
        """``podWithRequiredAntiAffinity``."""
        anti = self.affinity.get("podAntiAffinity") or {}
        return bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))

    def __repr__(self) -> str:
        return f"PodInfo({self.key})"


_IDENTITY_KEYS = ("uid", "namespace", "name", "labels")


def _changed_inputs(old: Obj, new: Obj) -> PodInput:
    """Which of the parts a memo may depend on differ between two versions of one Pod whose identity,
    labels and ``spec`` apart from ``nodeName`` are equal (the callers' precondition)."""
    changed = PodInput(0)
    om, nm = old.get("metadata"), new.get("metadata")
    if (om.get("annotations") if isinstance(om, dict) else None) != (
            nm.get("annotations") if isinstance(nm, dict) else None):
        changed |= PodInput.ANNOTATIONS
    os_, ns_ = old.get("spec"), new.get("spec")
    if os_ is not ns_ and (os_.get("nodeName") if isinstance(os_, dict) else None) != (
            ns_.get("nodeName") if isinstance(ns_, dict) else None):
        changed |= PodInput.NODE_NAME
    ost, nst = old.get("status"), new.get("status")
    if ost is not nst and ost != nst:
        ost = ost if isinstance(ost, dict) else {}
        nst = nst if isinstance(nst, dict) else {}
        if ost.get("startTime") != nst.get("startTime"):
            changed |= PodInput.START_TIME
        if {k: v for k, v in ost.items() if k != "startTime"} != {k: v for k, v in nst.items() if k != "startTime"}:
            changed |= PodInput.STATUS
    return changed


def same_parse_inputs(old: object, new: object) -> bool:
    """Whether :class:`PodInfo` would parse ``new`` exactly as ``old``: both Pods are objects with
    object ``metadata`` whose uid, namespace, name and labels are equal, their ``spec`` is equal
    (requests, ports, priority, affinity are all read from it) and so are the status fields
    :func:`pod_requests` reads for in-place resize (:func:`resize_status_inputs`). Conservative:
    any other shape answers False (the caller then parses)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return False
    om, nm = old.get("metadata"), new.get("metadata")
    if not isinstance(om, dict) or not isinstance(nm, dict):
        return False
    for k in _IDENTITY_KEYS:
        if om.get(k) != nm.get(k):
            return False
    if old.get("spec") != new.get("spec"):
        return False
    os_, ns_ = old.get("status"), new.get("status")
    if os_ is ns_:
        return True
    # pod_requests reads a missing or non-object status as {}
    os_ = os_ if isinstance(os_, dict) else {}
    ns_ = ns_ if isinstance(ns_, dict) else {}
    if not any(k in os_ or k in ns_ for k in STATUS_KEYS):
        return True
    return resize_status_inputs(os_) == resize_status_inputs(ns_)


class NodeInfo:
    """Aggregated node state (``framework.NodeInfo``).

    Attributes:
        node: the Node as Kubernetes JSON (``None`` for a node whose object is gone but whose pods
            are still cached, as upstream).
        unschedulable / has_taints: ``spec.unschedulable`` / a non-empty ``spec.taints`` of the Node
            as of ``set_node`` (set a new Node object with ``set_node``; a node-less NodeInfo may keep
            stale True values, which only send callers to their node-by-node path).
        pods: PodInfos bound or assumed to this node (an immutable tuple: ``add_pod`` / ``remove_pod``
            replace it, so no caller can change it in place).
        pods_with_affinity, pods_with_required_anti_affinity: subsets used by InterPodAffinity (tuples).
        requested: sum of the pods' requests (milli-CPU, bytes, scalar ints).
        non_zero_requested: same with the 100m / 200Mi defaults for missing cpu / memory.
        allocatable: ``status.allocatable``.
        used_ports: host ports in use.
        image_states: image name -> ImageStateSummary (filled by the cache / snapshot).
        pvc_ref_counts: ``namespace/claim`` -> number of pods on the node using it.
        memos: :class:`~py_scheduler.framework.memo.NodeMemo` values, each stamped with the Node
            object or the generation it was computed for.
        generation: bumped on every change, by construction: the methods bump it, and assigning any
            of :data:`_INDEXED_FIELDS` (``node``, the Pod tuples, the resource sums) bumps it too, so
            the cross-cycle indexes that sync by generation (resource columns, InterPodAffinity's
            AffinityIndex, PodTopologySpread's count memo, per-Node memos) cannot go stale silently
            (tests/unit/plugins/test_index_staleness.py). ``Resource`` / ``HostPortInfo`` objects and
            the Node dict are changed only by NodeInfo's own methods (which bump) and never in place
            by anyone else.

    Raises (``set_node``): PodParseError (with field ``node.status.allocatable.X``) on a malformed
    allocatable quantity; callers treat such a node as having no allocatable resources.
    """

    __slots__ = ("allocatable", "generation", "has_taints", "image_states", "memos", "name", "node",
                 "non_zero_requested", "pods", "pods_with_affinity", "pods_with_required_anti_affinity",
                 "pvc_ref_counts",
                 "requested", "unschedulable", "used_ports")

    node: Obj | None
    name: str
    unschedulable: bool
    has_taints: bool
    pods: tuple[PodInfo, ...]
    pods_with_affinity: tuple[PodInfo, ...]
    pods_with_required_anti_affinity: tuple[PodInfo, ...]
    requested: Resource
    non_zero_requested: Resource
    allocatable: Resource
    used_ports: HostPortInfo
    image_states: dict[str, ImageStateSummary]
    pvc_ref_counts: dict[str, int]
    memos: dict[NodeMemo[Any], Any]
    generation: int

    def __init__(self, node: Obj | None = None, pods: Iterable[PodInfo] = ()) -> None:
        # _set: a new NodeInfo takes one generation (below), not one per field (__setattr__'s bump
        # cost 7 % of the initial sync's handlers)
        _set(self, "node", None)
        _set(self, "name", "")
        _set(self, "unschedulable", False)
        _set(self, "has_taints", False)
        _set(self, "pods", ())
        _set(self, "pods_with_affinity", ())
        _set(self, "pods_with_required_anti_affinity", ())
        _set(self, "requested", Resource())
        _set(self, "non_zero_requested", Resource())
        _set(self, "allocatable", Resource())
        _set(self, "used_ports", HostPortInfo())
        _set(self, "image_states", {})
        _set(self, "pvc_ref_counts", {})
        _set(self, "memos", {})
        _set(self, "generation", next_generation())
        if node is not None:
            self.set_node(node)
        for p in pods:
            self.add_pod(p)

    def __setattr__(self, name: str, value: Any) -> None:
        # Assigning a field the indexes read is a change: bump the generation (see the class docstring).
        object.__setattr__(self, name, value)
        if name in _INDEXED_FIELDS:
            object.__setattr__(self, "generation", next_generation())

    # -- node ---------------------------------------------------------------------------------
    def set_node(self, node: Obj) -> None:
        """``NodeInfo.SetNode``: replace the Node object and recompute allocatable."""
        # _set: the generation is bumped once, at the end, whatever raises on the way
        try:
            _set(self, "node", node)
            _set(self, "name", str((node.get("metadata") or {}).get("name") or ""))
            spec = node.get("spec")
            # Read once per Node version: the node-by-node Filters skip every node without them at once.
            _set(self, "unschedulable", bool(isinstance(spec, dict) and spec.get("unschedulable")))
            _set(self, "has_taints", bool(isinstance(spec, dict) and spec.get("taints")))
            alloc = (node.get("status") or {}).get("allocatable")
            try:
                _set(self, "allocatable", Resource.from_list(alloc, "node.status.allocatable"))
            except PodParseError:
                _set(self, "allocatable", Resource())
                raise
        finally:
            _set(self, "generation", next_generation())

    @property
    def labels(self) -> dict[str, str]:
        if self.node is None:
            return {}
        labels: dict[str, str] = (self.node.get("metadata") or {}).get("labels") or {}
        return labels

    @property
    def taints(self) -> list[Obj]:
        if self.node is None:
            return []
        taints: list[Obj] = (self.node.get("spec") or {}).get("taints") or []
        return taints

    # -- pods ---------------------------------------------------------------------------------
    def add_pod(self, p: PodInfo) -> None:
        """``NodeInfo.AddPodInfo``."""
        # object.__setattr__: the generation bump comes once, from _update
        _set(self, "pods", (*self.pods, p))
        spec = p.pod.get("spec")
        if spec and spec.get("affinity"):  # neither list takes a Pod without affinity: skip both checks
            if p.has_affinity():
                _set(self, "pods_with_affinity", (*self.pods_with_affinity, p))
            if p.has_required_anti_affinity():
                _set(self, "pods_with_required_anti_affinity", (*self.pods_with_required_anti_affinity, p))
        self._update(p, 1)

    def remove_pod(self, uid: str) -> PodInfo | None:
        """``NodeInfo.RemovePod`` by Pod UID; returns the removed PodInfo or None if absent.

        As upstream's ``removeFromSlice``, the last Pod of each list takes the removed one's place:
        the order of ``pods`` after a removal is upstream's, which matters where upstream sorts
        them unstably (preemption victims of equal importance)."""
        for i, p in enumerate(self.pods):
            if p.uid == uid:
                _set(self, "pods", _swap_removed(self.pods, i))
                if self.pods_with_affinity:
                    for j, q in enumerate(self.pods_with_affinity):
                        if q.uid == uid:
                            _set(self, "pods_with_affinity", _swap_removed(self.pods_with_affinity, j))
                            break
                if self.pods_with_required_anti_affinity:
                    for j, q in enumerate(self.pods_with_required_anti_affinity):
                        if q.uid == uid:
                            _set(self, "pods_with_required_anti_affinity",
                                 _swap_removed(self.pods_with_required_anti_affinity, j))
                            break
                self._update(p, -1)
                return p
        return None

    def _update(self, p: PodInfo, sign: int) -> None:
        r = self.requested
        req = p.requests
        r.milli_cpu += sign * req.milli_cpu
        r.memory += sign * req.memory
        r.ephemeral_storage += sign * req.ephemeral_storage
        if req.scalar:
            scalar = r.scalar
            for k, v in req.scalar.items():
                scalar[k] = scalar.get(k, 0) + sign * v
        nz = self.non_zero_requested
        nz.milli_cpu += sign * p.non0_cpu
        nz.memory += sign * p.non0_mem
        if p.ports:
            used = self.used_ports
            for ip, proto, port in p.ports:
                if sign > 0:
                    used.add(ip, proto, port)
                else:
                    used.remove(ip, proto, port)
        spec = p.pod.get("spec")
        if spec and spec.get("volumes"):  # pod_pvc_keys of a Pod without volumes is empty
            counts = self.pvc_ref_counts
            for claim in pod_pvc_keys(p.pod):
                n = counts.get(claim, 0) + sign
                if n > 0:
                    counts[claim] = n
                else:
                    counts.pop(claim, None)
        _set(self, "generation", next_generation())

    def clone(self) -> NodeInfo:
        """A copy whose lists and counters can change without touching this one (``Snapshot``)."""
        c = NodeInfo.__new__(NodeInfo)
        put = object.__setattr__  # a copy is no change: the clone keeps this generation
        put(c, "node", self.node)
        put(c, "name", self.name)
        put(c, "unschedulable", self.unschedulable)
        put(c, "has_taints", self.has_taints)
        put(c, "pods", self.pods)  # immutable tuples: shared
        put(c, "pods_with_affinity", self.pods_with_affinity)
        put(c, "pods_with_required_anti_affinity", self.pods_with_required_anti_affinity)
        put(c, "requested", self.requested.clone())
        put(c, "non_zero_requested", self.non_zero_requested.clone())
        put(c, "allocatable", self.allocatable.clone())
        put(c, "used_ports", self.used_ports.clone())
        put(c, "image_states", dict(self.image_states))
        put(c, "pvc_ref_counts", dict(self.pvc_ref_counts))
        put(c, "memos", self.memos)  # shared: entries are stamped (Node object / generation), so each holder
        # recomputes what no longer matches it
        put(c, "generation", self.generation)
        return c

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)})"


def pod_pvc_keys(pod: Obj) -> list[str]:
    """``namespace/claimName`` of each ``persistentVolumeClaim`` volume of the Pod (``PodPVCKeys`` in
    ``pkg/scheduler/framework/types.go``: generic ephemeral volumes are not counted in v1.37, so
    VolumeRestrictions' ReadWriteOncePod check does not see them either)."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace") or "default")
    out: list[str] = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(v, dict):
            continue
        pvc = v.get("persistentVolumeClaim")
        if isinstance(pvc, dict) and pvc.get("claimName"):
            out.append(f"{ns}/{pvc['claimName']}")
    return out


@runtime_checkable
class StateData(Protocol):
    """``fwk.StateData``: plugin state in a :class:`CycleState` that must be copied (not shared) when
    the state is cloned (preemption dry runs, nominated Pods); state without ``clone`` is shared."""

    def clone(self) -> Any: ...


class CycleState:
    """Per-cycle scratch space shared by a profile's plugins (``fwk.CycleState``).

    ``data`` holds plugin state keyed by the plugin's own key (``"PreFilterNodeResourcesFit"``);
    ``skip_filter`` / ``skip_score`` hold the names of plugins whose PreFilter / PreScore returned
    Skip; ``snapshot`` is the Snapshot of this cycle; ``pod_annotations`` are annotations that
    Reserve plugins ask the binder to write on the Pod before the Binding (GPU indices).
    """

    __slots__ = ("data", "pod_annotations", "skip_filter", "skip_score", "snapshot")

    def __init__(self, snapshot: SnapshotLister | None = None) -> None:
        self.data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()
        self.snapshot: SnapshotLister | None = snapshot
        self.pod_annotations: dict[str, str] = {}

    def read(self, key: str) -> Any:
        """Plugin state by key; raises KeyError (upstream ``ErrNotFound``) if absent."""
        return self.data[key]

    def write(self, key: str, value: Any) -> None:
        self.data[key] = value

    def clone(self) -> CycleState:
        """A copy for a preemption dry run or a Filter with nominated Pods (``CycleState.Clone``):
        values with ``clone`` (:class:`StateData`) are cloned, the others shared.

        Whether a value is StateData is decided once per class (:func:`_clones`): ``isinstance`` on a
        runtime-checkable Protocol walks the Protocol's members on every call (~10 us), and a dry run
        clones the state once per candidate node (500 times per Pod at 5000 nodes)."""
        c = CycleState(self.snapshot)
        c.data = {k: (v.clone() if _clones(type(v)) else v) for k, v in self.data.items()}
        c.skip_filter = set(self.skip_filter)
        c.skip_score = set(self.skip_score)
        c.pod_annotations = dict(self.pod_annotations)
        return c


_CLONES: dict[type, bool] = {}
"""Per class: do its instances have a ``clone`` (are they :class:`StateData`)? Filled by :func:`_clones`."""


def _clones(cls: type) -> bool:
    """``isinstance(v, StateData)`` for any ``v`` of class ``cls``, memoized per class.

    What it depends on: a class's instances are StateData exactly when the class has a ``clone``
    attribute that is not None (what the runtime Protocol check reads); cycle-state values never set
    ``clone`` on an instance only. Classes are few (one or two per plugin), so the dict stays small.
    """
    hit = _CLONES.get(cls)
    if hit is None:
        hit = _CLONES[cls] = getattr(cls, "clone", None) is not None
    return hit
