"""A node's GPU inventory, derived from everything a real GPU node may publish (issue 17).

Not an upstream plugin: py-scheduler's own. What the kubelet will hand out is the node's
``status.allocatable`` (as upstream's ``pkg/scheduler/framework/plugins/noderesources/fit.go`` counts
extended resources); labels only *describe* those units. Sources, in the order they are consulted:

1. **Allocatable** (the truth for counts): ``<resource>`` (``nvidia.com/gpu``) units, and per MIG
   profile ``<domain>/mig-<profile>`` (MIG "mixed" strategy of the NVIDIA device plugin). A node
   publishing no ``nvidia.com/gpu`` offers **no** GPU units, whatever its labels say.
2. **NVIDIA GPU Feature Discovery** labels (``nvidia.com/gpu.product``, ``.memory`` MiB, ``.count``,
   ``.replicas``, ``nvidia.com/mig.strategy``, ``nvidia.com/mig-<profile>.memory``). GFD appends
   ``-SHARED`` to the product under time-slicing / MPS and ``-MIG-<profile>`` under MIG "single",
   where it also overrides ``gpu.count`` / ``gpu.memory`` with the slices' values
   (``NVIDIA/k8s-device-plugin`` ``docs/gpu-feature-discovery/README.md``).
3. **Cloud labels**: GKE ``cloud.google.com/gke-accelerator`` (product), ``gke-accelerator-count``,
   ``gke-gpu-partition-size`` (MIG profile of every unit), ``gke-gpu-sharing-strategy`` +
   ``gke-max-shared-clients-per-gpu`` (time-sharing / MPS replicas); EKS (Karpenter)
   ``karpenter.k8s.aws/instance-gpu-name`` / ``-gpu-count`` / ``-gpu-memory`` (MiB), EKS Auto Mode
   ``eks.amazonaws.com/instance-gpu-name`` / ``-count`` / ``-memory``, the eksctl / cluster-autoscaler
   convention ``k8s.amazonaws.com/accelerator``; AKS ``kubernetes.azure.com/accelerator`` names the
   vendor only (``nvidia``) and is therefore never taken for a model.
4. py-scheduler's own labels ``<prefix>gpu-model`` and ``<prefix>gpu-memory-gb`` (decimal GB).

Units behind ``<resource>`` (``unit_kind``): ``gpu`` (whole cards), ``replica`` (time-sliced or MPS
shares: ``replicas`` per physical card) or ``mig`` (MIG slices of ``slice_profile``). Memory per
unit: a whole card's memory; for a replica ``memory // replicas`` (what a share can count on when
every share is in use: time-slicing isolates no memory); for a slice the slice's memory. When no
memory label exists, a memory token of the product name (``nvidia-a100-80gb`` -> 80 GB) is used.

Disagreements (a count label and allocatable that differ, labels describing GPUs with no
allocatable, MIG profile labels without allocatable) are resolved to allocatable and kept in
``notes``; GPUFilter appends them to a failing node's reason, so ``explain`` shows them.

Never raises: a malformed value of a field the verdict needs fails the node (``error``); a
malformed *memory* label only makes memory unknown (``memory_error``), which fails only Pods that
ask for memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from py_scheduler.framework.types import NodeInfo
from py_scheduler.plugins.gpu.model import (
    GB,
    GFD_COUNT,
    GFD_MEMORY,
    GFD_PRODUCT,
    MAX_GPUS_PER_NODE,
    MIB,
    GPUKeys,
    GPUParseError,
    NodeGPUSpec,
    _gb_to_bytes,
    _non_negative_decimal,
    _non_negative_int,
    parse_groups,
    split_product,
)

__all__ = [
    "AKS_ACCELERATOR",
    "EKS_ACCELERATOR",
    "EKS_AUTO_GPU_COUNT",
    "EKS_AUTO_GPU_MEMORY",
    "EKS_AUTO_GPU_NAME",
    "GFD_MIG_STRATEGY",
    "GFD_REPLICAS",
    "GKE_ACCELERATOR",
    "GKE_ACCELERATOR_COUNT",
    "GKE_MAX_SHARED_CLIENTS",
    "GKE_PARTITION_SIZE",
    "GKE_SHARING_STRATEGY",
    "KARPENTER_GPU_COUNT",
    "KARPENTER_GPU_MEMORY",
    "KARPENTER_GPU_NAME",
    "NVIDIA_SHARING_STRATEGY",
    "UNIT_GPU",
    "UNIT_MIG",
    "UNIT_REPLICA",
    "GPUInventory",
    "MigProfile",
    "build_node_spec",
    "parse_node",
    "profile_memory_bytes",
    "split_product_suffixes",
]

GFD_REPLICAS = "nvidia.com/gpu.replicas"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_ACCELERATOR_COUNT = "cloud.google.com/gke-accelerator-count"
GKE_PARTITION_SIZE = "cloud.google.com/gke-gpu-partition-size"
GKE_SHARING_STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_MAX_SHARED_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
NVIDIA_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
KARPENTER_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
EKS_AUTO_GPU_NAME = "eks.amazonaws.com/instance-gpu-name"
EKS_AUTO_GPU_COUNT = "eks.amazonaws.com/instance-gpu-count"
EKS_AUTO_GPU_MEMORY = "eks.amazonaws.com/instance-gpu-memory"
EKS_ACCELERATOR = "k8s.amazonaws.com/accelerator"
AKS_ACCELERATOR = "kubernetes.azure.com/accelerator"

UNIT_GPU = "gpu"
UNIT_REPLICA = "replica"
UNIT_MIG = "mig"

_PROFILE_RE = re.compile(r"^([0-9]+)g\.([0-9]+)gb\Z")
_MIG_SUFFIX_RE = re.compile(r"^(.*?)-mig-([0-9]+g\.[0-9]+gb)\Z", re.IGNORECASE)
_SHARED_SUFFIX = "-shared"


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile a node publishes as its own extended resource (MIG "mixed" strategy).

    Attributes:
        name: the profile, ``1g.10gb``.
        count: allocatable ``<domain>/mig-<name>``.
        memory_bytes: memory of one instance (label ``nvidia.com/mig-<name>.memory`` MiB, else the
            profile name's GB).
    """

    name: str
    count: int
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class GPUInventory:
    """What a node's GPUs are (module docstring: sources and their order).

    Attributes:
        unit_kind: ``gpu``, ``replica`` or ``mig``: what one ``<resource>`` unit is.
        physical: physical cards behind the units, None when unknown (MIG single without GKE labels).
        replicas: shares per physical card (1 unless time-sliced / MPS).
        slice_profile: the MIG profile of every unit when ``unit_kind`` is ``mig``.
        card_memory_bytes: memory of one physical card, None when unknown.
        mig: MIG profiles published as separate resources (mixed strategy), by name.
        product_source: the label the product came from (``""``: none).
        notes: label / allocatable disagreements, resolved to allocatable.
        per_container: the most ``<resource>`` units one container may ask on this node (None: no
            limit). 1 on GKE time-sharing / MPS nodes (GKE's device plugin refuses more at
            admission) and on NVIDIA-shared nodes whose device plugin has
            ``failRequestsGreaterThanOne`` (MPS always; time-slicing when the node's label
            ``<prefix>fail-requests-greater-than-one`` says ``"true"``).
        sharing: who shares the units: ``""`` (nobody), ``gke-time-sharing``, ``gke-mps``,
            ``nvidia-time-slicing`` or ``nvidia-mps`` (for the Filter reason).
    """

    unit_kind: str = UNIT_GPU
    physical: int | None = 0
    replicas: int = 1
    slice_profile: str | None = None
    card_memory_bytes: int | None = None
    mig: tuple[MigProfile, ...] = ()
    product_source: str = ""
    notes: tuple[str, ...] = ()
    per_container: int | None = None
    sharing: str = ""

    def mig_profile(self, name: str) -> MigProfile | None:
        """The mixed-strategy profile ``name`` (case-insensitive), or None."""
        low = name.lower()
        return next((p for p in self.mig if p.name == low), None)


