"""PodInfo's memo of resource parses (``REQUESTS`` in ``py_scheduler/framework/memo.py``,
issue 21's start-up work: the initial sync parses every bound Pod, and the Pods of one workload share
their resources) must be invisible: a PodInfo built after any other Pod was parsed equals a plain
parse (memo empty) in every field, and fails with the same error.

Upstream: ``pkg/scheduler/framework/types.go`` (``PodInfo`` parses each Pod; the memo is py-scheduler's
own), ``staging/src/k8s.io/component-helpers/resource/helpers.go`` (``PodRequests``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.framework import memo, types
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.types import PodInfo
from tests.unit.test_reparse_property import pod_versions

Obj = dict[str, Any]

ODD = st.sampled_from(["1", 1, 1.0, True, float("nan"), float("inf"), -1, "-1", "1.5", 1.5, "abc", None, [], {}])
"""Quantities as JSON and YAML can give them: equal-looking values of different types, invalid ones."""


def _fields(pi: PodInfo) -> tuple[Any, ...]:
    return (pi.uid, pi.namespace, pi.name, pi.key, pi.labels, pi.priority, pi.requests, pi.non0_cpu,
            pi.non0_mem, pi.ports)


def _outcome(pod: Obj) -> tuple[Any, ...]:
    try:
        return ("ok", _fields(PodInfo(copy.deepcopy(pod))))
    except PodParseError as exc:
        return ("error", exc.field, str(exc))


def _plain(pod: Obj) -> tuple[Any, ...]:
    memo.REQUESTS.clear()
    try:
        return _outcome(pod)
    finally:
        memo.REQUESTS.clear()


@st.composite
def odd_pod(draw: st.DrawFn) -> Obj:
    """A Pod with a few quantities replaced by odd values (the memo must tell them apart)."""
    pod, _ = draw(pod_versions())
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["containers", "initContainers", "resources", "overhead"]))
        value = draw(ODD)
        spec = pod["spec"]
        if where in ("containers", "initContainers"):
            if not spec.get(where):
                continue
            c = spec[where][draw(st.integers(0, len(spec[where]) - 1))]
            res = c.setdefault("resources", {})
            res.setdefault(draw(st.sampled_from(["requests", "limits"])), {})[
                draw(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]))] = value
        elif where == "resources":
            spec["resources"] = {"requests": {"cpu": value}}
        else:
            spec["overhead"] = {draw(st.sampled_from(["cpu", "nvidia.com/gpu"])): value}
    return pod


def _toggle_restart_policy(pod: Obj) -> None:
    for c in pod["spec"].get("initContainers") or []:
        c["restartPolicy"] = None if c.get("restartPolicy") == "Always" else "Always"


def _rename_containers(pod: Obj) -> None:
    for key in ("containers", "initContainers"):
        for c in pod["spec"].get(key) or []:
            c["name"] = {"c": "d", "d": "c", "i": "c", "j": "i"}.get(c["name"], "c")


def _requests_as_numbers(pod: Obj) -> None:
    for key in ("containers", "initContainers"):
        for c in pod["spec"].get(key) or []:
            reqs = (c.get("resources") or {}).get("requests") or {}
            for name, v in list(reqs.items()):
                reqs[name] = int(v) if isinstance(v, str) and v.isdigit() else v


def _other_overhead(pod: Obj) -> None:
    pod["spec"]["overhead"] = None if pod["spec"].get("overhead") else {"cpu": "50m"}


def _other_status(pod: Obj) -> None:
    status = pod.setdefault("status", {}) if isinstance(pod.get("status"), dict) else {}
    pod["status"] = status
    status["containerStatuses"] = [{"name": "c", "allocatedResources": {"cpu": "3"}}]


def _resize_infeasible(pod: Obj) -> None:
    pod["status"] = {"conditions": [{"type": "PodResizePending", "reason": "Infeasible"}]}


MUTATIONS = [_toggle_restart_policy, _rename_containers, _requests_as_numbers, _other_overhead, _other_status,
             _resize_infeasible]


@st.composite
def siblings(draw: st.DrawFn) -> list[Obj]:
    """A Pod and copies of it differing in one input of the resource parse only (the near misses a
    memo key could confuse)."""
    pod = draw(st.one_of(odd_pod(), pod_versions().map(lambda v: v[1])))
    out = [pod]
    for mutate in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3)):
        twin = copy.deepcopy(pod)
        mutate(twin)
        out.append(twin)
    return out


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(siblings(), min_size=1, max_size=3).map(lambda groups: [p for g in groups for p in g]))
def test_memoized_parse_equals_a_plain_parse(pods: list[Obj]) -> None:
    expected = [_plain(p) for p in pods]
    memo.REQUESTS.clear()
    try:
        for _ in range(2):  # the second round is all memo hits where the first parse succeeded
            assert [_outcome(p) for p in pods] == expected
    finally:
        memo.REQUESTS.clear()


def test_pods_of_one_template_parse_their_resources_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = types.pod_requests

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(types, "pod_requests", counting)
    memo.REQUESTS.clear()

    def pod(i: int) -> Obj:
        return {"metadata": {"name": f"p{i}", "uid": f"u{i}", "labels": {"i": str(i)}},
                "spec": {"nodeName": f"n{i}", "containers": [{"name": "c", "image": f"img{i}", "resources": {
                    "requests": {"cpu": "100m", "memory": "1Gi"}}}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}

    infos = [PodInfo(pod(i)) for i in range(10)]
    assert len(calls) == 2  # the first Pod: with and without the scoring defaults
    assert {(pi.requests.milli_cpu, pi.requests.memory, pi.non0_cpu) for pi in infos} == {(100, 2**30, 100)}
    infos[0].requests.milli_cpu = 5  # a PodInfo's Resource is its own
    assert PodInfo(pod(11)).requests.milli_cpu == 100
    memo.REQUESTS.clear()


def test_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo.REQUESTS, "size", 8)
    memo.REQUESTS.clear()
    for i in range(20):
        PodInfo({"metadata": {"name": f"p{i}"}, "spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": f"{i + 1}m"}}}]}})
    assert len(memo.REQUESTS) == 8
    memo.REQUESTS.clear()
