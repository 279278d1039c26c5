"""What GPUScore needs to rank a node for a Pod that gets its GPUs by ResourceClaim (DRA).

Not an upstream plugin (py-scheduler's issue 16 item 3). DynamicResources' Filter leaves, per
feasible node, the AllocationResults it would write (``node_allocations`` of its cycle state, read
through the framework's ``ClaimAllocationState``; upstream ``dynamicresources.go``
``stateData.nodeAllocations``); this module reads the devices named there
from the node's ResourceSlices and describes them as GPUScore's terms need them.

A device is a GPU when its ResourceSlice entry has a ``productName`` string attribute, as NVIDIA's
GPU DRA driver publishes for whole GPUs and MIG partitions (``cmd/gpu-kubelet-plugin/deviceinfo.go``
in NVIDIA/k8s-dra-driver-gpu: attributes ``type`` ``gpu`` / ``mig``, ``productName``,
``architecture``; capacity ``memory`` in bytes). Attribute and capacity names may be written
qualified by the driver's domain (``gpu.nvidia.com/productName``): the domain is dropped.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from py_scheduler.framework import quantity as qty
from py_scheduler.framework.interfaces import DRA_STATE_KEY, ClaimAllocationState
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import CycleState, NodeInfo

__all__ = ["DRANodeGPUs", "GPUDeviceIndex", "dra_node_gpus"]

DeviceID = tuple[str, str, str]
"""(driver, pool, device)."""

PRODUCT_ATTRIBUTE = "productName"
MEMORY_CAPACITY = "memory"


@dataclass(frozen=True, slots=True)
class DRANodeGPUs:
    """The GPU devices a Pod would get on one node by its claims, and the node's GPU devices.

    Attributes:
        products: ``productName`` of each GPU device the Pod would get (allocation order).
        memory: per device the Pod would get, ``(capacity, used by other claims, used by this Pod)``
            in bytes; capacity None when the device publishes no ``memory`` capacity. Other claims'
            use counts only for shares of a multi-allocatable device (``consumedCapacity``); this
            Pod's use is its ``consumedCapacity`` when it takes a share, else 0 (GPUScore uses the
            larger of it and the Pod's ``gpu-memory-gb``).
        total: GPU devices in the node's ResourceSlices.
        used: of those, devices some claim already holds (dedicated or shared) before this Pod.
        new: GPU devices this Pod would take that no claim holds yet.
    """

    products: tuple[str, ...]
    memory: tuple[tuple[int | None, int, int], ...]
    total: int
    used: int
    new: int


def _strip(name: str) -> str:
    """``gpu.nvidia.com/productName`` -> ``productName``."""
    return name.rsplit("/", 1)[-1]


def _bytes(raw: object) -> int | None:
    """A quantity (``"80Gi"``) in bytes, None when malformed."""
    try:
        return int(qty.parse(raw))
    except (qty.QuantityError, TypeError, ValueError, ArithmeticError):
        return None


def _by_node(slices: list[Obj]) -> dict[str, list[Obj]]:
    """Node-local slices by ``spec.nodeName`` (one pass: the per-node lookups stay linear)."""
    out: dict[str, list[Obj]] = {}
    for sl in slices:
        spec = sl.get("spec") if isinstance(sl, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("nodeName"), str):
            out.setdefault(spec["nodeName"], []).append(spec)
    return out


def _gpu_devices(specs: list[Obj]) -> dict[DeviceID, Obj]:
    """GPU devices (with a ``productName`` attribute) of one node's slice specs."""
    out: dict[DeviceID, Obj] = {}
    for spec in specs:
        driver = str(spec.get("driver") or "")
        pool = str((spec.get("pool") or {}).get("name") or "") if isinstance(spec.get("pool"), dict) else ""
        for dev in spec.get("devices") or []:
            if not isinstance(dev, dict):
                continue
            attrs = dev.get("attributes") or {}
            if not isinstance(attrs, dict):
                continue
            if any(_strip(str(k)) == PRODUCT_ATTRIBUTE and isinstance(v, dict) and isinstance(v.get("string"), str)
                   for k, v in attrs.items()):
                out[(driver, pool, str(dev.get("name") or ""))] = dev
    return out


class GPUDeviceIndex:
    """Each node's GPU devices (:func:`_gpu_devices` of :func:`_by_node`), kept across scheduling
    cycles while the ResourceSlice objects are the same.

    Inputs: the list of ResourceSlice JSON dicts handed to :meth:`update`. What it depends on: the
    informers replace a slice with a new dict on every update and never change one in place, so the
    very same objects in the same order give the same per-node devices. Invalidated (the per-node
    results dropped) when any element differs by identity or the length does. A node's devices are
    computed at its first lookup after that. The returned dicts are shared: callers only read them.

    Why: PreScore described every feasible node's slices again for each Pod (all their device
    attributes scanned for ``productName``), and grouped every slice of the cluster by node first;
    at 5000 nodes that was a large part of a DRA Pod's cycle (bench/RESULTS.md optimisation log).
    ``tests/unit/plugins/gpu/test_dra_device_index.py`` checks it against the plain form on random
    slice updates.
    """

    def __init__(self) -> None:
        self._objs: list[Obj] = []
        self._by_node: dict[str, list[Obj]] = {}
        self._devices: dict[str, dict[DeviceID, Obj]] = {}
        self.rebuilds = 0

    def update(self, slices: list[Obj]) -> None:
        """Take the current slice objects (grouped again only when they changed)."""
        old = self._objs
        if len(slices) == len(old) and all(map(operator.is_, slices, old)):
            return
        self._objs = list(slices)
        self._by_node = _by_node([sl for sl in slices if isinstance(sl, dict)])
        self._devices = {}
        self.rebuilds += 1

    def devices(self, node_name: str) -> dict[DeviceID, Obj]:
        """The node's GPU devices by (driver, pool, device) (shared; do not change)."""
        hit = self._devices.get(node_name)
        if hit is None:
            hit = _gpu_devices(self._by_node.get(node_name, []))
            self._devices[node_name] = hit
        return hit


