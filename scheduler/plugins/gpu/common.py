"""Args validation and request lookup shared by GPUFilter and GPUScore.

Follows the pattern of upstream's ``pkg/scheduler/apis/config/validation/validation_pluginargs.go``
(args are validated when the profile is built; the error names the field).
"""

from __future__ import annotations

from typing import Any

from scheduler.framework.config import ConfigError
from scheduler.framework.types import CycleState, PodInfo
from scheduler.plugins.gpu.model import DEFAULT_PREFIX, DEFAULT_RESOURCE, GPUKeys, GPURequest, parse_request
from scheduler.plugins.gpu.model import validate_prefix as _validate_prefix

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
    return GPUKeys(str(prefix), rn)


def request_for(state: CycleState, pod: PodInfo, keys: GPUKeys) -> GPURequest:
    """The request GPUFilter's PreFilter stored, or a fresh (memoized) parse.

    Raises:
        GPUParseError: the Pod's GPU annotations are malformed.
    """
    req = state.data.get(PRE_FILTER_KEY)
    if isinstance(req, GPURequest):
        return req
    return parse_request(pod, keys)
