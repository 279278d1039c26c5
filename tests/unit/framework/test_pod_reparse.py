"""PodInfo.reparse: a newer version of a Pod reuses the earlier parse only when nothing the
constructor reads changed (spec, identity, labels, the in-place-resize status fields), and then
equals a fresh parse; the cache (assumed Pod confirmed by the watch, bound Pod updates) and the
queue (status updates of pending Pods) use it.

Upstream: ``pkg/scheduler/framework/types.go`` (``PodInfo.Update``),
``staging/src/k8s.io/component-helpers/resource/helpers.go`` (``PodRequests`` reads the container
statuses' ``allocatedResources`` / ``resources`` and the ``PodResizePending`` condition).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from py_scheduler.cache.cache import Cache
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import PodInfo, same_parse_inputs
from py_scheduler.queue.scheduling_queue import PriorityQueue

Obj = dict[str, Any]


def _pod() -> Obj:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "1",
                         "labels": {"app": "a"}, "annotations": {"x": "1"}},
            "spec": {"nodeName": "n1", "priority": 5,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                                     "ports": [{"containerPort": 80, "hostPort": 8080}]}]},
            "status": {"phase": "Pending", "startTime": "2026-01-01T00:00:00Z"}}


def _fields(pi: PodInfo) -> tuple[Any, ...]:
    return (pi.uid, pi.namespace, pi.name, pi.key, pi.labels, pi.priority, pi.requests, pi.non0_cpu,
            pi.non0_mem, pi.ports)


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    def apply(pod: Obj) -> None:
        *parents, last = path.split(".")
        d = pod
        for k in parents:
            d = d.setdefault(k, {})
        d[last] = value
    return apply


# (mutation, parse reused, memo kept)
MUTATIONS: list[tuple[str, Callable[[Obj], None], bool, bool]] = [
    ("resourceVersion", _set("metadata.resourceVersion", "2"), True, True),
    ("phase", _set("status.phase", "Running"), True, True),
    ("PodScheduled condition", _set("status.conditions", [{"type": "PodScheduled", "status": "True"}]), True, True),
    ("container status without resources", _set("status.containerStatuses", [{"name": "c", "ready": True}]),
     True, True),
    ("init status overridden by one without resources",
     _set("status", {"initContainerStatuses": [{"name": "c", "allocatedResources": {"cpu": "2"}}],
                     "containerStatuses": [{"name": "c"}], "startTime": "2026-01-01T00:00:00Z"}), True, True),
    ("allocatedResources", _set("status.containerStatuses",
                                [{"name": "c", "allocatedResources": {"cpu": "2"}}]), False, True),
    ("status resources", _set("status.containerStatuses",
                              [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]), False, True),
    ("resize infeasible", _set("status.conditions", [{"type": "PodResizePending", "reason": "Infeasible"}]),
     False, True),
    ("pod-level allocated", _set("status.allocatedResources", {"cpu": "1"}), False, True),
    ("requests", _set("spec.containers", [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]), False, False),
    ("nodeName", _set("spec.nodeName", "n2"), False, False),
    ("priority", _set("spec.priority", 7), False, False),
    ("labels", _set("metadata.labels", {"app": "b"}), False, False),
    ("uid", _set("metadata.uid", "u2"), False, False),
    ("annotations", _set("metadata.annotations", {"x": "2"}), True, False),
    ("startTime", _set("status.startTime", "2026-01-02T00:00:00Z"), True, False),
    ("status not an object", _set("status", "bogus"), True, False),
    ("status gone", _set("status", None), True, False),
]


SPEC_MEMO: PodMemo[int] = PodMemo("test/spec", PodInput.SPEC)
ANNOTATIONS_MEMO: PodMemo[int] = PodMemo("test/annotations", PodInput.ANNOTATIONS)
START_MEMO: PodMemo[int] = PodMemo("test/startTime", PodInput.START_TIME)
STATUS_MEMO: PodMemo[int] = PodMemo("test/status", PodInput.STATUS)


def _status(pod: Obj) -> dict[str, Any]:
    st = pod.get("status")
    return st if isinstance(st, dict) else {}


@pytest.mark.parametrize(("what", "mutate", "reused", "memo_kept"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_reparse_equals_a_fresh_parse(what: str, mutate: Callable[[Obj], None], reused: bool,
                                      memo_kept: bool) -> None:
    """A reparsed PodInfo equals a fresh parse and keeps exactly the memos whose declared inputs are
    unchanged (``memo_kept``: the annotations and the whole status are unchanged)."""
    old = _pod()
    pi = PodInfo(old)
    for m in (SPEC_MEMO, ANNOTATIONS_MEMO, START_MEMO, STATUS_MEMO):
        m.put(pi, 1)
    new = copy.deepcopy(old)
    mutate(new)
    out = pi.reparse(new)
    assert out.pod is new
    assert _fields(out) == _fields(PodInfo(new))
    assert (out.requests is pi.requests) == reused == same_parse_inputs(old, new)
    if not reused:
        assert out.memos == {}
        return
    assert out.labels is new["metadata"]["labels"]  # the new version's own dict is kept
    ann_same = old["metadata"].get("annotations") == new["metadata"].get("annotations")
    start_same = _status(old).get("startTime") == _status(new).get("startTime")
    rest_same = ({k: v for k, v in _status(old).items() if k != "startTime"}
                 == {k: v for k, v in _status(new).items() if k != "startTime"})
    assert SPEC_MEMO.peek(out) == 1  # spec unchanged whenever the parse is reused
    assert (ANNOTATIONS_MEMO.peek(out) == 1) == ann_same
    assert (START_MEMO.peek(out) == 1) == start_same
    assert (STATUS_MEMO.peek(out) == 1) == rest_same
    assert (ann_same and start_same and rest_same) == (out.memos is pi.memos)
    if memo_kept:
        assert ann_same and start_same


def test_reparse_of_a_malformed_version_raises_naming_the_field() -> None:
    pi = PodInfo(_pod())
    new = _pod()
    new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(PodParseError) as exc:
        pi.reparse(new)
    assert exc.value.field == "spec.containers[0].resources.requests.cpu"


def test_cache_confirms_an_assumed_pod_with_its_parse_and_accounts_changes() -> None:
    cache = Cache()
    cache.add_node({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}})
    pod = _pod()
    assumed = PodInfo(pod)
    cache.assume_pod(assumed)
    bound = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"},
             "status": {**pod["status"], "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    cache.add_pod(bound)
    confirmed = cache.get_pod(bound)
    assert confirmed is not None and not cache.is_assumed_pod(bound)
    assert confirmed.pod is bound and confirmed.requests is assumed.requests
    ni = cache.node_info("n1")
    assert ni is not None and ni.requested.milli_cpu == 250 and len(ni.pods) == 1
    # an in-place resize reported in the status is parsed and accounted
    resized = {**bound, "metadata": {**bound["metadata"], "resourceVersion": "3"},
               "status": {**bound["status"], "containerStatuses": [
                   {"name": "c", "allocatedResources": {"cpu": "1"}, "resources": {"requests": {"cpu": "1"}}}]}}
    cache.update_pod(bound, resized)
    assert ni.requested.milli_cpu == 1000 and len(ni.pods) == 1
    # a malformed version is skipped (logged, counted), its earlier version no longer accounted
    broken = copy.deepcopy(resized)
    broken["metadata"]["resourceVersion"] = "4"
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    cache.update_pod(resized, broken)
    assert cache.malformed_pods == 1 and ni.requested.milli_cpu == 0


def test_queue_status_update_reuses_the_parse_and_a_spec_change_parses() -> None:
    q = PriorityQueue({})
    pod = _pod()
    del pod["spec"]["nodeName"]
    q.add(pod)
    first = q.get("ns", "p")
    assert first is not None
    pi = first.pod_info
    status_update = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"},
                     "status": {"conditions": [{"type": "PodScheduled", "status": "False"}],
                                "startTime": pod["status"]["startTime"]}}
    q.update(pod, status_update)
    qpi = q.get("ns", "p")
    assert qpi is not None and qpi.pod is status_update and qpi.pod_info.requests is pi.requests
    bigger = copy.deepcopy(status_update)
    bigger["metadata"]["resourceVersion"] = "3"
    bigger["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    q.update(status_update, bigger)
    qpi = q.get("ns", "p")
    assert qpi is not None and qpi.pod_info.requests.milli_cpu == 2000 and qpi.parse_error is None
    broken = copy.deepcopy(bigger)
    broken["metadata"]["resourceVersion"] = "4"
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    q.update(bigger, broken)
    qpi = q.get("ns", "p")
    assert qpi is not None and qpi.parse_error is not None
    assert qpi.parse_error.field == "spec.containers[0].resources.requests.cpu"


def test_random_status_versions_reparse_like_a_fresh_parse() -> None:
    import random

    rng = random.Random(3)

    def status() -> Obj:
        st: Obj = {}
        for key in ("initContainerStatuses", "containerStatuses"):
            if rng.random() < 0.6:
                entries = []
                for name in rng.sample(["c", "i", "x"], rng.randint(0, 3)):
                    cs: Obj = {"name": name}
                    if rng.random() < 0.4:
                        cs["allocatedResources"] = {"cpu": rng.choice(["100m", "1", "3"])}
                    if rng.random() < 0.4:
                        cs["resources"] = rng.choice([{}, {"requests": {"memory": "1Gi"}}, {"limits": {}}])
                    entries.append(cs)
                st[key] = entries
        if rng.random() < 0.3:
            st["conditions"] = [{"type": rng.choice(["PodResizePending", "Ready"]),
                                 "reason": rng.choice(["Infeasible", "Deferred"])}]
        if rng.random() < 0.2:
            st["allocatedResources"] = {"cpu": "2"}
        if rng.random() < 0.2:
            st["resources"] = {"requests": {"cpu": "2"}}
        return st

    base = _pod()
    base["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "500m"}}}]
    reused = 0
    for _ in range(400):
        old = {**base, "status": status()}
        new = {**base, "status": status()}
        out = PodInfo(old).reparse(new)
        assert _fields(out) == _fields(PodInfo(new)), (old["status"], new["status"])
        reused += same_parse_inputs(old, new)
    assert reused > 20  # the comparison does find equal inputs