def profile_memory_bytes(profile: str) -> int | None:
    """``1g.10gb`` -> 10 GB in bytes (decimal, a lower bound of the instance's memory); None when
    ``profile`` is not of the form ``<n>g.<m>gb``."""
    m = _PROFILE_RE.match(profile.strip().lower())
    return int(m.group(2)) * GB if m else None


def split_product_suffixes(product: str) -> tuple[str, str | None, bool]:
    """(base product, MIG profile or None, shared) of a GFD product name:
    ``NVIDIA-A100-80GB-PCIe-MIG-1g.10gb`` -> (``NVIDIA-A100-80GB-PCIe``, ``1g.10gb``, False);
    ``Tesla-T4-SHARED`` -> (``Tesla-T4``, None, True)."""
    base = product.strip()
    shared = base.lower().endswith(_SHARED_SUFFIX)
    if shared:
        base = base[:-len(_SHARED_SUFFIX)]
    m = _MIG_SUFFIX_RE.match(base)
    if m:
        return m.group(1), m.group(2).lower(), shared
    return base, None, shared


def _str_label(labels: dict[str, Any], key: str) -> str | None:
    if key not in labels:
        return None
    raw = labels[key]
    if not isinstance(raw, str):
        raise GPUParseError("label", key, raw, "not a string")
    return raw.strip() or None


