"""GPUScore: rank feasible nodes for a GPU Pod by model preference, memory headroom and queue length.

Not an upstream plugin (py-scheduler's issue 6); it is built like upstream's score plugins
(``pkg/scheduler/framework/plugins/noderesources/fit.go`` PreScore/Score,
``pkg/scheduler/framework/plugins/helper/normalize_score.go``): PreScore computes what all nodes
share and Skips for Pods that ask for no GPU; Score returns a raw value; NormalizeScore maps the raw
values to [0, 100]. The profile weight (default 2, ``GPU_PLUGINS`` in
``py_scheduler/framework/config.py``) multiplies the normalized score.

Formula, for a Pod wanting ``c`` GPUs and a node (weights ``wm``, ``wmem``, ``wq`` from the args,
default 40 / 35 / 25, ``W = wm + wmem + wq``):

- ``model`` = 1 when the Pod names no model; otherwise, with the Pod's preference list of ``k``
  models (``gpu-model: "H100,A100"``) and ``i`` the 0-based position of the first one matching the
  node, ``(k - i) / k``; 0 when none matches.
- ``memory`` = ``clamp((M - U/N - R) / M, 0, 1)``: per-unit headroom, with ``M`` the node's memory
  per GPU unit, ``U`` the node annotation ``used-memory-gb`` (all GPUs together, 0 when absent), ``N``
  the node's GPU count, ``R`` the Pod's ``gpu-memory-gb`` (0 when absent); when ``M`` is unknown, 0
  for a Pod asking memory and left out (with its weight) for a Pod asking none.
- ``queue`` = 1 when the largest ``current-queue`` among the scored nodes ``Qmax`` is 0, else
  ``1 - q / Qmax`` with ``q`` the node's annotation (0 when absent).
- ``pack`` (args ``packing``: ``binpack`` default, ``spread``, ``none``; weight ``packingWeight``
  ``wp``, default 100): :func:`~py_scheduler.plugins.gpu.accounting.pack_fraction` (share of the
  node's units in use once the Pod is placed; ``spread``: 1 minus it), min-max normalized among the
  nodes reaching the best ``model`` part; 0 for the others, so packing never beats a preference
  list. Left out for ``none`` and for Pods asking only MIG instances.
- ``base`` = ``100 * (wm*model + wmem*memory + wq*queue + wp*pack) / (weights of the terms
  present)`` in [0, 100], computed exactly and kept to 1/1000 (``b = floor(1000 * base)``).
- ``t`` = size of the node's largest NVLink group still entirely free after the Pod takes the
  indices :func:`~py_scheduler.plugins.gpu.accounting.pick` chooses (0 when none is left).

DRA (a Pod that gets GPUs by ResourceClaim, :mod:`py_scheduler.plugins.gpu.dra`): when
DynamicResources' Filter found GPU devices (a ``productName`` attribute, as NVIDIA's GPU DRA driver
publishes) for the Pod's claims on some node, the same parts are read from the devices the claims
would get on each node: ``model`` from the least preferred device's ``productName``; ``memory`` the
smallest per-device ``clamp((M - O - max(C, R)) / M, 0, 1)`` with ``M`` the device's ``memory``
capacity, ``O`` what other claims' shares consume of it, ``C`` this claim's consumed capacity (0 for
a whole device) and ``R`` the Pod's ``gpu-memory-gb``; ``queue`` from the node annotation as above;
``pack`` the share of the node's GPU devices held once the Pod's new ones are taken; ``t`` = 0.
A node where the Pod would get no GPU device scores 0. Pods without claims are scored as before,
so with GPUScore disabled placement is kube-scheduler's.

Score returns ``b * 1000 + min(t, 999)``. NormalizeScore sets each node to
``floor(99 * b / 100000) + (1 if t is the largest t among the nodes with the same b else 0)``:
the three parts decide, and among otherwise equal nodes the placement that keeps the largest free
NVLink group intact wins by one point. A node with malformed GPU metadata scores 0.

Args: ``prefix``, ``resourceName`` (as GPUFilter), ``modelWeight``, ``memoryWeight``,
``queueWeight`` (integers in [0, 1000], not all 0), ``packing``, ``packingWeight`` (integer in
[0, 1000]).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import MAX_NODE_SCORE, Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.gpu.accounting import NodeGPUState, derive_state, largest_intact_group, pack_fraction, pick
from py_scheduler.plugins.gpu.common import check_args, gpu_sign_pod, keys_from_args, request_for
from py_scheduler.plugins.gpu.dra import DRANodeGPUs, GPUDeviceIndex, dra_node_gpus
from py_scheduler.plugins.gpu.model import GPUKeys, GPUParseError, GPURequest, model_matches

NAME = "GPUScore"
PRE_SCORE_KEY = "PreScoreGPUScore"
DEFAULT_WEIGHTS = (40, 35, 25)
"""(model, memory headroom, queue length) weights."""
PACKING_MODES = ("binpack", "spread", "none")
DEFAULT_PACKING = "binpack"
DEFAULT_PACKING_WEIGHT = 100
"""Weight of the packing term: large enough that filling a partly used node beats
NodeResourcesFit's CPU/memory spreading (a GPU Pod's CPU share is about its GPU share)."""
_PACK_KEY = NAME + "/pack"
_T_LIMIT = 999
_B_SCALE = 1000

__all__ = ["DEFAULT_PACKING", "DEFAULT_PACKING_WEIGHT", "DEFAULT_WEIGHTS", "NAME", "PACKING_MODES", "PRE_SCORE_KEY",
           "GPUScore", "PreScoreState"]


@dataclass(frozen=True, slots=True)
class PreScoreState:
    """What all nodes share in one cycle: the request and the largest queue among scored nodes."""

    request: GPURequest
    max_queue: int
    best_model: Fraction = Fraction(1)
    """The best model part among the scored nodes: only nodes reaching it get a packing term."""
    pack_range: tuple[Fraction, Fraction] | None = None
    """(lowest, highest) packing fraction among the best-model nodes; None: no packing term."""
    base_memo: dict[tuple[str, int | None, int, int, int, int], int] = field(default_factory=dict, compare=False)
    """``base_milli`` per node description (product, memory, used memory, GPUs, queue): nodes that
    describe their GPUs alike share one exact computation per cycle."""
    dra: dict[str, DRANodeGPUs] | None = None
    """Per node, the GPU devices the Pod gets there by ResourceClaim (:mod:`.dra`); None: the Pod
    asks GPUs through the device plugin (``nvidia.com/gpu`` / annotations)."""
    states: dict[str, tuple[int, NodeGPUState]] = field(default_factory=dict, compare=False)
    """Node name -> (NodeInfo generation, the state PreScore derived for it with ``derive_state``):
    Score reads it back for a node of the same generation (the same cycle's snapshot) instead of a
    second LRU lookup; otherwise it derives the state again."""


class GPUScore:
    """PreScore / Score / NormalizeScore (the module docstring gives the formula)."""

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (py-scheduler's own: no upstream counterpart): as GPUFilter's. ``snapshot`` is unused by
        most plugins."""
        return gpu_sign_pod(pod, self.keys)


    def __init__(self, keys: GPUKeys | None = None, weights: tuple[int, int, int] = DEFAULT_WEIGHTS,
                 packing: str = DEFAULT_PACKING, packing_weight: int = DEFAULT_PACKING_WEIGHT) -> None:
        self.keys = keys or GPUKeys()
        self.weights = weights
        self.packing = packing
        self.packing_weight = packing_weight if packing != "none" else 0
        self._dra_devices = GPUDeviceIndex()
        """Each node's GPU devices by ResourceSlice, kept while the slice objects are the same."""

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> GPUScore:
        """Build from pluginConfig args ``{prefix, resourceName, modelWeight, memoryWeight, queueWeight}``.

        Raises:
            ConfigError: an unknown field or a bad value, naming the field.
        """
        args = args or {}
        check_args(args, {"prefix", "resourceName", "modelWeight", "memoryWeight", "queueWeight", "packing",
                          "packingWeight"})
        keys = keys_from_args(args)
        ws: list[int] = []
        for fld, default in zip(("modelWeight", "memoryWeight", "queueWeight"), DEFAULT_WEIGHTS, strict=True):
            v = args.get(fld, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 1000:
                raise ConfigError(f"{fld}: must be an integer in [0, 1000], got {v!r}")
            ws.append(v)
        if sum(ws) == 0:
            raise ConfigError("modelWeight, memoryWeight, queueWeight: must not all be 0")
        packing = args.get("packing", DEFAULT_PACKING)
        if packing not in PACKING_MODES:
            raise ConfigError(f"packing: must be one of {', '.join(PACKING_MODES)}, got {packing!r}")
        pw = args.get("packingWeight", DEFAULT_PACKING_WEIGHT)
        if isinstance(pw, bool) or not isinstance(pw, int) or pw < 0 or pw > 1000:
            raise ConfigError(f"packingWeight: must be an integer in [0, 1000], got {pw!r}")
        return cls(keys, (ws[0], ws[1], ws[2]), str(packing), pw)

    # -- PreScore ---------------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """Skip for Pods asking for no GPU (or whose request is malformed: PreFilter rejected them)."""
        try:
            req = request_for(state, pod, self.keys)
        except GPUParseError:
            return Status.skip()
        dra = dra_node_gpus(state, nodes, self._dra_devices)
        if dra is not None:
            return self._pre_score_dra(state, req, nodes, dra)
        if not req.wants_gpu:
            return Status.skip()
        keys = self.keys
        by_name = {ni.name: (ni.generation, derive_state(ni, keys)) for ni in nodes}
        states = [st for _, st in by_name.values() if st.spec.error is None]
        max_q = max((st.spec.queue for st in states), default=0)
        by_product: dict[str, Fraction] = {}
        for st in states:
            if st.spec.product not in by_product:
                by_product[st.spec.product] = self.model_part(req, st)
        best = max(by_product.values(), default=Fraction(1))
        pack_range: tuple[Fraction, Fraction] | None = None
        if self.packing_weight and req.count > 0:
            packs = [self.pack_part(req, st) for st in states if by_product[st.spec.product] == best]
            if packs:
                pack_range = (min(packs), max(packs))
        state.write(PRE_SCORE_KEY, PreScoreState(req, max_q, best, pack_range, states=by_name))
        return Status.success()

    def _pre_score_dra(self, state: CycleState, req: GPURequest, nodes: list[NodeInfo],
                       dra: dict[str, DRANodeGPUs]) -> Status:
        """PreScore for a Pod that gets its GPUs by claim: the same shared parts, read from the
        devices (module docstring, "DRA")."""
        max_q = max((self._queue(ni) for ni in nodes), default=0)
        best = max((self.dra_model_part(req, g) for g in dra.values() if g.products), default=Fraction(1))
        pack_range: tuple[Fraction, Fraction] | None = None
        if self.packing_weight:
            packs = [self.dra_pack_part(g) for g in dra.values()
                     if g.products and self.dra_model_part(req, g) == best]
            if packs:
                pack_range = (min(packs), max(packs))
        state.write(PRE_SCORE_KEY, PreScoreState(req, max_q, best, pack_range, dra=dra))
        return Status.success()

    def _queue(self, ni: NodeInfo) -> int:
        """The node's ``current-queue`` annotation (0 when absent or the GPU metadata is malformed)."""
        st = derive_state(ni, self.keys)
        return st.spec.queue if st.spec.error is None else 0

    @staticmethod
    def dra_model_part(req: GPURequest, g: DRANodeGPUs) -> Fraction:
        """The model part of a claim's devices: the least preferred device's (``productName``)."""
        if not req.models:
            return Fraction(1)
        k = len(req.models)
        worst = k
        for product in g.products:
            i = next((j for j, m in enumerate(req.models) if model_matches(m, product)), k)
            worst = min(worst, k - i)
        return Fraction(worst, k)

    def dra_pack_part(self, g: DRANodeGPUs) -> Fraction:
        """Share of the node's GPU devices held once the Pod's new devices are taken (``spread``:
        1 minus that); 0 for a node publishing no GPU device."""
        if g.total <= 0:
            return Fraction(0)
        f = Fraction(min(g.total, g.used + g.new), g.total)
        return 1 - f if self.packing == "spread" else f

    def dra_parts(self, ps: PreScoreState, g: DRANodeGPUs,
                  queue: int) -> tuple[Fraction, Fraction | None, Fraction, Fraction | None]:
        """(model, memory, queue, packing) for a Pod getting the devices ``g`` (module docstring,
        "DRA"); memory is the smallest per-device headroom ``(M - others - max(own, R)) / M``."""
        req = ps.request
        model = self.dra_model_part(req, g)
        memory: Fraction | None = None
        for cap, others, own in g.memory:
            if not cap:
                if req.memory_bytes:
                    memory = Fraction(0)
                    break
                continue
            head = min(max(Fraction(cap - others - max(own, req.memory_bytes), cap), Fraction(0)), Fraction(1))
            memory = head if memory is None else min(memory, head)
        q = Fraction(1) if ps.max_queue == 0 else 1 - Fraction(min(queue, ps.max_queue), ps.max_queue)
        pack: Fraction | None = None
        if ps.pack_range is not None:
            lo, hi = ps.pack_range
            if model != ps.best_model:
                pack = Fraction(0)
            elif hi == lo:
                pack = Fraction(1)
            else:
                pack = (min(max(self.dra_pack_part(g), lo), hi) - lo) / (hi - lo)
        return model, memory, q, pack

    def _combine(self, model: Fraction, memory: Fraction | None, queue: Fraction, pack: Fraction | None) -> int:
        """``floor(1000 * base)`` of the weighted parts (module docstring)."""
        wm, wmem, wq = self.weights
        num = wm * model + wq * queue
        den = wm + wq
        if memory is not None:
            num, den = num + wmem * memory, den + wmem
        if pack is not None:
            num, den = num + self.packing_weight * pack, den + self.packing_weight
        base = MAX_NODE_SCORE * num / den if den else Fraction(0)
        return int(base * _B_SCALE)

    def _dra_raw(self, ps: PreScoreState, ni: NodeInfo) -> int:
        """``b * 1000`` for a DRA Pod (``t`` = 0: NVLink groups are the claim's ``matchAttribute``);
        0 on a node where the Pod gets no GPU device."""
        g = (ps.dra or {}).get(ni.name)
        if g is None or not g.products:
            return 0
        return self._combine(*self.dra_parts(ps, g, self._queue(ni))) * _B_SCALE

    # -- Score ------------------------------------------------------------------------------------
    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """The raw score ``b * 1000 + t`` (module docstring)."""
        ps = state.data.get(PRE_SCORE_KEY)
        if not isinstance(ps, PreScoreState):
            return 0, Status(Code.ERROR, [f"reading {PRE_SCORE_KEY!r} from cycleState: not found"], NAME)
        if ps.dra is not None:
            return self._dra_raw(ps, node_info), Status.success()
        return self._raw(ps, derive_state(node_info, self.keys)), Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (the runtime's batch form)."""
        ps = state.data.get(PRE_SCORE_KEY)
        if not isinstance(ps, PreScoreState):
            return [], Status(Code.ERROR, [f"reading {PRE_SCORE_KEY!r} from cycleState: not found"], NAME)
        if ps.dra is not None:
            return [self._dra_raw(ps, ni) for ni in nodes], Status.success()
        keys = self.keys
        raw = self._raw
        states = ps.states
        out: list[int] = []
        for ni in nodes:
            hit = states.get(ni.name)
            out.append(raw(ps, hit[1] if hit is not None and hit[0] == ni.generation else derive_state(ni, keys)))
        return out, Status.success()

    def _raw(self, ps: PreScoreState, st: NodeGPUState) -> int:
        """``b * 1000 + t`` of one node (0 for malformed GPU metadata); ``t`` memoized in
        ``st.derived`` per (count, NVLink) (a pure function of the node state and those)."""
        if st.spec.error is not None:
            return 0
        b = self.base_milli(ps, st)
        req = ps.request
        key = (NAME, req.count, req.nvlink)
        t: int | None = st.derived.get(key)
        if t is None:
            indices = pick(st, req.count, req.nvlink)
            t = st.derived[key] = 0 if indices is None else min(largest_intact_group(st, indices), _T_LIMIT)
        return b * _B_SCALE + t

    @staticmethod
    def model_part(req: GPURequest, st: NodeGPUState) -> Fraction:
        """The model preference part in [0, 1] (module docstring)."""
        if not req.models:
            return Fraction(1)
        k = len(req.models)
        i = next((j for j, m in enumerate(req.models) if model_matches(m, st.spec.product)), k)
        return Fraction(k - i, k)

    def pack_part(self, req: GPURequest, st: NodeGPUState) -> Fraction:
        """The node's packing fraction before normalization (``binpack``: share of its GPU units in
        use once the Pod is placed; ``spread``: 1 minus that); memoized in ``st.derived`` per
        (count, spread), a pure function of the node state and those."""
        spread = self.packing == "spread"
        key = (_PACK_KEY, req.count, spread)
        f: Fraction | None = st.derived.get(key)
        if f is None:
            f = st.derived[key] = pack_fraction(st, req.count, spread=spread)
        return f

    def parts(self, ps: PreScoreState, st: NodeGPUState) -> tuple[Fraction, Fraction | None, Fraction, Fraction | None]:
        """(model, memory, queue, packing) fractions in [0, 1] for one node (module docstring); memory
        is None (the term is left out) when the node's memory is unknown and the Pod asks none;
        packing is None when the packing term is off for this Pod."""
        req, spec = ps.request, st.spec
        model = self.model_part(req, st)
        memory: Fraction | None = Fraction(0)
        if spec.memory_bytes:
            per_gpu_used = Fraction(spec.used_memory_bytes, spec.total) if spec.total else Fraction(0)
            head = (spec.memory_bytes - per_gpu_used - req.memory_bytes) / spec.memory_bytes
            memory = min(max(head, Fraction(0)), Fraction(1))
        elif req.memory_bytes == 0:
            memory = None
        queue = Fraction(1) if ps.max_queue == 0 else 1 - Fraction(min(spec.queue, ps.max_queue), ps.max_queue)
        pack: Fraction | None = None
        if ps.pack_range is not None:
            lo, hi = ps.pack_range
            if model != ps.best_model:
                pack = Fraction(0)
            elif hi == lo:
                pack = Fraction(1)
            else:
                pack = (min(max(self.pack_part(req, st), lo), hi) - lo) / (hi - lo)
        return model, memory, queue, pack

    def base_milli(self, ps: PreScoreState, st: NodeGPUState) -> int:
        """``floor(1000 * base)`` in [0, 100000] (memoized in ``ps`` per node description: it depends
        on nothing else of the node)."""
        spec = st.spec
        key = (spec.product, spec.memory_bytes, spec.used_memory_bytes, spec.total, spec.queue, len(st.free))
        memo = ps.base_memo.get(key)
        if memo is not None:
            return memo
        result = self._combine(*self.parts(ps, st))
        ps.base_memo[key] = result
        return result

    # -- NormalizeScore -----------------------------------------------------------------------------
    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        """Map raw scores to [0, 100]: ``floor(99 * b / 100000)`` plus 1 for the best ``t`` among
        nodes with equal ``b``."""
        top = MAX_NODE_SCORE * _B_SCALE
        split = {node: (min(max(raw // _B_SCALE, 0), top), raw % _B_SCALE) for node, raw in scores.items()}
        best: dict[int, int] = {}
        for b, t in split.values():
            best[b] = max(best.get(b, 0), t)
        for node, (b, t) in split.items():
            scores[node] = (MAX_NODE_SCORE - 1) * b // top + (1 if t == best[b] else 0)
        return Status.success()
