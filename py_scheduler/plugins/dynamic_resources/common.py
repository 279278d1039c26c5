"""What the structured allocator's files share: device IDs, the allocator's errors, claim references
(upstream: ``k8s.io/dynamic-resource-allocation/structured/internal``: ``DeviceID``, the errors of
``allocator_incubating.go``, ``klog.KObj``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("py_scheduler.plugins.dynamic_resources")

DeviceID = tuple[str, str, str]

ALLOCATION_RESULTS_MAX_SIZE = 32
"""``resourceapi.AllocationResultsMaxSize``: devices one claim may get."""

MODE_EXACT_COUNT = "ExactCount"
MODE_ALL = "All"


class AllocationError(Exception):
    """Something wrong with a claim or class (upstream returns the error: the Filter fails with
    Error and the Pod is retried). ``str()`` is upstream's message."""


class FailedAllocationOnNode(Exception):
    """``ErrFailedAllocationOnNode``: not fatal, the node is rejected with ``str()`` as reason."""


class AllocationTimeout(Exception):
    """The Filter timeout (``filterTimeout``) expired during the search."""


def claim_ref(claim: Mapping[str, Any]) -> str:
    """``klog.KObj(claim)``: ``namespace/name``."""
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