def _int_label(labels: dict[str, Any], key: str) -> int | None:
    return _non_negative_int("label", key, labels[key]) if key in labels else None


def _memory(labels: dict[str, Any], keys: GPUKeys, mig_single: bool, product: str) -> tuple[int | None, str | None]:
    """(memory of one physical card in bytes or None, the malformed-label reason or None)."""
    try:
        if GFD_MEMORY in labels and not mig_single:
            return _non_negative_int("label", GFD_MEMORY, labels[GFD_MEMORY]) * MIB, None
        for key in (KARPENTER_GPU_MEMORY, EKS_AUTO_GPU_MEMORY):
            if key in labels:
                return _non_negative_int("label", key, labels[key]) * MIB, None
        if keys.gpu_memory_gb in labels:
            return _gb_to_bytes(_non_negative_decimal("label", keys.gpu_memory_gb, labels[keys.gpu_memory_gb])), None
    except GPUParseError as exc:
        return None, f"node(s) had {exc}"
    mem = split_product(product)[1] if product else None
    return (int(mem[:-2]) * GB if mem else None), None


def _sharing(labels: dict[str, Any], keys: GPUKeys, unit_kind: str, gke: str) -> tuple[int | None, str]:
    """(units one container may ask, who shares) of a node (:class:`GPUInventory`'s ``per_container``
    and ``sharing``).

    GKE: time-sharing and MPS nodes grant at most 1 ``nvidia.com/gpu`` per container (GKE's
    "at most 1 nvidia.com/gpu can be requested on GPU nodes", an admission error). NVIDIA's device
    plugin (README, "Shared Access to GPUs"): a time-sliced replica request larger than 1 is granted
    ("hands them out to anyone that asks") unless ``failRequestsGreaterThanOne`` is set; under MPS
    the plugin always sets it (``api/config/v1/config.go``, since v0.15.0). That flag lives in the
    plugin's ConfigMap, not on the node, so the node label ``<prefix>fail-requests-greater-than-one``
    (``"true"``) states it for time-slicing; any other value reads as unset.
    """
    if gke in ("time-sharing", "mps"):
        return 1, f"gke-{gke}"
    if unit_kind != UNIT_REPLICA:
        return None, ""
    mps = (_str_label(labels, NVIDIA_SHARING_STRATEGY) or "").lower() == "mps"
    raw = labels.get(keys.fail_requests_greater_than_one)
    flag = raw.strip().lower() if isinstance(raw, str) else None
    fail = mps or flag == "true"
    return (1 if fail else None), ("nvidia-mps" if mps else "nvidia-time-slicing")


