"""GPUFilter: whole-GPU feasibility with model, memory and NVLink constraints, and index choice.

Not an upstream plugin (py-scheduler's issue 6); its shape and wording follow upstream's
``pkg/scheduler/framework/plugins/noderesources/fit.go`` (PreFilter parses the Pod once into
CycleState, Filter compares it with the NodeInfo, a request larger than the node's whole capacity
is UnschedulableAndUnresolvable) and ``framework/interface.go`` (PreFilter Skip, Reserve).

Extension points:
    PreFilter: parses the Pod's request (:func:`~py_scheduler.plugins.gpu.model.parse_request`);
        Skip when it asks for no GPU; UnschedulableAndUnresolvable naming the annotation and value
        when an annotation is malformed.
    Filter: the checks of :func:`py_scheduler.plugins.gpu.accounting.verdict`, in order, the first
        failing one deciding: malformed node metadata; MIG profile (``nvidia.com/mig-<p>`` asked, or
        MIG slices offered to a Pod that opted out with ``whole-gpu``: ``node(s) had MIG slices, not
        whole GPUs``); count > node's units ``node(s) had insufficient free GPUs``; a container asking
        more shared units than the node grants one container (``node(s) had shared GPUs that grant at
        most 1 per container``); model ``node(s) didn't match the requested GPU model``; memory per unit
        ``node(s) had unknown GPU memory`` / ``node(s) had insufficient GPU memory`` (all
        UnschedulableAndUnresolvable); free units < count -> Unschedulable; NVLink
        ``node(s) had no NVLink group with enough free GPUs``, Unschedulable when some group is large
        enough (preemption may free it), else UnschedulableAndUnresolvable. Node inventories
        (whole cards, time-sliced shares, MIG slices) come from
        :mod:`py_scheduler.plugins.gpu.inventory`.
    Reserve: picks the indices on the chosen node (:func:`~py_scheduler.plugins.gpu.accounting.pick`,
        the same deterministic choice Filter checked) and sets
        ``state.pod_annotations["<prefix>gpu-indices"] = "i,j"``; the binder writes it on the Pod
        before the Binding. Unreserve does nothing: the allocation is derived from the Pods.

Args: ``prefix`` (default ``gpu-scheduler/``), ``resourceName`` (default ``nvidia.com/gpu``).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.events import ClusterEventWithHint
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import PreFilterResult
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.gpu.accounting import (
    ERR_INSUFFICIENT,
    ERR_MEMORY,
    ERR_MIG_PROFILE,
    ERR_MIG_SLICES,
    ERR_MODEL,
    ERR_NVLINK,
    ERR_SHARED,
    ERR_UNKNOWN_MEMORY,
    NodeGPUState,
    derive_state,
    pick,
    verdict,
)
from py_scheduler.plugins.gpu.common import PRE_FILTER_KEY, check_args, gpu_sign_pod, keys_from_args, request_for
from py_scheduler.plugins.gpu.events import gpu_events_to_register
from py_scheduler.plugins.gpu.model import (
    GFD_COUNT,
    GPUKeys,
    GPUParseError,
    GPURequest,
    format_indices,
    parse_request,
)

log = logging.getLogger("py_scheduler.plugins.gpu")

NAME = "GPUFilter"
UNKNOWN_MODEL = "unknown"
"""``model`` of a GPU node whose product is not known (no ``nvidia.com/gpu.product`` label)."""

_SUCCESS = Status.success()

_TOKENS: dict[GPURequest, int] = {}
_TOKENS_MAX = 4096
_next_token = 0


def _token(req: GPURequest) -> int:
    """A small int standing for ``req`` in the per-node verdict memo (``NodeGPUState.derived``), so a
    Filter over many nodes hashes and compares the request once, not once per node (a
    :class:`GPURequest` hashes its model list in Python). Equal requests get the same token while it
    is remembered; a token is never given to another request (the counter only grows; forgetting,
    at :data:`_TOKENS_MAX` requests, only costs the verdicts memoized under the old tokens)."""
    global _next_token
    tok = _TOKENS.get(req)
    if tok is None:
        if len(_TOKENS) >= _TOKENS_MAX:
            _TOKENS.clear()
        _next_token += 1
        tok = _TOKENS[req] = _next_token
    return tok


def _compute_verdict(req: GPURequest, st: NodeGPUState) -> tuple[Code, str] | None:
    """The checks of :func:`py_scheduler.plugins.gpu.accounting.verdict`, in order: the first failing
    one's (code, reason)."""
    return verdict(req, st)


