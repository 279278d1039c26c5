"""Extended resource names, and extended resources backed by a DeviceClass (DRA).

Upstream: ``k8s.io/apimachinery/pkg/util/validation`` (``IsQualifiedName``),
``pkg/apis/core/v1/helper`` (``IsExtendedResourceName``), ``pkg/scheduler/util``
(``IsDRAExtendedResourceName``), ``dynamic-resource-allocation/deviceclass/extendedresourcecache``
(which DeviceClass backs an extended resource name: ``DRAExtendedResource``, GA and locked on in
v1.37) and ``noderesources/resource_allocation.go`` (``shouldDelegateResourceToDRA``,
``draPreScoreState``, ``calculateDRAResourceTotals``).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import NodeInfo
from py_scheduler.plugins.helpers.node_selector import match_node_selector_terms

log = logging.getLogger("py_scheduler.plugins.resource_scoring")


DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""``resourceapi.ResourceDeviceClassPrefix``: the implicit extended resource name of a DeviceClass."""

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)\Z")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


@functools.lru_cache(maxsize=4096)
def is_qualified_name(value: str) -> bool:
    """``validation.IsQualifiedName``: ``[prefix/]name`` with a DNS-1123 subdomain prefix (at most 253
    characters) and a name of at most 63 alphanumerics, ``-``, ``_`` or ``.``, starting and ending
    alphanumeric (``metav1validation.ValidateLabelName`` uses the same rule)."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
            return False
    else:
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


@functools.lru_cache(maxsize=4096)
def is_extended_resource_name(name: str) -> bool:
    """``v1helper.IsExtendedResourceName``: a resource outside the ``kubernetes.io`` namespace (so it
    has a ``/`` and no ``kubernetes.io/``), not ``requests.``-prefixed, whose quota name
    ``requests.<name>`` is a qualified name (``example.com/dongle``, ``nvidia.com/gpu``)."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return is_qualified_name("requests." + name)


def is_dra_extended_resource_name(name: str) -> bool:
    """``schedutil.IsDRAExtendedResourceName``: an extended resource name or an implicit
    ``deviceclass.resource.kubernetes.io/<class>`` name."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


def _creation_key(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


class DeviceClassResolver:
    """Extended resource name -> DeviceClass (``ExtendedResourceCache``).

    Every DeviceClass answers to ``deviceclass.resource.kubernetes.io/<name>``; one with
    ``spec.extendedResourceName`` also to that name. When several classes claim the same explicit
    name the newest (``metadata.creationTimestamp``, RFC 3339 so string order is time order) wins,
    then the lower name, as upstream.
    """

    __slots__ = ("_by_resource",)

    def __init__(self, device_classes: Iterable[Obj] = ()) -> None:
        self._by_resource: dict[str, Obj] = {}
        explicit: dict[str, Obj] = {}
        for dc in device_classes:
            if not isinstance(dc, dict):
                continue
            name = str((dc.get("metadata") or {}).get("name") or "")
            if not name:
                continue
            self._by_resource[DEVICE_CLASS_PREFIX + name] = dc
            ern = (dc.get("spec") or {}).get("extendedResourceName")
            if not isinstance(ern, str) or not ern:
                continue
            cur = explicit.get(ern)
            if cur is not None:
                new_ts, cur_ts = _creation_key(dc), _creation_key(cur)
                cur_name = str((cur.get("metadata") or {}).get("name") or "")
                if new_ts < cur_ts or (new_ts == cur_ts and name >= cur_name):
                    continue
            explicit[ern] = dc
        self._by_resource.update(explicit)

    @classmethod
    def from_snapshot(cls, snapshot: SnapshotLister | None) -> DeviceClassResolver:
        """The resolver over ``snapshot.objects`` DeviceClasses (empty when there is no snapshot)."""
        if snapshot is None:
            return cls()
        return cls(snapshot.objects.list("DeviceClass"))

    def get(self, resource_name: str) -> Obj | None:
        """The DeviceClass backing ``resource_name``, or None."""
        return self._by_resource.get(resource_name)

    def __bool__(self) -> bool:
        return bool(self._by_resource)


def should_delegate_resource_to_dra(name: str, node_info: NodeInfo | None, resolver: DeviceClassResolver) -> bool:
    """``shouldDelegateResourceToDRA``: NodeResourcesFit leaves ``name`` to DynamicResources when the
    node does not advertise it in ``status.allocatable`` (no device plugin) and a DeviceClass maps
    it."""
    if node_info is not None and node_info.allocatable.scalar.get(name, 0) > 0:
        return False
    return resolver.get(name) is not None


@dataclass(slots=True)
class DRAPreScoreState:
    """``draPreScoreState``: what the DRA capacity count of one scoring cycle reads.

    ``allocated`` holds (driver, pool, device) of every device allocated to a ResourceClaim;
    ``slices`` are the ResourceSlices.
    """

    resolver: DeviceClassResolver
    allocated: set[tuple[str, str, str]]
    slices: list[Obj]


def _selector_matches(selector: object, node: Obj) -> bool:
    """``structured.NodeMatches`` for a ``nodeSelector`` (terms ORed, requirements ANDed).

    Raises:
        PodParseError: a malformed selector (the caller treats the resource as not countable).
    """
    if not isinstance(selector, dict):
        raise PodParseError("nodeSelector", selector, "expected an object")
    return match_node_selector_terms(selector.get("nodeSelectorTerms"), node)


def dra_totals(node: Obj, device_class: Obj, st: DRAPreScoreState) -> tuple[int, int]:
    """``calculateDRAResourceTotals``: devices of ``device_class`` on ``node`` and how many are
    allocated. Classes with CEL selectors are not evaluated (no CEL engine here): they count as
    backing no device, so the resource is left out of the score.

    Raises:
        PodParseError: a ResourceSlice has a malformed node selector.
    """
    if (device_class.get("spec") or {}).get("selectors"):
        log.debug("DeviceClass %s has CEL selectors; not counted for scoring",
                  (device_class.get("metadata") or {}).get("name"))
        return 0, 0
    node_name = str((node.get("metadata") or {}).get("name") or "")
    capacity = allocated = 0
    for sl in st.slices:
        spec = sl.get("spec") or {}
        devices: list[Obj]
        if spec.get("perDeviceNodeSelection"):
            devices = []
            for d in spec.get("devices") or []:
                if not isinstance(d, dict):
                    continue
                d_node = str(d.get("nodeName") or "")
                on_node = bool(d.get("allNodes")) or (d_node != "" and d_node == node_name)
                if on_node or (d.get("nodeSelector") is not None and _selector_matches(d["nodeSelector"], node)):
                    devices.append(d)
        else:
            s_node = str(spec.get("nodeName") or "")
            all_nodes = bool(spec.get("allNodes"))
            selector = spec.get("nodeSelector")
            if not all_nodes and s_node != node_name and selector is not None:
                if not _selector_matches(selector, node):
                    continue
            elif not all_nodes and s_node and s_node != node_name:
                continue
            devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
        driver = str(spec.get("driver") or "")
        pool = str((spec.get("pool") or {}).get("name") or "")
        for d in devices:
            capacity += 1
            if (driver, pool, str(d.get("name") or "")) in st.allocated:
                allocated += 1
    return capacity, allocated
