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
- ``memory`` = ``clamp((M - U/N - R) / M, 0, 1)``: per-GPU headroom, with ``M`` the node's memory
  per GPU, ``U`` the node annotation ``used-memory-gb`` (all GPUs together, 0 when absent), ``N``
  the node's GPU count, ``R`` the Pod's ``gpu-memory-gb`` (0 when absent); 0 when ``M`` is unknown.
- ``queue`` = 1 when the largest ``current-queue`` among the scored nodes ``Qmax`` is 0, else
  ``1 - q / Qmax`` with ``q`` the node's annotation (0 when absent).
- ``base`` = ``100 * (wm*model + wmem*memory + wq*queue) / W`` in [0, 100], computed exactly and
  kept to 1/1000 (``b = floor(1000 * base)``).
- ``t`` = size of the node's largest NVLink group still entirely free after the Pod takes the
  indices :func:`~py_scheduler.plugins.gpu.accounting.pick` chooses (0 when none is left).

Score returns ``b * 1000 + min(t, 999)``. NormalizeScore sets each node to
``floor(99 * b / 100000) + (1 if t is the largest t among the nodes with the same b else 0)``:
the three parts decide, and among otherwise equal nodes the placement that keeps the largest free
NVLink group intact wins by one point. A node with malformed GPU metadata scores 0.

Args: ``prefix``, ``resourceName`` (as GPUFilter), ``modelWeight``, ``memoryWeight``,
``queueWeight`` (non-negative integers, not all 0).
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
from py_scheduler.plugins.gpu.accounting import NodeGPUState, derive_state, largest_intact_group, pick
from py_scheduler.plugins.gpu.common import check_args, gpu_sign_pod, keys_from_args, request_for
from py_scheduler.plugins.gpu.model import GPUKeys, GPUParseError, GPURequest, model_matches

NAME = "GPUScore"
PRE_SCORE_KEY = "PreScoreGPUScore"
DEFAULT_WEIGHTS = (40, 35, 25)
"""(model, memory headroom, queue length) weights."""
_T_LIMIT = 999
_B_SCALE = 1000

__all__ = ["DEFAULT_WEIGHTS", "NAME", "PRE_SCORE_KEY", "GPUScore", "PreScoreState"]


@dataclass(frozen=True, slots=True)
class PreScoreState:
    """What all nodes share in one cycle: the request and the largest queue among scored nodes."""

    request: GPURequest
    max_queue: int
    base_memo: dict[tuple[str, int | None, int, int, int], int] = field(default_factory=dict, compare=False)
    """``base_milli`` per node description (product, memory, used memory, GPUs, queue): nodes that
    describe their GPUs alike share one exact computation per cycle."""


class GPUScore:
    """PreScore / Score / NormalizeScore (the module docstring gives the formula)."""

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (py-scheduler's own: no upstream counterpart): as GPUFilter's. ``snapshot`` is unused by
        most plugins."""
        return gpu_sign_pod(pod, self.keys)


    def __init__(self, keys: GPUKeys | None = None, weights: tuple[int, int, int] = DEFAULT_WEIGHTS) -> None:
        self.keys = keys or GPUKeys()
        self.weights = weights

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> GPUScore:
        """Build from pluginConfig args ``{prefix, resourceName, modelWeight, memoryWeight, queueWeight}``.

        Raises:
            ConfigError: an unknown field or a bad value, naming the field.
        """
        args = args or {}
        check_args(args, {"prefix", "resourceName", "modelWeight", "memoryWeight", "queueWeight"})
        keys = keys_from_args(args)
        ws: list[int] = []
        for fld, default in zip(("modelWeight", "memoryWeight", "queueWeight"), DEFAULT_WEIGHTS, strict=True):
            v = args.get(fld, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 1000:
                raise ConfigError(f"{fld}: must be an integer in [0, 1000], got {v!r}")
            ws.append(v)
        if sum(ws) == 0:
            raise ConfigError("modelWeight, memoryWeight, queueWeight: must not all be 0")
        return cls(keys, (ws[0], ws[1], ws[2]))

    # -- PreScore ---------------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """Skip for Pods asking for no GPU (or whose request is malformed: PreFilter rejected them)."""
        try:
            req = request_for(state, pod, self.keys)
        except GPUParseError:
            return Status.skip()
        if req.count <= 0:
            return Status.skip()
        max_q = 0
        for ni in nodes:
            spec = derive_state(ni, self.keys).spec
            if spec.error is None:
                max_q = max(max_q, spec.queue)
        state.write(PRE_SCORE_KEY, PreScoreState(req, max_q))
        return Status.success()

    # -- Score ------------------------------------------------------------------------------------
    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """The raw score ``b * 1000 + t`` (module docstring)."""
        ps = state.data.get(PRE_SCORE_KEY)
        if not isinstance(ps, PreScoreState):
            return 0, Status(Code.ERROR, [f"reading {PRE_SCORE_KEY!r} from cycleState: not found"], NAME)
        return self._raw(ps, derive_state(node_info, self.keys)), Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (the runtime's batch form)."""
        ps = state.data.get(PRE_SCORE_KEY)
        if not isinstance(ps, PreScoreState):
            return [], Status(Code.ERROR, [f"reading {PRE_SCORE_KEY!r} from cycleState: not found"], NAME)
        keys = self.keys
        raw = self._raw
        return [raw(ps, derive_state(ni, keys)) for ni in nodes], Status.success()

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

    def parts(self, ps: PreScoreState, st: NodeGPUState) -> tuple[Fraction, Fraction, Fraction]:
        """(model, memory, queue) fractions in [0, 1] for one node (module docstring)."""
        req, spec = ps.request, st.spec
        if not req.models:
            model = Fraction(1)
        else:
            k = len(req.models)
            i = next((j for j, m in enumerate(req.models) if model_matches(m, spec.product)), k)
            model = Fraction(k - i, k)
        memory = Fraction(0)
        if spec.memory_bytes:
            per_gpu_used = Fraction(spec.used_memory_bytes, spec.total) if spec.total else Fraction(0)
            head = (spec.memory_bytes - per_gpu_used - req.memory_bytes) / spec.memory_bytes
            memory = min(max(head, Fraction(0)), Fraction(1))
        queue = Fraction(1) if ps.max_queue == 0 else 1 - Fraction(min(spec.queue, ps.max_queue), ps.max_queue)
        return model, memory, queue

    def base_milli(self, ps: PreScoreState, st: NodeGPUState) -> int:
        """``floor(1000 * base)`` in [0, 100000] (memoized in ``ps`` per node description: it depends
        on nothing else of the node)."""
        spec = st.spec
        key = (spec.product, spec.memory_bytes, spec.used_memory_bytes, spec.total, spec.queue)
        memo = ps.base_memo.get(key)
        if memo is not None:
            return memo
        model, memory, queue = self.parts(ps, st)
        wm, wmem, wq = self.weights
        base = MAX_NODE_SCORE * (wm * model + wmem * memory + wq * queue) / (wm + wmem + wq)
        result = int(base * _B_SCALE)
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
