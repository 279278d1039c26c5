"""GPU request and node description parsing, and the GPU model matching rule.

Not an upstream plugin: py-scheduler's own extension (issue 6). It follows the conventions of
upstream's plugins (``pkg/scheduler/framework/plugins/noderesources/fit.go`` for how an extended
resource's request is read and how reasons are worded) and reads the labels NVIDIA GPU Feature
Discovery publishes (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` in MiB,
``nvidia.com/gpu.count``).

Units: GPU counts are integers; memory sizes are integer **bytes** internally. ``*-gb`` annotations
and labels are decimal gigabytes (1 GB = 10^9 bytes, fractions allowed, as in card names like
"40GB"); ``nvidia.com/gpu.memory`` is MiB (2^20 bytes), as GFD reports it.

Pod inputs (``<prefix>`` is ``gpu-scheduler/`` unless configured):
    - GPU count: the ``nvidia.com/gpu`` extended resource (requests; a container with only a
      limit uses the limit, as the API server's defaulting does; the same for ``nvidia.com/mig-*``), or the annotation
      ``<prefix>gpu-count`` when the Pod asks for no extended resource. When both are set they
      must agree.
    - ``<prefix>gpu-model``: one model (``A100``) or a comma-separated preference list
      (``H100,A100``).
    - ``<prefix>gpu-memory-gb``: minimum memory per GPU.
    - ``<prefix>nvlink-required``: ``"true"`` / ``"false"``.
    - ``<prefix>gpu-indices``: the GPU indices the scheduler picked (written by Reserve).
    - ``<prefix>mig-profile``: the Pod's ``nvidia.com/gpu`` units must be MIG slices of this
      profile (``1g.10gb``; MIG "single" strategy, GKE partitions). A request (or limit) of
      ``nvidia.com/mig-<profile>`` (MIG "mixed" strategy) names the profile too.
    - ``<prefix>whole-gpu: "true"``: the Pod refuses MIG slices (without it a plain
      ``nvidia.com/gpu`` unit may be a slice, as the kubelet grants it on a MIG single node).

Node inputs: :mod:`py_scheduler.plugins.gpu.inventory` (allocatable first, then GPU Feature
Discovery, GKE / EKS / AKS and py-scheduler's own labels); NVLink groups from the annotation
``<prefix>nvlink-groups`` (else label ``<prefix>max-nvlink-group-size``), and the scoring metrics
``<prefix>used-memory-gb`` and ``<prefix>current-queue`` (annotations).

Model matching (:func:`model_matches`): both strings are lower-cased and split into tokens on
``-``, ``_`` and whitespace. Tokens of the form ``<digits>gb`` are memory tokens. A requested model
matches a product when (1) its non-memory tokens appear in the product's non-memory tokens as a
contiguous run, in order, compared whole-token (``A10`` never matches ``A100``), and (2) if the
request has a memory token, the product's first memory token is exactly equal to it. So ``A100``
matches ``NVIDIA-A100-SXM4-40GB`` and ``NVIDIA-A100-SXM4-80GB``; ``A100-80GB`` matches only the
second; a request with a memory token never matches a product that names no memory size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from py_scheduler.framework import quantity
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.pod_resources import pod_requests
from py_scheduler.framework.types import PodInfo

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_RESOURCE",
    "GB",
    "GFD_COUNT",
    "GFD_MEMORY",
    "GFD_PRODUCT",
    "MAX_GPUS_PER_NODE",
    "MIB",
    "GPUKeys",
    "GPUParseError",
    "GPURequest",
    "ModelSpec",
    "NodeGPUSpec",
    "format_indices",
    "model_matches",
    "parse_groups",
    "parse_indices",
    "parse_model",
    "parse_request",
    "pod_gpu_usage",
    "split_product",
    "tokenize",
    "validate_prefix",
]

DEFAULT_PREFIX = "gpu-scheduler/"
DEFAULT_RESOURCE = "nvidia.com/gpu"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_COUNT = "nvidia.com/gpu.count"
GB = 10**9
"""Bytes in one (decimal) gigabyte, the unit of every ``*-gb`` annotation and label."""
MIB = 2**20
"""Bytes in one MiB, the unit of ``nvidia.com/gpu.memory``."""
MAX_GPUS_PER_NODE = 4096
"""A node advertising more GPUs than this is treated as malformed (protects the index accounting)."""

_PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/\Z")
_TOKEN_SPLIT = re.compile(r"[-_\s]+")
_MEMORY_TOKEN = re.compile(r"^[0-9]+gb\Z")
_MODEL_TOKEN = re.compile(r"^[a-z0-9.]+\Z")
_MIG_PROFILE = re.compile(r"^[0-9]+g\.[0-9]+gb\Z")
_REQUEST_MEMO: PodMemo[tuple[Any, GPURequest | GPUParseError]] = PodMemo(
    "GPU/request", PodInput.ANNOTATIONS | PodInput.SPEC)
"""(fingerprint of the GPU keys and annotation values, the parse or its error)."""


class GPUParseError(PodParseError):
    """A GPU annotation, label or field the scheduler cannot interpret.

    ``kind`` is ``annotation``, ``label`` or ``field``; ``str()`` reads
    ``invalid annotation gpu-scheduler/gpu-memory-gb="abc": not a non-negative number``.
    """

    def __init__(self, kind: str, field: str, value: object, why: str) -> None:
        super().__init__(field, value, why)
        self.kind = kind
        shown = value if isinstance(value, str) else repr(value)
        self.args = (f'invalid {kind} {field}="{shown}": {why}',)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class GPUKeys:
    """The annotation / label names in use (``prefix`` is validated by the plugins' ``create``).

    Attributes:
        prefix: prefix of py-scheduler's own annotations and labels, ending in ``/``.
        resource_name: the extended resource counting whole GPUs.
    """

    prefix: str = DEFAULT_PREFIX
    resource_name: str = DEFAULT_RESOURCE
    _hash: int = field(init=False, repr=False, compare=False, hash=False, default=0)

    def __post_init__(self) -> None:
        # The derived node states are memoized under (keys, node, generation) and looked up several
        # times per node per cycle (plugins/gpu/accounting.py derive_state): hash once, not per lookup.
        object.__setattr__(self, "_hash", hash((self.prefix, self.resource_name)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def gpu_count(self) -> str:
        return self.prefix + "gpu-count"

    @property
    def gpu_model(self) -> str:
        return self.prefix + "gpu-model"

    @property
    def gpu_memory_gb(self) -> str:
        return self.prefix + "gpu-memory-gb"

    @property
    def nvlink_required(self) -> str:
        return self.prefix + "nvlink-required"

    @property
    def mig_profile(self) -> str:
        return self.prefix + "mig-profile"

    @property
    def whole_gpu(self) -> str:
        return self.prefix + "whole-gpu"

    @property
    def fail_requests_greater_than_one(self) -> str:
        """Node label: the NVIDIA device plugin's ``failRequestsGreaterThanOne`` (``"true"`` /
        ``"false"``), which lives in its ConfigMap, not on the node."""
        return self.prefix + "fail-requests-greater-than-one"

    @property
    def mig_resource_prefix(self) -> str:
        """``nvidia.com/mig-``: the MIG "mixed" strategy's per-profile extended resources."""
        return self.resource_name.split("/", 1)[0] + "/mig-"

    @property
    def gpu_indices(self) -> str:
        return self.prefix + "gpu-indices"

    @property
    def nvlink_groups(self) -> str:
        return self.prefix + "nvlink-groups"

    @property
    def max_nvlink_group_size(self) -> str:
        return self.prefix + "max-nvlink-group-size"

    @property
    def used_memory_gb(self) -> str:
        return self.prefix + "used-memory-gb"

    @property
    def current_queue(self) -> str:
        return self.prefix + "current-queue"

    def pod_annotation_keys(self) -> tuple[str, ...]:
        return (self.gpu_count, self.gpu_model, self.gpu_memory_gb, self.nvlink_required, self.gpu_indices,
                self.mig_profile, self.whole_gpu)


