"""DynamicResources' Filter and Score fast paths (``DRAState.plain``: every claim a user claim still
to allocate, so Filter goes straight to the allocator with one claims list; ``score_nodes``: all 0
at once when no claim has a ``firstAvailable`` request) equal the general path: on random nodes,
slices, claims (unallocated, allocated on a node, with ``firstAvailable`` subrequests), every
node's Filter status and allocation and every node's score are the same with the fast paths as
with them turned off (``plain`` cleared after PreFilter, scores node by node)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.dynamic_resources import STATE_KEY, DynamicResources
from tests.unit.plugins.test_dynamic_resources import _snapshot, claim, dclass, dev, ex, node, pod, rslice, uses

Obj = dict[str, Any]
D = "gpu.example.com"
NODES = ["n0", "n1", "n2", "n3"]


@st.composite
def clusters(draw: st.DrawFn) -> list[Obj]:
    objs: list[Obj] = [node(n) for n in NODES]
    objs.append(dclass("gpu", [f'device.driver == "{D}"']))
    for n in NODES:
        devices = [dev(f"d{i}", {"model": {"string": draw(st.sampled_from(["a", "b"]))}})
                   for i in range(draw(st.integers(0, 3)))]
        objs.append(rslice(f"s-{n}", D, n, node=n, devices=devices))
    names = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["exact", "exact", "first", "allocated"]))
        name = f"c{i}"
        names.append(name)
        if kind == "first":
            req: Obj = {"name": "r", "firstAvailable": [
                {"name": "big", **ex(count=2)}, {"name": "one", **ex(sel=['device.attributes["gpu.example.com"]'
                                                                          '.model == "a"'])}]}
            objs.append(claim(name, [req]))
        elif kind == "allocated":
            on = draw(st.sampled_from(NODES))
            alloc = {"devices": {"results": [{"request": "r", "driver": D, "pool": on, "device": "d0"}]},
                     "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                         {"key": "metadata.name", "operator": "In", "values": [on]}]}]}}
            objs.append(claim(name, [{"name": "r", "exactly": ex()}], allocation=alloc))
        else:
            objs.append(claim(name, [{"name": "r", "exactly": ex(count=draw(st.integers(1, 2)))}]))
    objs.append(pod("p", uses(*names)))
    return objs


def _cycle(objs: list[Obj], fast: bool) -> tuple[Any, ...]:
    snap = _snapshot(objs)
    plugin = DynamicResources()
    pi = PodInfo(next(o for o in objs if o["kind"] == "Pod"))
    state = CycleState(snap)
    nodes: list[NodeInfo] = snap.node_info_list
    _, pst = plugin.pre_filter(state, pi, nodes)
    if not pst.is_success():
        return ("prefilter", int(pst.code), tuple(pst.reasons))
    s = state.read(STATE_KEY)
    if not fast:
        s.plain = None

    def key(x: Status) -> tuple[int, tuple[str, ...]]:
        return int(x.code), tuple(x.reasons)

    statuses = [key(plugin.filter(state, pi, ni)) for ni in nodes]
    feasible = [ni for ni, k in zip(nodes, statuses, strict=True) if k[0] == 0]
    if fast:
        scores, sst = plugin.score_nodes(state, pi, feasible)
    else:
        pairs = [plugin.score(state, pi, ni) for ni in feasible]
        scores = [p[0] for p in pairs]
        sst = next((p[1] for p in pairs if not p[1].is_success()), Status.success())
    return statuses, dict(s.node_allocations), scores, key(sst)


@settings(max_examples=120, deadline=None)
@given(clusters())
def test_fast_paths_equal_the_general_path(objs: list[Obj]) -> None:
    assert _cycle(objs, fast=True) == _cycle(objs, fast=False)
