"""DynamicResources' queueing hints: which ResourceClaim and Pod events may let a Pod it rejected
through (Queue) and which cannot (QueueSkip).

The cases follow the intent of upstream's ``TestIsSchedulableAfterClaimChange`` and
``TestIsSchedulableAfterTargetPodUpdate`` (``pkg/scheduler/framework/plugins/dynamicresources/
dynamicresources_test.go``, v1.37.2). As there, the plugin reads the Pod's claims from the latest
informer state, which already holds the event's new object when the hint runs (the informers apply
a delta before they offer it to the queue): each case puts it into the Handle's store first.
A last test runs the hints through the real scheduling queue.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from py_scheduler.cache.kinds import KINDS_BY_NAME
from py_scheduler.framework.events import ActionType, ClusterEvent, QueueingHint, Resource
from py_scheduler.framework.runtime import Framework
from py_scheduler.plugins.dynamic_resources import DynamicResources
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q, PriorityQueue
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]
QUEUE, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
POD_UID = "uid-pod"


def claim(name: str, owner_uid: str | None = None, allocated: bool = False, uid: str | None = None) -> Obj:
    c: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
              "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                           "resourceVersion": "1"},
              "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}
    if owner_uid is not None:
        c["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "pod", "uid": owner_uid,
                                             "controller": True}]
    if allocated:
        c["status"] = {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "gpu.example.com", "pool": "p", "device": "g0"}]}}}
    return c


def pod_with_claim_name(name: str = "my-claim") -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pod", "namespace": "default", "uid": POD_UID},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}}


def pod_with_templates(*generated: str | None, templates: int = 1) -> Obj:
    """A Pod with ``templates`` template entries; ``generated[i]`` is the claim name recorded for
    entry ``i`` in ``status.resourceClaimStatuses`` (no status entry past ``generated``)."""
    p: Obj = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "pod", "namespace": "default", "uid": POD_UID},
              "spec": {"containers": [{"name": "c", "image": "x"}],
                       "resourceClaims": [{"name": f"gpu{i}", "resourceClaimTemplateName": "tmpl"}
                                          for i in range(templates)]}}
    if generated:
        p["status"] = {"resourceClaimStatuses": [{"name": f"gpu{i}", "resourceClaimName": g}
                                                 for i, g in enumerate(generated)]}
    return p


def plugin(*objects: Obj) -> DynamicResources:
    return DynamicResources.create({}, plain_handle(objects))


def put(pl: DynamicResources, obj: Obj) -> None:
    """What the informers do before offering the event: store the new object."""
    assert pl.handle is not None and pl.handle.objects is not None
    pl.handle.objects.store.apply(KINDS_BY_NAME[obj["kind"]], None, obj)  # type: ignore[attr-defined]


def updated(obj: Obj, **changes: Any) -> Obj:
    new = copy.deepcopy(obj)
    rv = int(new["metadata"]["resourceVersion"]) + 1
    new["metadata"]["resourceVersion"] = str(rv)
    for k, v in changes.items():
        if k == "status":
            new["status"] = v
        else:
            new["metadata"][k] = v
    return new


# -- ResourceClaim add / update / delete ----------------------------------------------------------------
def test_deleted_claim_without_allocation_is_skipped() -> None:
    assert plugin().is_schedulable_after_claim_change(pod_with_templates("my-claim"), claim("my-claim"), None) == SKIP


def test_deleted_allocated_claim_frees_devices() -> None:
    old = claim("other", allocated=True)
    assert plugin().is_schedulable_after_claim_change(pod_with_templates("my-claim"), old, None) == QUEUE


@pytest.mark.parametrize(("old", "new"), [(None, "not-a-claim"), ("not-a-claim", claim("my-claim")), (None, None)])
def test_an_object_that_is_no_claim_is_an_error(old: Any, new: Any) -> None:
    """Upstream returns an error, which the queue counts as Queue."""
    with pytest.raises(TypeError):
        plugin(claim("my-claim")).is_schedulable_after_claim_change(pod_with_claim_name(), old, new)


def test_generated_claim_of_another_pod_is_skipped() -> None:
    """The Pod's status names the claim, but its controller is another Pod: still not schedulable."""
    new = claim("my-claim", owner_uid=POD_UID + "123", allocated=True)
    pl = plugin()
    put(pl, new)
    assert pl.is_schedulable_after_claim_change(pod_with_templates("my-claim"), None, new) == SKIP