def _product(dev: Obj) -> str:
    for k, v in (dev.get("attributes") or {}).items():
        if _strip(str(k)) == PRODUCT_ATTRIBUTE and isinstance(v, dict):
            return str(v.get("string") or "")
    return ""


def _memory(dev: Obj) -> int | None:
    for k, v in (dev.get("capacity") or {}).items():
        if _strip(str(k)) == MEMORY_CAPACITY and isinstance(v, dict):
            return _bytes(v.get("value"))
    return None


def _results(claim_or_alloc: Obj, is_claim: bool) -> list[Obj]:
    alloc = ((claim_or_alloc.get("status") or {}).get("allocation") if is_claim else claim_or_alloc)
    if not isinstance(alloc, dict):
        return []
    res = (alloc.get("devices") or {}).get("results") if isinstance(alloc.get("devices"), dict) else None
    return [r for r in res or [] if isinstance(r, dict)]


def _did(r: Obj) -> DeviceID:
    return (str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))


def _consumed_memory(r: Obj) -> int:
    consumed = r.get("consumedCapacity")
    if isinstance(consumed, dict):
        for k, v in consumed.items():
            if _strip(str(k)) == MEMORY_CAPACITY:
                return _bytes(v) or 0
    return 0


def dra_node_gpus(state: CycleState, nodes: list[NodeInfo],
                  index: GPUDeviceIndex | None = None) -> dict[str, DRANodeGPUs] | None:
    """Per node of ``nodes``, the GPU devices the Pod's claims would get there (from
    DynamicResources' Filter results and the claims already allocated), or None when the Pod gets
    no GPU device by claim on any of them (no DynamicResources state, no claims, no GPU device).

    ``index``: a long-lived :class:`GPUDeviceIndex` (GPUScore keeps one), else the slices are
    grouped afresh.

    Never raises: malformed slices or claims count as "no GPU device" / "no memory capacity".
    """
    s = state.data.get(DRA_STATE_KEY)
    # claims first: most Pods have none, and a Protocol isinstance costs tens of microseconds
    if not getattr(s, "claims", None) or not isinstance(s, ClaimAllocationState) or state.snapshot is None:
        return None
    objects = state.snapshot.objects
    if index is None:
        index = GPUDeviceIndex()
    index.update(objects.list("ResourceSlice"))
    node_devices = {ni.name: index.devices(ni.name) for ni in nodes}
    if not any(node_devices.values()):
        return None  # no GPU device on any node: not a GPU Pod (claims are not even read)
    claims = [c for c in objects.list("ResourceClaim") if isinstance(c, dict)]
    own_uids = {str((c.get("metadata") or {}).get("uid") or "") for c in s.claims}
    held: set[DeviceID] = set()
    shared_mem: dict[DeviceID, int] = {}
    for c in claims:
        if str((c.get("metadata") or {}).get("uid") or "") in own_uids:
            continue
        for r in _results(c, True):
            if r.get("adminAccess") is True:
                continue
            did = _did(r)
            held.add(did)
            if r.get("shareID") is not None:
                shared_mem[did] = shared_mem.get(did, 0) + _consumed_memory(r)
    fixed = [r for c in s.claims for r in _results(c, True)]
    out: dict[str, DRANodeGPUs] = {}
    any_gpu = False
    for ni in nodes:
        results = fixed + [r for a in s.node_allocations.get(ni.name) or [] for r in _results(a, False)]
        devices = node_devices[ni.name]
        products: list[str] = []
        memory: list[tuple[int | None, int, int]] = []
        new: set[DeviceID] = set()
        for r in results:
            did = _did(r)
            dev = devices.get(did)
            if dev is None or r.get("adminAccess") is True:
                continue
            products.append(_product(dev))
            cap = _memory(dev)
            if r.get("shareID") is not None:
                memory.append((cap, shared_mem.get(did, 0), _consumed_memory(r)))
            else:
                memory.append((cap, 0, 0))
            if did not in held:
                new.add(did)
        any_gpu = any_gpu or bool(products)
        out[ni.name] = DRANodeGPUs(tuple(products), tuple(memory), len(devices),
                                   sum(1 for d in devices if d in held), len(new))
    return out if any_gpu else None