def build_node_spec(ni: NodeInfo, keys: GPUKeys) -> NodeGPUSpec:
    """The node's :class:`~py_scheduler.plugins.gpu.model.NodeGPUSpec` with its
    :class:`GPUInventory`. Never raises: a malformed field the verdict needs yields ``error`` =
    ``node(s) had invalid label <key>="<value>": <why>``."""
    try:
        return _build(ni, keys)
    except GPUParseError as exc:
        return NodeGPUSpec(error=f"node(s) had {exc}")


def _build(ni: NodeInfo, keys: GPUKeys) -> NodeGPUSpec:
    node = ni.node or {}
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    if not isinstance(labels, dict):
        labels = {}
    if not isinstance(ann, dict):
        ann = {}
    rn = keys.resource_name
    notes: list[str] = []
    scalar = ni.allocatable.scalar
    has_units = rn in scalar
    units = scalar.get(rn, 0)
    if units < 0:
        raise GPUParseError("field", f"status.allocatable.{rn}", str(units), "not a non-negative integer")
    if units > MAX_GPUS_PER_NODE:
        raise GPUParseError("field", f"status.allocatable.{rn}", str(units), f"more than {MAX_GPUS_PER_NODE} GPUs")

    # -- product ---------------------------------------------------------------------------------
    raw_product, product_source = "", ""
    for key in (GFD_PRODUCT, GKE_ACCELERATOR, KARPENTER_GPU_NAME, EKS_AUTO_GPU_NAME, EKS_ACCELERATOR,
                keys.gpu_model):
        v = _str_label(labels, key)
        if v is not None:
            raw_product, product_source = v, key
            break
    product, product_profile, shared = split_product_suffixes(raw_product)

    # -- what one unit is ------------------------------------------------------------------------
    partition = _str_label(labels, GKE_PARTITION_SIZE)
    strategy = (_str_label(labels, GFD_MIG_STRATEGY) or "").lower()
    slice_profile: str | None = None
    if partition is not None:
        slice_profile = partition.lower()
    elif product_profile is not None and strategy in ("single", ""):
        slice_profile = product_profile
    replicas = _int_label(labels, GFD_REPLICAS) or 1
    gke_sharing = (_str_label(labels, GKE_SHARING_STRATEGY) or "").lower()
    if gke_sharing in ("time-sharing", "mps"):
        replicas = max(replicas, _int_label(labels, GKE_MAX_SHARED_CLIENTS) or 1)
    count_label: tuple[str, int] | None = None
    for key in (GFD_COUNT, GKE_ACCELERATOR_COUNT, KARPENTER_GPU_COUNT, EKS_AUTO_GPU_COUNT):
        c = _int_label(labels, key)
        if c is not None:
            count_label = (key, c)
            break
    unit_kind = UNIT_GPU
    physical: int | None = units
    if slice_profile is not None:
        unit_kind = UNIT_MIG
        physical = None
        gke_count = _int_label(labels, GKE_ACCELERATOR_COUNT)
        if gke_count is not None:
            physical = gke_count
    elif replicas > 1 or shared:
        unit_kind = UNIT_REPLICA
        if replicas <= 1 and count_label is not None and count_label[1] > 0:
            replicas = max(1, units // count_label[1])
        physical = units // replicas if replicas > 1 else units
    domain = rn.split("/", 1)[0]
    mig_prefix = f"{domain}/mig-"
    if not has_units and count_label is not None and count_label[1] > 0:
        if any(r.startswith(mig_prefix) and n > 0 for r, n in scalar.items()):
            notes.append(f"label {count_label[0]}={count_label[1]} but no allocatable {rn}: "
                         f"its GPUs are split into MIG instances ({mig_prefix}*)")
        else:
            notes.append(f"label {count_label[0]}={count_label[1]} but no allocatable {rn}: the kubelet grants none")
    elif has_units and count_label is not None and unit_kind != UNIT_MIG and count_label[1] != physical:
        notes.append(f"label {count_label[0]}={count_label[1]} disagrees with allocatable {rn}={units}"
                     + (f" ({replicas} replicas per GPU)" if unit_kind == UNIT_REPLICA else ""))

    # -- MIG mixed profiles: allocatable <domain>/mig-<profile> ---------------------------------
    profiles: list[MigProfile] = []
    for res, n in sorted(scalar.items()):
        if not res.startswith(mig_prefix) or n <= 0:
            continue
        name = res[len(mig_prefix):].lower()
        mem_key = f"{domain}/mig-{name}.memory"
        try:
            mem = _non_negative_int("label", mem_key, labels[mem_key]) * MIB if mem_key in labels else None
        except GPUParseError:
            mem = None
        if mem is None:
            mem = profile_memory_bytes(name) or 0
        profiles.append(MigProfile(name, n, mem))
    published = {p.name for p in profiles}
    for key in sorted(k for k in labels if isinstance(k, str) and k.startswith(mig_prefix) and k.endswith(".count")):
        name = key[len(mig_prefix):-len(".count")].lower()
        if name not in published and str(labels[key]).strip() not in ("", "0"):
            notes.append(f"label {key}={labels[key]} but no allocatable {mig_prefix}{name}")

    # -- memory ----------------------------------------------------------------------------------
    card_memory, memory_error = _memory(labels, keys, slice_profile is not None, product)
    unit_memory: int | None
    if unit_kind == UNIT_MIG:
        unit_memory = None
        if GFD_MEMORY in labels and partition is None:
            try:
                unit_memory = _non_negative_int("label", GFD_MEMORY, labels[GFD_MEMORY]) * MIB
            except GPUParseError as exc:
                memory_error = f"node(s) had {exc}"
        if unit_memory is None and slice_profile is not None and memory_error is None:
            unit_memory = profile_memory_bytes(slice_profile)
    elif unit_kind == UNIT_REPLICA:
        unit_memory = card_memory // replicas if card_memory is not None else None
    else:
        unit_memory = card_memory

    # -- NVLink groups and scoring metrics (py-scheduler's own annotations / labels) ---------------
    total = units
    groups: list[list[int]]
    if keys.nvlink_groups in ann:
        groups = [[i for i in g if i < total] for g in parse_groups(ann[keys.nvlink_groups], keys.nvlink_groups)]
        groups = [g for g in groups if g]
    elif keys.max_nvlink_group_size in labels:
        size = _non_negative_int("label", keys.max_nvlink_group_size, labels[keys.max_nvlink_group_size])
        if size == 0:
            raise GPUParseError("label", keys.max_nvlink_group_size, labels[keys.max_nvlink_group_size],
                                "not a positive integer")
        groups = [list(range(s, min(s + size, total))) for s in range(0, total, size)]
    else:
        groups = []
    grouped = {i for g in groups for i in g}
    groups += [[i] for i in range(total) if i not in grouped]
    used = 0
    if keys.used_memory_gb in ann:
        used = _gb_to_bytes(_non_negative_decimal("annotation", keys.used_memory_gb, ann[keys.used_memory_gb]))
    queue = 0
    if keys.current_queue in ann:
        queue = _non_negative_int("annotation", keys.current_queue, ann[keys.current_queue])
    per_container, sharing = _sharing(labels, keys, unit_kind, gke_sharing)
    inv = GPUInventory(unit_kind, physical, replicas, slice_profile, card_memory, tuple(profiles),
                       product_source, tuple(notes), per_container, sharing)
    return NodeGPUSpec(total, product, unit_memory, tuple(tuple(g) for g in groups), used, queue,
                       memory_error=memory_error, inventory=inv)


def parse_node(ni: NodeInfo, keys: GPUKeys) -> NodeGPUSpec:
    """Read a node's GPU description (:func:`build_node_spec`: allocatable first, then GFD, cloud
    and py-scheduler labels). Never raises: a malformed value yields ``error`` set to
    ``node(s) had invalid label nvidia.com/gpu.product="7": not a string``."""
    return build_node_spec(ni, keys)
