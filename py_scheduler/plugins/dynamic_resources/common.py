"""What the structured allocator's files share: device IDs, the allocator's errors, claim references
(upstream: ``k8s.io/dynamic-resource-allocation/structured/internal``: ``DeviceID``, the errors of
``allocator_incubating.go``, ``klog.KObj``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
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


CEL_CYCLE_COST_BUDGET = 200_000
"""CEL cost units (:mod:`py_scheduler.plugins.helpers.cel_cost`) that the selector evaluations of one
scheduling cycle may spend on (expression, device) pairs not already in the selector memo: about one
second of CPU (cel-python evaluates ~190 000 units per second here, ``device`` variable included).
py-scheduler's own, with no upstream counterpart: kube-scheduler filters nodes on 16 goroutines in
cel-go, several times faster, and answers its health checks on other threads, while py-scheduler's cycle
runs on the thread that serves ``/livez``. Ordinary selectors spend 20-100 units per device, so a
cycle evaluates 2 000 to 10 000 new devices within it; a selector of a few thousand units (a
comprehension over a long list) reaches it after ~100."""


FILTER_CYCLE_SECONDS = 2.0
"""Seconds the DynamicResources Filter may run in all in one scheduling cycle, summed over its nodes
(py-scheduler's own, beside upstream's ``filterTimeout``, which bounds one node: kube-scheduler
filters 16 nodes at once and serves its health checks on other threads, so a claim whose device
search takes seconds per node, such as ``distinctAttribute`` over more devices than the attribute
has values, costs it 10 s per attempt on goroutines; in py-scheduler it would block the one thread
for 10 s per node). Past it the Filter fails with Error as upstream's timeout does, so the Pod is
retried after its backoff. An ordinary claim's Filter takes ~35 us per node."""


@dataclass(frozen=True, slots=True)
class CycleBudget:
    """What the DynamicResources Filter may spend in one scheduling cycle (the live scheduler's;
    the offline engine sets none): ``cel_units`` of CEL selector evaluation the memo cannot answer,
    ``seconds`` of Filter time in all."""

    cel_units: int = CEL_CYCLE_COST_BUDGET
    seconds: float = FILTER_CYCLE_SECONDS


class CelCycleBudgetExceeded(AllocationError):
    """The cycle's selector evaluations spent :data:`CEL_CYCLE_COST_BUDGET`: the Filter fails with
    Error, so the Pod gets a FailedScheduling event naming the selector and is retried after its
    backoff. The results evaluated so far stay in the selector memo, so each attempt goes further and
    the Pod is placed once every device it needs has been judged."""


class AllocationTimeout(Exception):
    """The Filter timeout (``filterTimeout``) expired during the search."""


def claim_ref(claim: Mapping[str, Any]) -> str:
    """``klog.KObj(claim)``: ``namespace/name``."""
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
