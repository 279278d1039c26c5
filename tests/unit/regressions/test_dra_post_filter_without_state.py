"""Parity bug: DynamicResources' PostFilter without PreFilter state.

Found by ``bench/parity --seed 1`` (scenario 14 and 14 more of 200): a Pod rejected by an earlier
PreFilter plugin (here VolumeBinding / VolumeRestrictions: a missing PVC) never reaches
DynamicResources' PreFilter, so upstream's PostFilter fails in ``getStateData`` with
``fwk.ErrNotFound``; RunPostFilterPlugins returns that Error, and its message ``not found`` replaces
the preemption message in the FailedScheduling text. py-scheduler returned Unschedulable and kept
``preemption: 0/1 nodes are available: ...``.

Upstream: ``framework/plugins/dynamicresources/dynamicresources.go`` (``PostFilter``,
``getStateData``), ``framework/runtime/framework.go`` (``RunPostFilterPlugins``).
"""

from __future__ import annotations

from tests.unit.regressions._util import node, pod, run

OBJS = [node("n1"), pod("p", volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "missing"}}])]

# Oracle (kube-scheduler v1.37.2 framework) on OBJS:
WANT_MESSAGE = '0/1 nodes are available: persistentvolumeclaim "missing" not found. not found'
WANT_FILTERED = {"n1": ['persistentvolumeclaim "missing" not found']}


def test_message_ends_with_dra_post_filter_error() -> None:
    (res,) = run(OBJS)
    assert res["selected"] is None
    assert res["filtered"] == WANT_FILTERED
    assert res["message"] == WANT_MESSAGE


def test_pod_without_claims_still_gets_the_preemption_message() -> None:
    # DynamicResources' PreFilter ran (and Skipped): its state exists, PostFilter is Unschedulable.
    objs = [node("n1", cpu="1"), pod("p", containers=[{"name": "c", "image": "busybox",
                                                       "resources": {"requests": {"cpu": "2"}}}])]
    (res,) = run(objs)
    assert res["message"] == ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
                              "1 Preemption is not helpful for scheduling.")