def validate_prefix(prefix: object) -> str | None:
    """An error text for a bad ``prefix`` arg (a DNS-subdomain-like name followed by ``/``), else None."""
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix) or len(prefix) > 254:
        return f"must be a lower-case DNS subdomain followed by '/', e.g. {DEFAULT_PREFIX!r}, got {prefix!r}"
    return None


# -- numbers ----------------------------------------------------------------------------------------
def _non_negative_decimal(kind: str, field: str, raw: object) -> Decimal:
    """Parse a plain non-negative decimal number (``"40"``, ``"7.5"``)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise GPUParseError(kind, field, raw, "not a non-negative number")
    try:
        d = Decimal(str(raw).strip())
    except InvalidOperation as exc:
        raise GPUParseError(kind, field, raw, "not a non-negative number") from exc
    if not d.is_finite() or d < 0:
        raise GPUParseError(kind, field, raw, "not a non-negative number")
    return d


def _non_negative_int(kind: str, field: str, raw: object) -> int:
    """Parse a non-negative integer written in decimal digits (``"8"``)."""
    if isinstance(raw, bool):
        raise GPUParseError(kind, field, raw, "not a non-negative integer")
    if isinstance(raw, int):
        if raw < 0:
            raise GPUParseError(kind, field, raw, "not a non-negative integer")
        return raw
    if not isinstance(raw, str) or not raw.strip().isdigit() or not raw.strip().isascii():
        raise GPUParseError(kind, field, raw, "not a non-negative integer")
    return int(raw.strip())


def _gb_to_bytes(d: Decimal) -> int:
    """Decimal GB -> bytes, rounded up."""
    b = d * GB
    i = int(b)
    return i + 1 if b > i else i


# -- model matching -----------------------------------------------------------------------------------
def tokenize(s: str) -> list[str]:
    """Lower-case ``s`` and split it on ``-``, ``_`` and whitespace, dropping empty tokens."""
    return [t for t in _TOKEN_SPLIT.split(s.strip().lower()) if t]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One requested GPU model: its non-memory tokens and optional memory token (``80gb``)."""

    raw: str
    tokens: tuple[str, ...]
    memory_token: str | None