__all__ = ["ERR_INSUFFICIENT", "ERR_MEMORY", "ERR_MIG_PROFILE", "ERR_MIG_SLICES", "ERR_MODEL", "ERR_NVLINK",
           "ERR_SHARED", "ERR_UNKNOWN_MEMORY", "NAME", "GPUFilter", "GPUNodes"]


class GPUNodes:
    """The positions in a snapshot's ``node_info_list`` of the nodes that declare GPUs (resource
    ``resource`` in allocatable or a ``nvidia.com/gpu.count`` label): a snapshot-derived structure
    (:class:`~py_scheduler.framework.lister.NodeDerived`, ``snapshot.derived``), so the GPU gauges read
    the GPU nodes only instead of every node each second (2.6 % of the cycle thread in a drain at 5000
    nodes, 500 of them with GPUs).

    Depends on: a node's allocatable and labels change only through its Node object, and the snapshot
    tells its derived structures of every in-place change (``node_changed``); a replaced node list is
    built anew. Checked against the node-by-node test by
    tests/unit/test_metrics.py::test_gpu_inventory_follows_the_nodes_that_gain_and_lose_gpus.
    """

    __slots__ = ("n", "pos_by_name", "positions", "resource", "source")

    def __init__(self, resource: str, nodes: list[NodeInfo]) -> None:
        self.resource = resource
        self.source = nodes
        self.n = len(nodes)
        self.pos_by_name = {ni.name: i for i, ni in enumerate(nodes)}
        self.positions = {i for i, ni in enumerate(nodes) if self.declares(ni)}

    def declares(self, ni: NodeInfo) -> bool:
        """Whether ``ni`` declares GPUs (without both, ``derive_state`` reports a total of 0)."""
        return self.resource in ni.allocatable.scalar or GFD_COUNT in ni.labels

    def fresh_for(self, nodes: list[NodeInfo]) -> bool:
        """Built for this very list object (same identity and length)."""
        return self.source is nodes and len(nodes) == self.n

    def refresh(self, ni: NodeInfo) -> bool:
        """Re-read ``ni``; False when it is not the node at its name's position."""
        i = self.pos_by_name.get(ni.name)
        if i is None or self.source[i] is not ni:
            return False
        if self.declares(ni):
            self.positions.add(i)
        else:
            self.positions.discard(i)
        return True


