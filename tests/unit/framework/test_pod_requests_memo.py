"""PodInfo parses each ResourceList once (``ParseMemo`` shared by validation and both request
aggregates) and skips the allocated / actuated aggregates of a Pod without container statuses;
the requests must be those of the full computation.

Upstream: ``staging/src/k8s.io/component-helpers/resource/helpers.go`` (``PodRequests``,
``AggregateContainerRequests``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.memo import ParseMemo
from py_scheduler.framework.pod_resources import pod_requests
from py_scheduler.framework.types import _NON_MISSING, PodInfo

Obj = dict[str, Any]


def _rl(rng: random.Random) -> Obj:
    out: Obj = {}
    for name, values in (("cpu", ["100m", "1", "2500m"]), ("memory", ["64Mi", "1Gi"]),
                         ("nvidia.com/gpu", ["1", "2"]), ("hugepages-2Mi", ["4Mi"])):
        if rng.random() < 0.5:
            out[name] = rng.choice(values)
    return out


def _container(rng: random.Random, name: str, init: bool) -> Obj:
    c: Obj = {"name": name}
    if rng.random() < 0.8:
        c["resources"] = {"requests": _rl(rng)}
        if rng.random() < 0.3:
            c["resources"]["limits"] = _rl(rng)
    if init and rng.random() < 0.4:
        c["restartPolicy"] = "Always"
    return c


def _pod(rng: random.Random) -> Obj:
    spec: Obj = {"containers": [_container(rng, f"c{i}", False) for i in range(rng.randint(1, 3))]}
    if rng.random() < 0.5:
        spec["initContainers"] = [_container(rng, f"i{i}", True) for i in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        spec["resources"] = {"requests": _rl(rng)}
    if rng.random() < 0.2:
        spec["overhead"] = {"cpu": "50m"}
    status: Obj = {}
    if rng.random() < 0.4:
        names = [c["name"] for c in spec["containers"] + spec.get("initContainers", [])]
        status["containerStatuses"] = [{"name": n, "allocatedResources": _rl(rng)} for n in names
                                       if rng.random() < 0.5]
    if rng.random() < 0.1:
        status["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
    return {"metadata": {"name": "p", "uid": "u"}, "spec": spec, "status": status}


def _without_shortcut(pod: Obj) -> Obj:
    """The same Pod with a status for a container it does not have: no effect on the requests, but
    the allocated / actuated aggregates are computed in full."""
    status = dict(pod["status"])
    status["containerStatuses"] = [*status.get("containerStatuses", []), {"name": "not-a-container"}]
    return {**pod, "status": status}


def test_random_pods_memo_and_shortcut_give_the_full_computation() -> None:
    rng = random.Random(11)
    for _ in range(300):
        pod = _pod(rng)
        full = _without_shortcut(pod)
        for defaults in (None, _NON_MISSING):
            memo = ParseMemo()
            assert pod_requests(pod, defaults, memo) == pod_requests(full, defaults)
            assert pod_requests(pod, defaults, memo) == pod_requests(full, defaults)  # memo warm
        pi, ref = PodInfo(pod), PodInfo(full)
        assert (pi.requests, pi.non0_cpu, pi.non0_mem) == (ref.requests, ref.non0_cpu, ref.non0_mem)


def test_memo_does_not_hide_a_malformed_quantity() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "1"}}},
        {"name": "b", "resources": {"requests": {"cpu": "x1"}}}]}}
    with pytest.raises(PodParseError) as exc:
        PodInfo(pod)
    assert exc.value.field == "spec.containers[1].resources.requests.cpu" and exc.value.value == "x1"
