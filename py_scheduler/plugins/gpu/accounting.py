"""Per-GPU accounting: which GPU indices of a node each Pod holds, derived from the NodeInfo.

Not an upstream plugin (py-scheduler's issue 6); it plays the role upstream's
``pkg/scheduler/framework/plugins/noderesources/fit.go`` plays for whole-resource counting, at the
granularity of GPU indices, and relies on the cache semantics of
``pkg/scheduler/backend/cache/cache.go`` (a NodeInfo holds every bound and assumed Pod; deleted and
finished Pods leave it).

The allocation of a node is a pure function of its :class:`~py_scheduler.framework.types.NodeInfo`:

1. Pods holding GPUs (``nvidia.com/gpu`` or the ``gpu-count`` annotation) are taken in a fixed
   order: ``metadata.creationTimestamp``, then ``namespace/name``, then UID.
2. A Pod whose ``gpu-indices`` annotation lists exactly as many distinct, in-range indices as it
   holds GPUs, none taken by an earlier Pod, keeps those indices.
3. Every other Pod holding GPUs (bound by another scheduler, or with a missing / malformed /
   conflicting annotation) is allocated *virtually* to the lowest free indices, in the same order,
   so free counts never exceed reality. GPUs wanted beyond the node's total are ``overcommitted``.

Restart and leader failover therefore rebuild every allocation from the API objects, and a deleted
or finished Pod frees its indices as soon as the cache drops it. The derived state is memoized by
``(keys, node name, node_info.generation)``: every NodeInfo change bumps the generation, and a
snapshot's clone of an unchanged NodeInfo keeps it.

Index choice (:func:`pick`, used by both Filter and Reserve, deterministic): among NVLink groups
with at least ``count`` free GPUs take the one with the fewest free GPUs (best fit; ties: lowest
index), and in it the ``count`` lowest free indices. When no single group fits: with NVLink
required there is no placement; otherwise whole groups are filled in order of most free GPUs
(ties: lowest index), the lowest free indices of each first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from py_scheduler.framework.types import Code, NodeInfo, PodInfo
from py_scheduler.plugins.gpu.inventory import UNIT_MIG, GPUInventory, parse_node
from py_scheduler.plugins.gpu.model import GPUKeys, GPURequest, NodeGPUSpec, model_matches, pod_gpu_usage

__all__ = [
    "ERR_INSUFFICIENT",
    "ERR_MEMORY",
    "ERR_MIG_PROFILE",
    "ERR_MIG_SLICES",
    "ERR_MODEL",
    "ERR_NVLINK",
    "ERR_SHARED",
    "ERR_UNKNOWN_MEMORY",
    "MEMO_CAPACITY",
    "NodeGPUState",
    "clear_memo",
    "derive_state",
    "largest_intact_group",
    "pack_fraction",
    "pick",
    "verdict",
]

ERR_INSUFFICIENT = "node(s) had insufficient free GPUs"
ERR_MODEL = "node(s) didn't match the requested GPU model"
ERR_MEMORY = "node(s) had insufficient GPU memory"
ERR_UNKNOWN_MEMORY = "node(s) had unknown GPU memory"
ERR_NVLINK = "node(s) had no NVLink group with enough free GPUs"
ERR_MIG_SLICES = "node(s) had MIG slices, not whole GPUs"
ERR_MIG_PROFILE = "node(s) didn't have the requested MIG profile"
ERR_SHARED = "node(s) had shared GPUs that grant at most 1 per container"

MEMO_CAPACITY = 8192
"""Derived node states kept (LRU); a few per node of a large cluster."""

MEMO_GENERATIONS_PER_NODE = 2
"""Generations of one node kept: a node's state is asked for at its newest generation (and, during
preemption or a pod-group trial, at a clone's), so older ones are dropped when a newer one is
derived. Without this a small cluster filled the LRU with stale generations (~2 KiB each, up to
~17 MiB; docs/faults.md, soak)."""


@dataclass(frozen=True, slots=True)
class NodeGPUState:
    """A node's GPUs and who holds which.

    Attributes:
        spec: the node's parsed description.
        allocations: Pod UID (``namespace/name`` when the UID is empty) -> indices held.
        virtual: the UIDs whose indices were assigned virtually (no usable annotation).
        free: indices nobody holds.
        overcommitted: GPUs held by Pods beyond what the node has (0 normally).
        derived: results of pure functions of this state and a request (GPUFilter's verdict,
            GPUScore's intact group size), keyed by their caller; the state is memoized per NodeInfo
            generation, so a stream of Pods asking alike computes them once per node version.
    """

    spec: NodeGPUSpec
    allocations: dict[str, tuple[int, ...]]
    virtual: frozenset[str]
    free: frozenset[int]
    overcommitted: int = 0
    derived: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def free_in(self, group: tuple[int, ...]) -> tuple[int, ...]:
        """The free indices of one group, ascending."""
        return tuple(i for i in group if i in self.free)


def _pod_order(p: PodInfo) -> tuple[str, str, str]:
    ts = (p.pod.get("metadata") or {}).get("creationTimestamp")
    return (str(ts) if ts is not None else "", p.key, p.uid)


def _compute(ni: NodeInfo, keys: GPUKeys) -> NodeGPUState:
    spec = parse_node(ni, keys)
    total = spec.total
    taken: set[int] = set()
    allocations: dict[str, tuple[int, ...]] = {}
    pending: list[tuple[str, int]] = []
    for p in sorted(ni.pods, key=_pod_order):
        count, indices = pod_gpu_usage(p, keys)
        if count <= 0:
            continue
        owner = p.uid or p.key
        if (indices is not None and len(indices) == count and all(i < total for i in indices)
                and not taken.intersection(indices)):
            taken.update(indices)
            allocations[owner] = indices
        else:
            pending.append((owner, count))
    virtual: set[str] = set()
    over = 0
    for owner, count in pending:
        free = [i for i in range(total) if i not in taken][:count]
        over += count - len(free)
        taken.update(free)
        allocations[owner] = tuple(free)
        virtual.add(owner)
    return NodeGPUState(spec, allocations, frozenset(virtual),
                        frozenset(i for i in range(total) if i not in taken), over)


_memo: OrderedDict[tuple[GPUKeys, str, int], NodeGPUState] = OrderedDict()
_generations: dict[tuple[GPUKeys, str], list[int]] = {}
"""(keys, node) -> the generations of it in ``_memo`` (derived order, at most
:data:`MEMO_GENERATIONS_PER_NODE`; an entry may already be gone from the LRU)."""


def derive_state(ni: NodeInfo, keys: GPUKeys) -> NodeGPUState:
    """The node's :class:`NodeGPUState`, memoized by (GPU keys, node name, NodeInfo generation): a
    NodeInfo's generation changes whenever its Pods or Node change (``framework/types.py``), so a
    memoized state is that of exactly the same inputs. Bounded by :data:`MEMO_CAPACITY` overall and
    :data:`MEMO_GENERATIONS_PER_NODE` per node. Never raises."""
    k = (keys, ni.name, ni.generation)
    st = _memo.get(k)
    if st is not None:
        _memo.move_to_end(k)
        return st
    st = _compute(ni, keys)
    _memo[k] = st
    gens = _generations.setdefault((keys, ni.name), [])
    gens.append(ni.generation)
    while len(gens) > MEMO_GENERATIONS_PER_NODE:
        _memo.pop((keys, ni.name, gens.pop(0)), None)
    if len(_memo) > MEMO_CAPACITY:
        (okeys, oname, ogen), _ = _memo.popitem(last=False)
        old = _generations.get((okeys, oname))
        if old is not None:
            if ogen in old:
                old.remove(ogen)
            if not old:
                del _generations[(okeys, oname)]
    return st


def clear_memo() -> None:
    """Forget every memoized node state (tests; a "restart")."""
    _memo.clear()
    _generations.clear()


def pick(st: NodeGPUState, count: int, nvlink: bool) -> tuple[int, ...] | None:
    """The indices a Pod wanting ``count`` GPUs gets on this node (module docstring), or None.

    None when fewer than ``count`` GPUs are free, or with ``nvlink`` when no NVLink group has
    ``count`` free GPUs.
    """
    if count <= 0:
        return ()
    if len(st.free) < count:
        return None
    per_group = [fg for fg in (st.free_in(g) for g in st.spec.groups) if fg]
    fitting = [fg for fg in per_group if len(fg) >= count]
    if fitting:
        best = min(fitting, key=lambda fg: (len(fg), fg[0]))
        return best[:count]
    if nvlink:
        return None
    out: list[int] = []
    for fg in sorted(per_group, key=lambda fg: (-len(fg), fg[0])):
        out.extend(fg[:count - len(out)])
        if len(out) == count:
            break
    return tuple(sorted(out))


def largest_intact_group(st: NodeGPUState, taken: tuple[int, ...] = ()) -> int:
    """Size of the largest NVLink group whose GPUs are all free once ``taken`` is held too (0: none)."""
    gone = set(taken)
    return max((len(g) for g in st.spec.groups if all(i in st.free and i not in gone for i in g)), default=0)


def _with_notes(reason: str, spec: NodeGPUSpec, mig: bool = False) -> str:
    """``reason`` plus the node's disagreements in parentheses: those about MIG profile labels when
    ``mig``, the others otherwise."""
    inv = spec.inventory
    if not isinstance(inv, GPUInventory):
        return reason
    notes = [n for n in inv.notes if ("/mig-" in n.split(" ", 2)[1]) == mig]
    return f"{reason} ({'; '.join(notes)})" if notes else reason


def _memory_check(req: GPURequest, have: int | None, spec: NodeGPUSpec) -> tuple[Code, str] | None:
    if req.memory_bytes <= 0:
        return None
    if have is None:
        return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, spec.memory_error or ERR_UNKNOWN_MEMORY
    if have < req.memory_bytes:
        return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_MEMORY
    return None


def verdict(req: GPURequest, st: NodeGPUState) -> tuple[Code, str] | None:
    """GPUFilter's checks, in order; the first failing one's (code, reason), None when the node fits.

    1. malformed node GPU metadata -> UnschedulableAndUnresolvable ``spec.error``;
    2. MIG instances asked (``nvidia.com/mig-<p>``): the node publishes no such profile or fewer
       instances -> ``ERR_MIG_PROFILE``; model (base product) and memory (the instance's) as below;
    3. GPU units asked: a node whose units are MIG slices (MIG single, GKE partitions) serves a
       plain request as the kubelet does, a slice per unit, when model and memory fit the slice
       below; it refuses a Pod that opted out (``whole-gpu``) or asks ``nvidia.com/mig-<p>`` too
       (``ERR_MIG_SLICES``) and a Pod naming another profile (``ERR_MIG_PROFILE``); a Pod naming a
       profile gets no whole card -> ``ERR_MIG_PROFILE``; count > units -> ``ERR_INSUFFICIENT``;
       a container asking more units than a shared node grants one container (GKE time-sharing /
       MPS, NVIDIA ``failRequestsGreaterThanOne``) -> ``ERR_SHARED``; model; memory per unit
       (``ERR_UNKNOWN_MEMORY`` or the malformed memory label's reason, ``ERR_MEMORY``), all
       UnschedulableAndUnresolvable; free units < count -> Unschedulable ``ERR_INSUFFICIENT``; NVLink.

    Reasons of UnschedulableAndUnresolvable verdicts carry the node's label / allocatable
    disagreements in parentheses (``explain`` shows them per node).
    """
    spec = st.spec
    if spec.error is not None:
        return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, spec.error
    inv = spec.inventory if isinstance(spec.inventory, GPUInventory) else GPUInventory()
    uu = Code.UNSCHEDULABLE_AND_UNRESOLVABLE

    def model_ok() -> bool:
        return not req.models or any(model_matches(m, spec.product) for m in req.models)

    if req.mig_count > 0 and req.mig_profile is not None:
        prof = inv.mig_profile(req.mig_profile)
        if prof is None or prof.count < req.mig_count:
            return uu, _with_notes(ERR_MIG_PROFILE, spec, mig=True)
        if not model_ok():
            return uu, ERR_MODEL
        m = _memory_check(req, prof.memory_bytes or None, spec)
        if m is not None:
            return m
    if req.count <= 0:
        return None
    if inv.unit_kind == UNIT_MIG:
        if req.whole_gpu or req.mig_count > 0:
            return uu, _with_notes(ERR_MIG_SLICES, spec)
        if req.mig_profile is not None and inv.slice_profile != req.mig_profile:
            return uu, ERR_MIG_PROFILE
    elif req.mig_profile is not None and req.mig_count == 0:
        return uu, _with_notes(ERR_MIG_PROFILE, spec)
    if req.count > spec.total:
        return uu, _with_notes(ERR_INSUFFICIENT, spec)
    if inv.per_container is not None and req.per_container > inv.per_container:
        return uu, ERR_SHARED
    if not model_ok():
        return uu, ERR_MODEL
    m = _memory_check(req, spec.memory_bytes, spec)
    if m is not None:
        return m
    if len(st.free) < req.count:
        return Code.UNSCHEDULABLE, ERR_INSUFFICIENT
    if req.nvlink and pick(st, req.count, True) is None:
        resolvable = any(len(g) >= req.count for g in spec.groups)
        return (Code.UNSCHEDULABLE if resolvable else uu), ERR_NVLINK
    return None


def pack_fraction(st: NodeGPUState, count: int, spread: bool = False) -> Fraction:
    """Share of the node's GPU units in use once a Pod wanting ``count`` more is placed, in [0, 1]
    (``spread``: 1 minus that). A node with no units gives 0. GPUScore's packing term: best fit, so
    free GPUs stay together on few nodes instead of one per node (fragmentation)."""
    total = st.spec.total
    if total <= 0:
        return Fraction(0)
    used = min(total, total - len(st.free) + st.overcommitted + max(count, 0))
    f = Fraction(used, total)
    return 1 - f if spread else f
