"""Filter with Pods nominated to some nodes (after a preemption) runs the other nodes plugin by plugin
in chunks (``Algorithm._find_nodes_that_pass_filters``, issue 32 item 4): the feasible nodes, every
rejected node's status, the plugins counted and the error raised must equal upstream's plain form,
``RunFilterPluginsWithNominatedPods`` node by node from the rotating start (kept here, in the test).

Hypothesis draws the cluster (the parity generator's scenarios), the incoming Pod, which other
pending Pods are nominated to which nodes (any priority, so some count for the incoming Pod and some
do not), and the start index.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm, Diagnosis
from py_scheduler.framework.config import ProfileConfig, SchedulerConfig, build_framework
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.parity_lib.generator import scenario  # noqa: E402

Outcome = tuple[list[str], dict[str, tuple[int, tuple[str, ...], str]], set[str], str]


def _framework(nominated: dict[str, list[PodInfo]]) -> Framework:
    prof = ProfileConfig()
    fw = build_framework(prof, SchedulerConfig(profiles=[prof]), registry=registry)
    fw.connect_nominator(nominated)
    return fw


def _key(s: Status) -> tuple[int, tuple[str, ...], str]:
    return int(s.code), tuple(s.reasons), s.plugin or ""


def _plain(fw: Framework, state: CycleState, pod: PodInfo, nodes: list[NodeInfo], start: int) -> Outcome:
    """Upstream's search: node by node from ``start``, every node (fewer than 100 nodes: all are
    searched), Filter with the nominated Pods added."""
    feasible: list[str] = []
    statuses: dict[str, tuple[int, tuple[str, ...], str]] = {}
    plugins: set[str] = set()
    try:
        for i in range(len(nodes)):
            ni = nodes[(start + i) % len(nodes)]
            s = fw.run_filter_with_nominated_pods(state, pod, ni)
            if s.is_success():
                feasible.append(ni.name)
            else:
                statuses[ni.name] = _key(s)
                if s.plugin:
                    plugins.add(s.plugin)
    except SchedulingError as exc:
        return [], {}, set(), str(exc)
    return feasible, statuses, plugins, ""


def _chunked(fw: Framework, state: CycleState, pod: PodInfo, nodes: list[NodeInfo], start: int) -> Outcome:
    alg = Algorithm(rng=random.Random(0))
    alg.next_start_node_index = start
    d = Diagnosis()
    try:
        got = alg._find_nodes_that_pass_filters(fw, state, pod, nodes, d, len(nodes))
    except SchedulingError as exc:
        return [], {}, set(), str(exc)
    return ([ni.name for ni in got], {n: _key(s) for n, s in d.node_to_status.items()},
            set(d.unschedulable_plugins), "")


@st.composite
def _case(draw: st.DrawFn) -> tuple[Snapshot, PodInfo, dict[str, list[PodInfo]], int]:
    objects = scenario(draw(st.integers(0, 3)), draw(st.integers(0, 400)))
    try:
        snap = Snapshot.from_object_list(objects)
        pending = [PodInfo(o) for o in objects if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
    except PodParseError:
        return draw(st.nothing())
    if not pending or not snap.node_info_list:
        return draw(st.nothing())
    pod = draw(st.sampled_from(pending))
    names = [ni.name for ni in snap.node_info_list]
    nominated: dict[str, list[PodInfo]] = {}
    others: Sequence[PodInfo] = [p for p in pending if p is not pod]
    for other in draw(st.lists(st.sampled_from(others), max_size=6, unique_by=id)) if others else []:
        nominated.setdefault(draw(st.sampled_from(names)), []).append(other)
    if draw(st.booleans()):  # the incoming Pod itself nominated somewhere: never added for itself
        nominated.setdefault(draw(st.sampled_from(names)), []).append(pod)
    return snap, pod, nominated, draw(st.integers(0, len(names) - 1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                    HealthCheck.too_slow])
@given(case=_case())
def test_chunks_with_nominated_pods_equal_the_node_by_node_search(
        case: tuple[Snapshot, PodInfo, dict[str, list[PodInfo]], int]) -> None:
    snap, pod, nominated, start = case
    fw = _framework(nominated)
    nodes = list(snap.node_info_list)
    state = CycleState(snap)
    try:
        _, s, _ = fw.run_pre_filter(state, pod, nodes)
    except SchedulingError:
        return
    if not s.is_success():
        return
    plain = _plain(fw, state.clone(), pod, nodes, start)
    chunked = _chunked(fw, state.clone(), pod, nodes, start)
    assert chunked == plain


def test_a_node_with_a_nominated_pod_is_judged_with_it() -> None:
    """The case the chunks must not lose: the only node with room has a higher-priority Pod
    nominated to it, which takes that room."""
    def node(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
                "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}}}

    def pending(name: str, priority: int) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name},
                "spec": {"priority": priority, "containers": [{"name": "c", "image": "i", "resources": {
                    "requests": {"cpu": "800m"}}}]}}

    snap = Snapshot.from_objects([node("a"), node("b")])
    pod, high, low = PodInfo(pending("p", 5)), PodInfo(pending("high", 10)), PodInfo(pending("low", 1))
    for nominated, feasible in (({"a": [high]}, ["b"]), ({"a": [low]}, ["a", "b"]), ({"a": [high], "b": [high]}, [])):
        fw = _framework(nominated)
        state = CycleState(snap)
        fw.run_pre_filter(state, pod, list(snap.node_info_list))
        got = _chunked(fw, state, pod, list(snap.node_info_list), 0)
        assert got[0] == feasible and got == _plain(fw, state, pod, list(snap.node_info_list), 0)