def test_unrelated_claim_is_skipped() -> None:
    mine = claim("my-claim", owner_uid=POD_UID, allocated=True)
    other = claim("my-claim-foo", owner_uid=POD_UID, allocated=True)
    pl = plugin(mine)
    put(pl, other)
    assert pl.is_schedulable_after_claim_change(pod_with_templates("my-claim"), None, other) == SKIP
    # an update of the unrelated claim that changes its status is skipped too
    newer = updated(other, status={"allocation": other["status"]["allocation"], "reservedFor": [{"uid": "x"}]})
    put(pl, newer)
    assert pl.is_schedulable_after_claim_change(pod_with_templates("my-claim"), other, newer) == SKIP


def test_the_pods_claim_created() -> None:
    new = claim("my-claim")
    pl = plugin()
    put(pl, new)
    assert pl.is_schedulable_after_claim_change(pod_with_claim_name(), None, new) == QUEUE


def test_the_pods_claim_still_missing_is_skipped() -> None:
    """The event's claim is not in the informers' state (not the Pod's claim): the Pod cannot pass."""
    assert plugin().is_schedulable_after_claim_change(pod_with_claim_name(), None, claim("my-claim")) == SKIP


def test_finalizer_added_is_skipped() -> None:
    old = claim("my-claim")
    new = updated(old, finalizers=["foo"])
    pl = plugin(old)
    put(pl, new)
    assert pl.is_schedulable_after_claim_change(pod_with_claim_name(), old, new) == SKIP


@pytest.mark.parametrize("status", [{"allocation": {}}, {"reservedFor": [{"resource": "pods", "name": "p",
                                                                         "uid": "u"}]}])
def test_status_change_of_the_pods_claim(status: Obj) -> None:
    old = claim("my-claim")
    new = updated(old, status=status)
    pl = plugin(old)
    put(pl, new)
    assert pl.is_schedulable_after_claim_change(pod_with_claim_name(), old, new) == QUEUE


def test_deallocation_of_any_claim_queues() -> None:
    mine = claim("my-claim")
    other = claim("other", allocated=True)
    pl = plugin(mine, other)
    deallocated = updated(other, status={})
    put(pl, deallocated)
    assert pl.is_schedulable_after_claim_change(pod_with_claim_name(), other, deallocated) == QUEUE


def test_deallocation_is_skipped_while_the_pods_claim_is_not_generated() -> None:
    """Upstream checks the Pod's own claims first: freed devices do not help a Pod whose claim
    does not exist yet."""
    other = claim("other", allocated=True)
    pl = plugin(other)
    deallocated = updated(other, status={})
    put(pl, deallocated)
    assert pl.is_schedulable_after_claim_change(pod_with_templates(), other, deallocated) == SKIP


def test_claim_being_deleted_is_skipped() -> None:
    old = claim("my-claim")
    new = updated(old, deletionTimestamp="2026-01-01T00:00:00Z", status={"allocation": {}})
    pl = plugin(old)
    put(pl, new)
    assert pl.is_schedulable_after_claim_change(pod_with_claim_name(), old, new) == SKIP


def test_without_an_object_lister_every_claim_event_queues() -> None:
    pl = DynamicResources()  # no Handle: no object lister
    assert pl.is_schedulable_after_claim_change(pod_with_claim_name(), None, claim("unrelated")) == QUEUE


# -- the Pod's own update (generated claims recorded) -----------------------------------------------
def test_target_pod_update_not_a_pod_is_an_error() -> None:
    with pytest.raises(TypeError):
        plugin().is_schedulable_after_target_pod_update(pod_with_templates(), None, "not-a-pod")


def test_target_pod_update_with_its_generated_claim_present() -> None:
    pl = plugin(claim("my-claim", owner_uid=POD_UID))
    assert pl.is_schedulable_after_target_pod_update(pod_with_templates(), None, pod_with_templates("my-claim")) \
        == QUEUE


def test_target_pod_update_with_the_generated_claim_missing() -> None:
    assert plugin().is_schedulable_after_target_pod_update(pod_with_templates(), None,
                                                          pod_with_templates("my-claim")) == SKIP


def test_target_pod_update_with_one_of_two_claims_generated() -> None:
    pl = plugin(claim("my-claim", owner_uid=POD_UID))
    new = pod_with_templates("my-claim", templates=2)
    assert pl.is_schedulable_after_target_pod_update(pod_with_templates(templates=2), None, new) == SKIP