class GPUFilter:
    """PreFilter / Filter / Reserve for whole GPUs (module docstring gives the rules and reasons)."""

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (py-scheduler's own: no upstream counterpart): the Pod's GPU request (``nvidia.com/gpu``
        count and the GPU annotations); refuses a Pod whose GPU annotations are malformed. ``snapshot`` is
        unused by most plugins."""
        return gpu_sign_pod(pod, self.keys)


    def __init__(self, keys: GPUKeys | None = None) -> None:
        self.keys = keys or GPUKeys()
        self._gpu_nodes = functools.partial(GPUNodes, self.keys.resource_name)

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> GPUFilter:
        """Build from pluginConfig args ``{prefix, resourceName}``.

        Raises:
            ConfigError: an unknown field or a bad value, naming the field.
        """
        args = args or {}
        check_args(args, {"prefix", "resourceName"})
        return cls(keys_from_args(args))

    def gpu_inventory(self, snapshot: SnapshotLister) -> list[tuple[str, str, int, int]]:
        """``GPUInventoryReporter``: ``(node, model or UNKNOWN_MODEL, allocated, free)`` (devices) per GPU
        node of ``snapshot``, from Filter's own accounting (:func:`derive_state`), so the gauges agree
        with what GPUFilter sees. Nodes with malformed GPU labels are skipped; nodes declaring no GPU
        (no resource, no ``nvidia.com/gpu.count``) are not visited (:class:`GPUNodes`)."""
        k = self.keys
        rows: list[tuple[str, str, int, int]] = []
        nodes = snapshot.node_info_list
        for i in sorted(snapshot.derived(self._gpu_nodes).positions):
            ni = nodes[i]
            st = derive_state(ni, k)
            if st.spec.error is not None or st.spec.total <= 0:
                continue
            free = len(st.free)
            rows.append((ni.name, st.spec.product or UNKNOWN_MODEL, st.spec.total - free, free))
        return rows

    # -- PreFilter --------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """Parse the Pod once; Skip for Pods asking for no GPU."""
        try:
            req = parse_request(pod, self.keys)
        except GPUParseError as exc:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        state.write(PRE_FILTER_KEY, req)
        if not req.wants_gpu:
            return None, Status.skip()
        return None, Status.success()

    # -- Filter -----------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """The checks of the module docstring, in order."""
        try:
            req = request_for(state, pod, self.keys)
        except GPUParseError as exc:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        if not req.wants_gpu:
            return Status.success()
        return self.check(req, node_info)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (the runtime's batch form; None: all pass),
        with the request read once."""
        try:
            req = request_for(state, pod, self.keys)
        except GPUParseError as exc:
            return [Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME) for _ in nodes]
        if not req.wants_gpu:
            return None
        out: list[Status] | None = None
        keys = self.keys
        key = (NAME, _token(req))
        for j, ni in enumerate(nodes):
            verdict = self._verdict(req, derive_state(ni, keys), key)
            if verdict is None:
                continue
            if out is None:
                out = [_SUCCESS] * len(nodes)
            out[j] = Status(verdict[0], [verdict[1]], NAME)
        return out

    def check(self, req: GPURequest, node_info: NodeInfo) -> Status:
        """Filter for an already-parsed request (also used by tooling that explains a placement)."""
        verdict = self._verdict(req, derive_state(node_info, self.keys), (NAME, _token(req)))
        if verdict is None:
            return Status.success()
        return Status(verdict[0], [verdict[1]], NAME)

    @staticmethod
    def _verdict(req: GPURequest, st: NodeGPUState, key: tuple[str, int]) -> tuple[Code, str] | None:
        """The failing (code, reason) of the module docstring's checks, None when the node fits;
        memoized in ``st.derived`` per request (a pure function of both) under ``key``,
        ``(NAME, _token(req))``."""
        derived = st.derived
        if key in derived:
            got: tuple[Code, str] | None = derived[key]
            return got
        verdict = _compute_verdict(req, st)
        derived[key] = verdict
        return verdict

    # -- Reserve ------------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Pick the GPU indices on ``node_name`` and record them in ``state.pod_annotations``.

        Returns Error when the node is not in the cycle's snapshot, Unschedulable when the node has
        no placement any more (the caller then runs Unreserve and retries the Pod).
        """
        try:
            req = request_for(state, pod, self.keys)
        except GPUParseError as exc:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        if req.count <= 0:
            return Status.success()
        snapshot = state.snapshot
        node_info = snapshot.node_info_map.get(node_name) if snapshot is not None else None
        if node_info is None:
            return Status(Code.ERROR, [f"node {node_name!r} not found in the snapshot"], NAME)
        s = self.check(req, node_info)
        if not s.is_success():
            return s
        indices = pick(derive_state(node_info, self.keys), req.count, req.nvlink)
        if indices is None:  # pragma: no cover - check() succeeded, so pick() has a placement
            return Status(Code.UNSCHEDULABLE, [ERR_INSUFFICIENT], NAME)
        state.pod_annotations[self.keys.gpu_indices] = format_indices(indices)
        log.debug("GPU indices reserved pod=%s node=%s indices=%s", pod.key, node_name, indices)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Drop the indices annotation from the cycle; nothing else (the allocation is derived)."""
        state.pod_annotations.pop(self.keys.gpu_indices, None)

    # -- EnqueueExtensions (appended; hints in plugins/gpu/events.py) ---------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: Node add / label / allocatable / annotation updates, assigned Pod
        delete / update and the rejected Pod's own update, each with a hint that Skips only when the
        change certainly cannot make the Pod fit (:mod:`py_scheduler.plugins.gpu.events`)."""
        return gpu_events_to_register(self.keys)
