"""Args validation and request lookup shared by GPUFilter and GPUScore.

Follows the pattern of upstream's ``pkg/scheduler/apis/config/validation/validation_pluginargs.go``
(args are validated when the profile is built; the error names the field).
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.signers import SignResult, cannot_sign
from py_scheduler.framework.types import CycleState, PodInfo, Status
from py_scheduler.plugins.gpu.model import (
    DEFAULT_PREFIX,
    DEFAULT_RESOURCE,
    GPUKeys,
    GPUParseError,
    GPURequest,
    parse_request,
)
from py_scheduler.plugins.gpu.model import validate_prefix as _validate_prefix

PRE_FILTER_KEY = "PreFilterGPUFilter"
"""CycleState key of the Pod's parsed :class:`GPURequest` (written by GPUFilter's PreFilter)."""

_IGNORED_ARGS = frozenset({"apiVersion", "kind"})


def check_args(args: dict[str, Any], allowed: set[str]) -> None:
    """Reject unknown arg names.

    Raises:
        ConfigError: naming the unknown field.
    """
    if not isinstance(args, dict):
        raise ConfigError(f"args: must be a map, got {type(args).__name__}")
    for k in args:
        if k not in allowed and k not in _IGNORED_ARGS:
            raise ConfigError(f"{k}: unknown field (allowed: {', '.join(sorted(allowed))})")


def keys_from_args(args: dict[str, Any]) -> GPUKeys:
    """``prefix`` (default ``gpu-scheduler/``) and ``resourceName`` (default ``nvidia.com/gpu``).

    Raises:
        ConfigError: naming ``prefix`` or ``resourceName``.
    """
    prefix = args.get("prefix", DEFAULT_PREFIX)
    err = _validate_prefix(prefix)
    if err is not None:
        raise ConfigError(f"prefix: {err}")
    rn = args.get("resourceName", DEFAULT_RESOURCE)
    if not isinstance(rn, str) or "/" not in rn or not rn.split("/", 1)[1] or rn.startswith("kubernetes.io/"):
        raise ConfigError(f"resourceName: must be an extended resource name like {DEFAULT_RESOURCE!r}, got {rn!r}")
    key = (str(prefix), rn)
    keys = _INTERNED.get(key)
    if keys is None:
        keys = _INTERNED[key] = GPUKeys(*key)
    return keys


_INTERNED: dict[tuple[str, str], GPUKeys] = {}
"""One :class:`GPUKeys` per (prefix, resourceName): GPUFilter's and GPUScore's keys are then the
same object, so the derived-state memo (``accounting.derive_state``, keyed by them) compares them by
identity, not field by field. A handful of entries (one per distinct plugin configuration)."""


def request_for(state: CycleState, pod: PodInfo, keys: GPUKeys) -> GPURequest:
    """The request GPUFilter's PreFilter stored, or a fresh (memoized) parse.

    Raises:
        GPUParseError: the Pod's GPU annotations are malformed.
    """
    req = state.data.get(PRE_FILTER_KEY)
    if isinstance(req, GPURequest):
        return req
    return parse_request(pod, keys)


GPU_REQUEST_SIGNER_NAME = "py-scheduler.GPURequest"
"""Signature fragment of GPUFilter / GPUScore (no upstream counterpart)."""


def gpu_sign_pod(pod: PodInfo, keys: GPUKeys) -> SignResult:
    """GPUFilter's and GPUScore's ``sign_pod``: the parsed :class:`GPURequest` (GPU count from the
    ``nvidia.com/gpu`` resource or ``gpu-count`` annotation, acceptable models, minimum memory per GPU
    in bytes, NVLink requirement, MIG profile and instance count, the largest one container's count, the
    whole-GPU opt-out) plus the raw values of every GPU
    annotation the plugins read (so Pods that differ in any of them never share a signature). A
    malformed GPU annotation or limit refuses the signature (the Pod is rejected by PreFilter anyway)."""
    try:
        req = parse_request(pod, keys)
    except GPUParseError:
        return cannot_sign("pods with malformed GPU annotations are not signable")
    ann = (pod.pod.get("metadata") or {}).get("annotations") or {}
    raw = [ann.get(k) for k in keys.pod_annotation_keys()] if isinstance(ann, dict) else []
    value = [req.count, [repr(m) for m in req.models], req.memory_bytes, req.nvlink, req.mig_profile, req.mig_count,
             req.per_container, req.whole_gpu, raw]
    return [(GPU_REQUEST_SIGNER_NAME, value)], Status.success()