# -- through the scheduling queue -----------------------------------------------------------------------
def test_queue_requeues_on_new_slice_but_not_on_an_unrelated_claim() -> None:
    """A Pod rejected by DynamicResources (no devices) stays unschedulable when another Pod's claim
    gets allocated, and is moved (to backoffQ: its backoff has not expired) by a new ResourceSlice."""
    mine = claim("my-claim")
    dra = plugin(mine)
    fw = Framework("default-scheduler", [(PrioritySort(), 0), (dra, 1)])
    q = PriorityQueue({"default-scheduler": fw})
    q.add(pod_with_claim_name())
    qpi = q.pop_nowait()
    assert qpi is not None
    qpi.unschedulable_plugins = frozenset({"DynamicResources"})
    assert q.add_unschedulable_if_not_present(qpi) == UNSCHEDULABLE_Q

    other = claim("other")
    other_allocated = updated(other, status={"allocation": {}, "reservedFor": [{"uid": "uid-x"}]})
    put(dra, other_allocated)
    q.move_all_to_active_or_backoff(ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.UPDATE), other,
                                    other_allocated)
    assert q.where("default", "pod") == UNSCHEDULABLE_Q

    slice_ = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
              "spec": {"driver": "gpu.example.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                       "nodeName": "n", "devices": [{"name": "g0"}]}}
    q.move_all_to_active_or_backoff(ClusterEvent(Resource.RESOURCE_SLICE, ActionType.ADD), None, slice_)
    assert q.where("default", "pod") == BACKOFF_Q


def _plain_claim_change_hint(pod: dict[str, Any], old: Any, new: Any, get: Any) -> QueueingHint:
    """The claim hint's walk without the name check in front (the plain form): every claim of the
    Pod looked up, then upstream's order of answers."""
    from py_scheduler.framework.errors import PodParseError
    from py_scheduler.plugins.dynamic_resources.claims import (
        ClaimUnschedulable,
        allocation_of,
        claim_uid,
        pod_claims_now,
    )

    if new is None:
        return QueueingHint.QUEUE if allocation_of(old) is not None else QueueingHint.QUEUE_SKIP
    try:
        claims = pod_claims_now(pod, get)
    except (ClaimUnschedulable, PodParseError):
        return QueueingHint.QUEUE_SKIP
    if old is not None and allocation_of(old) is not None and allocation_of(new) is None:
        return QueueingHint.QUEUE
    if not any(claim_uid(c) == claim_uid(new) for c in claims):
        return QueueingHint.QUEUE_SKIP
    if old is None:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP if (old.get("status") or {}) == (new.get("status") or {}) else QueueingHint.QUEUE


@pytest.mark.parametrize("seed", range(20))
def test_the_claim_hints_name_check_answers_as_the_plain_walk(seed: int) -> None:
    """Random Pods (named and template claims, recorded or not), claim stores (missing, being
    deleted, another owner) and claim events (adds, updates with or without status changes,
    deallocations, other namespaces): the name check in front of the walk (which spares looking up
    every claim of every waiting Pod for a claim that is none of theirs) changes no answer."""
    import random

    from py_scheduler.plugins.dynamic_resources.claims import claim_change_hint

    rng = random.Random(seed)
    names = ["a", "b", "c", "d"]

    def claim(name: str, ns: str = "ns", **extra: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"{ns}-{name}-{rng.randrange(2)}"}
        if rng.random() < 0.1:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        if rng.random() < 0.5:
            meta["ownerReferences"] = [{"uid": rng.choice(["pod-uid", "other"]), "controller": True}]
        return {"metadata": meta, "spec": {}, **extra}

    allocated = {"status": {"allocation": {"devices": {"results": []}}}}
    for _ in range(200):
        entries, statuses = [], []
        for i in range(rng.randrange(0, 4)):
            if rng.random() < 0.5:
                entries.append({"name": f"e{i}", "resourceClaimName": rng.choice(names)})
            else:
                entries.append({"name": f"e{i}", "resourceClaimTemplateName": "t"})
                if rng.random() < 0.7:
                    statuses.append({"name": f"e{i}", "resourceClaimName": rng.choice(names)})
        pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"}, "spec": {"resourceClaims": entries},
               "status": {"resourceClaimStatuses": statuses}}
        store = {n: claim(n, **(allocated if rng.random() < 0.3 else {})) for n in names if rng.random() < 0.8}

        def get(ns: str, name: str, store: dict[str, Any] = store) -> Any:
            return store.get(name) if ns == "ns" else None

        name = rng.choice(names)
        new = copy.deepcopy(store[name]) if name in store and rng.random() < 0.7 else claim(
            name, ns=rng.choice(["ns", "other"]))
        if rng.random() < 0.3:
            new["status"] = {"reservedFor": [{"uid": "x"}]}
        old = None if rng.random() < 0.3 else (
            copy.deepcopy(new) | (allocated if rng.random() < 0.4 else {"status": {}}))
        assert claim_change_hint(pod, old, new, get) == _plain_claim_change_hint(pod, old, new, get), (pod, old, new)