def parse_model(raw: str, field: str = "gpu-model", kind: str = "annotation") -> ModelSpec:
    """Parse one model name (``A100-80GB``).

    Raises:
        GPUParseError: empty, a token with characters other than letters, digits and ``.``, or more
            than one memory token.
    """
    toks = tokenize(raw)
    if not toks:
        raise GPUParseError(kind, field, raw, "empty GPU model name")
    names: list[str] = []
    mem: str | None = None
    for t in toks:
        if not _MODEL_TOKEN.match(t):
            raise GPUParseError(kind, field, raw, f"invalid token {t!r} in GPU model name")
        if _MEMORY_TOKEN.match(t):
            if mem is not None:
                raise GPUParseError(kind, field, raw, "more than one memory size in GPU model name")
            mem = t
        else:
            names.append(t)
    return ModelSpec(raw.strip(), tuple(names), mem)


def _contains_run(hay: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    if not needle:
        return True
    n = len(needle)
    return any(hay[i:i + n] == needle for i in range(len(hay) - n + 1))


def split_product(product: str) -> tuple[tuple[str, ...], str | None]:
    """A product name's (non-memory tokens, first memory token or None)."""
    names: list[str] = []
    mem: str | None = None
    for t in tokenize(product):
        if _MEMORY_TOKEN.match(t):
            if mem is None:
                mem = t
        else:
            names.append(t)
    return tuple(names), mem


def model_matches(spec: ModelSpec, product: str) -> bool:
    """The model matching rule of the module docstring (``A100`` ~ ``NVIDIA-A100-SXM4-40GB``;
    ``A100-80GB`` !~ ``NVIDIA-A100-SXM4-40GB``). An empty product never matches."""
    if not product:
        return False
    names, mem = split_product(product)
    if spec.memory_token is not None and spec.memory_token != mem:
        return False
    return _contains_run(names, spec.tokens)


# -- indices ---------------------------------------------------------------------------------------
def _parse_index_list(kind: str, field: str, raw: str, text: str, seen: set[int], duplicate: str) -> list[int]:
    """``"0,1,4-7"`` -> [0, 1, 4, 5, 6, 7] (ranges inclusive). Each index joins ``seen``; one already
    there raises ``duplicate`` (``{i}``: the index) at once, so the work is bounded by the
    :data:`MAX_GPUS_PER_NODE` distinct indices whatever the annotation's length (a 256 KiB value of
    overlapping ranges once took gigabytes)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise GPUParseError(kind, field, raw, "empty GPU index")
        lo_s, sep, hi_s = part.partition("-")
        lo_s, hi_s = lo_s.strip(), hi_s.strip()
        if not lo_s.isdigit() or not lo_s.isascii() or (sep and (not hi_s.isdigit() or not hi_s.isascii())):
            raise GPUParseError(kind, field, raw, f"{part!r} is not a GPU index or range a-b")
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
        if hi < lo:
            raise GPUParseError(kind, field, raw, f"range {part!r} is reversed")
        if hi >= MAX_GPUS_PER_NODE:
            raise GPUParseError(kind, field, raw, f"GPU index {hi} is out of range")
        for i in range(lo, hi + 1):
            if i in seen:
                raise GPUParseError(kind, field, raw, duplicate.format(i=i))
            seen.add(i)
            out.append(i)
    return out


def parse_indices(raw: object, field: str) -> tuple[int, ...]:
    """Parse a ``gpu-indices`` annotation (``"0,1"``; ranges ``a-b`` allowed) into sorted distinct ints.

    Raises:
        GPUParseError: not a string, a bad index, or a duplicate.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise GPUParseError("annotation", field, raw, "not a comma-separated list of GPU indices")
    return tuple(sorted(_parse_index_list("annotation", field, raw, raw, set(), "duplicate GPU index")))


def format_indices(indices: tuple[int, ...] | list[int]) -> str:
    """``(0, 1)`` -> ``"0,1"`` (the ``gpu-indices`` annotation value)."""
    return ",".join(str(i) for i in sorted(indices))


def parse_groups(raw: object, field: str) -> list[list[int]]:
    """Parse the ``nvlink-groups`` node annotation: groups separated by ``;``, each a comma-separated
    list of GPU indices or inclusive ranges ``a-b``: ``"0-3;4-7"`` == ``"0,1,2,3;4,5,6,7"``.

    Raises:
        GPUParseError: bad syntax, or an index in two groups.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise GPUParseError("annotation", field, raw, "not a ';'-separated list of GPU index groups")
    groups: list[list[int]] = []
    seen: set[int] = set()
    for text in raw.split(";"):
        if not text.strip():
            raise GPUParseError("annotation", field, raw, "empty NVLink group")
        g = _parse_index_list("annotation", field, raw, text, seen, "GPU index {i} is in more than one group")
        groups.append(sorted(g))
    return groups


# -- the Pod's request ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GPURequest:
    """What a Pod asks for.

    Attributes:
        count: whole GPUs (0: the Pod asks for none; GPU plugins Skip it).
        models: acceptable models in preference order (empty: any model).
        memory_bytes: minimum memory per GPU in bytes (0: no requirement).
        nvlink: all GPUs must lie in one NVLink group.
        mig_profile: a MIG profile (``1g.10gb``): with ``mig_count`` > 0 the Pod asks that many
            ``nvidia.com/mig-<profile>`` (MIG "mixed" strategy); else (the ``mig-profile``
            annotation) each of its ``count`` ``nvidia.com/gpu`` units may be a slice of that
            profile (MIG "single" strategy, GKE partitions). None: whole GPUs only.
        mig_count: ``nvidia.com/mig-<mig_profile>`` instances asked.
        per_container: the largest ``nvidia.com/gpu`` count one container (or init container) asks
            (the unit a device plugin's ``Allocate`` and GKE's sharing check see; the ``gpu-count``
            annotation counts as one container).
        whole_gpu: the ``whole-gpu: "true"`` annotation: the Pod refuses MIG slices (a plain
            ``nvidia.com/gpu`` request is otherwise served by a slice on MIG single / GKE partition
            nodes, as the kubelet grants it there).
    """

    count: int
    models: tuple[ModelSpec, ...] = ()
    memory_bytes: int = 0
    nvlink: bool = False
    mig_profile: str | None = None
    mig_count: int = 0
    per_container: int = 0
    whole_gpu: bool = False

    @property
    def wants_gpu(self) -> bool:
        """The Pod asks for GPU units or MIG instances (else the GPU plugins Skip it)."""
        return self.count > 0 or self.mig_count > 0


def _dict(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def _gpu_requests(pod: PodInfo, keys: GPUKeys) -> tuple[dict[str, int], int]:
    """(the Pod's requests of ``<domain>/*`` extended resources, the largest ``<resource>`` request
    of one container or init container).

    A container that states only a limit of such a resource asks the limit, as the API server's
    defaulting copies limits into missing requests (``pkg/apis/core/v1/defaults.go``,
    ``SetDefaults_Pod``); so ``limits: {nvidia.com/mig-3g.20gb: 1}`` names a MIG profile as a
    request would. Pod totals combine containers as upstream's ``PodRequests``.

    Raises:
        GPUParseError: a malformed limit quantity.
    """
    spec = pod.spec
    rn = keys.resource_name
    domain = rn.split("/", 1)[0] + "/"
    per_container = 0
    limits_only = False
    for ckey in ("containers", "initContainers"):
        for i, c in enumerate(_list(spec.get(ckey))):
            res = _dict(c.get("resources")) if isinstance(c, dict) else {}
            req, lim = _dict(res.get("requests")), _dict(res.get("limits"))
            if any(r.startswith(domain) and r not in req for r in lim):
                limits_only = True
            raw = req.get(rn, lim.get(rn))
            if raw is not None:
                try:
                    per_container = max(per_container, quantity.value(quantity.parse(raw)))
                except quantity.QuantityError as exc:
                    where = "requests" if rn in req else "limits"
                    raise GPUParseError("field", f"spec.{ckey}[{i}].resources.{where}.{rn}", raw,
                                        "not a valid quantity") from exc
    if not limits_only:
        return {r: n for r, n in pod.requests.scalar.items() if r.startswith(domain)}, per_container
    new_spec: dict[str, Any] = dict(spec)
    for ckey in ("containers", "initContainers"):
        conts = []
        for c in _list(spec.get(ckey)):
            if not isinstance(c, dict):
                conts.append(c)
                continue
            res = dict(_dict(c.get("resources")))
            req = dict(_dict(res.get("requests")))
            for r, v in _dict(res.get("limits")).items():
                if r.startswith(domain):
                    req.setdefault(r, v)
            res["requests"] = req
            conts.append(dict(c, resources=res))
        if ckey in spec:
            new_spec[ckey] = conts
    try:
        reqs = pod_requests(dict(pod.pod, spec=new_spec))
    except PodParseError as exc:
        raise GPUParseError("field", exc.field, exc.value, "not a valid quantity") from exc
    return ({r: quantity.value(q) for r, q in reqs.items() if r.startswith(domain)}, per_container)


def _annotations(pod: PodInfo) -> dict[str, Any]:
    ann = (pod.pod.get("metadata") or {}).get("annotations") or {}
    return ann if isinstance(ann, dict) else {}


def parse_request(pod: PodInfo, keys: GPUKeys) -> GPURequest:
    """The Pod's :class:`GPURequest`, memoized on the PodInfo (re-parsed if its annotations or the GPU keys change).

    Raises:
        GPUParseError: a malformed annotation (``gpu-count``, ``gpu-model``, ``gpu-memory-gb``,
            ``nvlink-required``) or GPU limit, or a ``gpu-count`` disagreeing with the resource.
    """
    ann = _annotations(pod)
    fingerprint = (keys, tuple(ann.get(k) for k in keys.pod_annotation_keys()))
    memo = _REQUEST_MEMO.peek(pod)
    if memo is not None and memo[0] == fingerprint:
        cached = memo[1]
        if isinstance(cached, GPUParseError):
            raise cached
        assert isinstance(cached, GPURequest)
        return cached
    try:
        result: GPURequest | GPUParseError = _parse_request(pod, keys, ann)
    except GPUParseError as exc:
        result = exc
    _REQUEST_MEMO.put(pod, (fingerprint, result))
    if isinstance(result, GPUParseError):
        raise result
    return result


def _parse_request(pod: PodInfo, keys: GPUKeys, ann: dict[str, Any]) -> GPURequest:
    asked_res, per_container = _gpu_requests(pod, keys)
    count = asked_res.get(keys.resource_name, 0)
    if keys.gpu_count in ann:
        n = _non_negative_int("annotation", keys.gpu_count, ann[keys.gpu_count])
        if count and n != count:
            raise GPUParseError("annotation", keys.gpu_count, ann[keys.gpu_count],
                                f"does not equal the {keys.resource_name} request {count}")
        count = n
    models: tuple[ModelSpec, ...] = ()
    raw_model = ann.get(keys.gpu_model)
    if raw_model is not None:
        if not isinstance(raw_model, str):
            raise GPUParseError("annotation", keys.gpu_model, raw_model, "not a string")
        if raw_model.strip():
            specs: list[ModelSpec] = []
            for m in raw_model.split(","):
                if not m.strip():
                    raise GPUParseError("annotation", keys.gpu_model, raw_model, "empty GPU model name in list")
                specs.append(parse_model(m, keys.gpu_model))
            models = tuple(specs)
    mem = 0
    if keys.gpu_memory_gb in ann:
        mem = _gb_to_bytes(_non_negative_decimal("annotation", keys.gpu_memory_gb, ann[keys.gpu_memory_gb]))
    nvlink = False
    if keys.nvlink_required in ann:
        raw = ann[keys.nvlink_required]
        v = raw.strip().lower() if isinstance(raw, str) else raw
        if v in ("true", True):
            nvlink = True
        elif v not in ("false", False, ""):
            raise GPUParseError("annotation", keys.nvlink_required, raw, 'not "true" or "false"')
    mig_profile: str | None = None
    mig_count = 0
    prefix = keys.mig_resource_prefix
    asked = sorted((r[len(prefix):].lower(), n) for r, n in asked_res.items() if r.startswith(prefix) and n > 0)
    if len(asked) > 1:
        raise GPUParseError("field", "spec.containers[*].resources.requests", ",".join(prefix + a for a, _ in asked),
                            "more than one MIG profile in one Pod is not supported")
    if asked:
        mig_profile, mig_count = asked[0]
    if keys.mig_profile in ann:
        raw_p = ann[keys.mig_profile]
        if not isinstance(raw_p, str) or not _MIG_PROFILE.match(raw_p.strip().lower()):
            raise GPUParseError("annotation", keys.mig_profile, raw_p, 'not a MIG profile like "1g.10gb"')
        if mig_profile is not None and mig_profile != raw_p.strip().lower():
            raise GPUParseError("annotation", keys.mig_profile, raw_p,
                                f"does not equal the requested resource {prefix}{mig_profile}")
        mig_profile = raw_p.strip().lower()
    whole = False
    if keys.whole_gpu in ann:
        raw_w = ann[keys.whole_gpu]
        w = raw_w.strip().lower() if isinstance(raw_w, str) else raw_w
        if w in ("true", True):
            whole = True
        elif w not in ("false", False, ""):
            raise GPUParseError("annotation", keys.whole_gpu, raw_w, 'not "true" or "false"')
        if whole and mig_profile is not None:
            raise GPUParseError("annotation", keys.whole_gpu, raw_w, f"contradicts the MIG profile {mig_profile}")
    if keys.gpu_count in ann and not asked_res.get(keys.resource_name):
        per_container = count  # the annotation asks for the Pod as a whole
    return GPURequest(count, models, mem, nvlink, mig_profile, mig_count, per_container, whole)


def pod_gpu_usage(pod: PodInfo, keys: GPUKeys) -> tuple[int, tuple[int, ...] | None]:
    """(GPUs held, recorded indices or None) of a bound or assumed Pod.

    Never raises: a malformed annotation on a bound Pod falls back to the extended resource count
    (or 0) and to "no recorded indices", so the Pod's GPUs are still counted.
    """
    try:
        count = parse_request(pod, keys).count
    except GPUParseError:
        count = pod.requests.scalar.get(keys.resource_name, 0)
    if count <= 0:
        return 0, None
    raw = _annotations(pod).get(keys.gpu_indices)
    if raw is None:
        return count, None
    try:
        return count, parse_indices(raw, keys.gpu_indices)
    except GPUParseError:
        return count, None


# -- the node ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodeGPUSpec:
    """A node's GPUs as its labels, annotations and allocatable describe them.

    Attributes:
        total: GPUs the node offers (allocatable ``nvidia.com/gpu``; else ``nvidia.com/gpu.count``).
        product: product / model name (``NVIDIA-A100-SXM4-40GB``), ``""`` when unknown.
        memory_bytes: memory per GPU in bytes, None when unknown.
        groups: NVLink groups, a partition of ``range(total)`` (singletons when no NVLink is known).
        used_memory_bytes: GPU memory in use on the node, summed over its GPUs (scoring metric).
        queue: inference requests waiting on the node (scoring metric).
        error: the Filter reason when a label / annotation is malformed, else None.
        memory_error: the reason when a memory label is malformed (memory is then unknown; only
            Pods asking for memory fail on it), else None.
        inventory: what the units are (:class:`~py_scheduler.plugins.gpu.inventory.GPUInventory`:
            whole cards, time-sliced replicas or MIG slices; MIG mixed profiles; disagreements).
    """

    total: int = 0
    product: str = ""
    memory_bytes: int | None = None
    groups: tuple[tuple[int, ...], ...] = ()
    used_memory_bytes: int = 0
    queue: int = 0
    error: str | None = None
    memory_error: str | None = None
    inventory: Any = None
