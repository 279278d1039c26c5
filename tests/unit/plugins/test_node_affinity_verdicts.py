"""NodeAffinity's batch Filter keeps per-affinity verdict columns across cycles (``_VerdictColumn``,
issue 21); on a snapshot that changes between cycles its answers must stay those of ``filter`` node
by node (upstream ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go`` Filter).

Hypothesis draws the nodes, the plugin's added affinity, a few incoming Pods' nodeSelector /
required affinity, and a sequence of steps: a Node relabelled (a new Node object, or an equal copy),
a node added or removed (the snapshot's list replaced), a Pod assumed (generations move, Node
objects do not), and the chunk handed to ``filter_nodes``: a run from anywhere (wrapping around the
list's end, as Filter's rotating start gives), any subset in any order, or clones of the NodeInfos.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo
from py_scheduler.plugins.node_affinity import NodeAffinity

Obj = dict[str, Any]

_labels = st.fixed_dictionaries({}, optional={"zone": st.sampled_from(["a", "b", "c"]),
                                              "disk": st.sampled_from(["ssd", "hdd"]),
                                              "pool": st.sampled_from(["x", "y"])})
_requirement = st.fixed_dictionaries({
    "key": st.sampled_from(["zone", "disk", "pool"]),
    "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    "values": st.lists(st.sampled_from(["a", "b", "ssd", "x"]), min_size=1, max_size=2, unique=True),
}).map(lambda r: {k: v for k, v in r.items() if k != "values" or r["operator"] in ("In", "NotIn")})
_term = st.fixed_dictionaries({"matchExpressions": st.lists(_requirement, min_size=1, max_size=2)})
_spec = st.one_of(
    st.fixed_dictionaries({"nodeSelector": st.dictionaries(st.sampled_from(["zone", "disk"]),
                                                           st.sampled_from(["a", "ssd"]), min_size=1)}),
    st.fixed_dictionaries({"affinity": st.fixed_dictionaries({"nodeAffinity": st.fixed_dictionaries({
        "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries({
            "nodeSelectorTerms": st.lists(_term, min_size=1, max_size=2)})})})}),
)
_step = st.tuples(st.sampled_from(["relabel", "copy", "add", "remove", "assume", "none"]), st.integers(0, 10**6),
                  _labels, st.sampled_from(["run", "subset", "clones"]), st.integers(0, 10**6), st.integers(0, 2))


def _node(name: str, labels: dict[str, str]) -> Obj:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"allocatable": {"pods": "110"}}}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(_labels, min_size=1, max_size=12), specs=st.lists(_spec, min_size=1, max_size=3),
       added=st.one_of(st.none(), _term), steps=st.lists(_step, min_size=1, max_size=10), data=st.data())
def test_filter_nodes_equals_filter_as_the_snapshot_changes(nodes: list[dict[str, str]], specs: list[Obj],
                                                           added: Obj | None, steps: list[Any],
                                                           data: st.DataObject) -> None:
    snap = Snapshot.from_objects([_node(f"n{i}", lb) for i, lb in enumerate(nodes)])
    args = {} if added is None else {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [added]}}}
    pl = NodeAffinity.create(args, None)  # type: ignore[arg-type]
    for k, (what, pick, labels, chunk_kind, start, which) in enumerate(steps):
        lst = snap.node_info_list
        ni = lst[pick % len(lst)]
        if what == "relabel":
            ni.set_node(_node(ni.name, labels))
        elif what == "copy":  # an equal Node object, not the same one (an informer resync)
            assert ni.node is not None
            ni.set_node(copy.deepcopy(ni.node))
        elif what == "add":
            new = NodeInfo(_node(f"new{k}", labels))
            snap.node_info_map[new.name] = new
            snap.node_info_list = [*lst, new]
        elif what == "remove" and len(lst) > 1:
            snap.node_info_list = [n for n in lst if n is not ni]
        elif what == "assume":
            snap.assume(PodInfo({"metadata": {"name": f"p{k}", "namespace": "d", "uid": f"u{k}"}, "spec": {}}),
                        ni.name)
        lst = snap.node_info_list
        n = len(lst)
        if chunk_kind == "run":
            length = 1 + start % n
            chunk = [lst[(pick + i) % n] for i in range(length)]
        elif chunk_kind == "subset":
            chunk = data.draw(st.permutations(lst)).copy()[: 1 + start % n]
        else:
            chunk = [x.clone() for x in lst]
        pod = PodInfo({"metadata": {"name": "in", "namespace": "d", "uid": f"in{k}"},
                       "spec": specs[which % len(specs)]})
        state = CycleState(snap)
        _, s = pl.pre_filter(state, pod, lst)
        if not s.is_success():
            continue
        want = [(int(x.code), tuple(x.reasons)) for x in (pl.filter(state, pod, ni) for ni in chunk)]
        got = pl.filter_nodes(state, pod, chunk)
        if got is None:
            assert all(c == 0 for c, _ in want)
        else:
            assert [(int(x.code), tuple(x.reasons)) for x in got] == want
